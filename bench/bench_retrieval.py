"""Retrieval quality on FinanceBench, and the embedded-engine choice (Qdrant Edge vs qdrant-client local).

    nice python3 bench/bench_retrieval.py quality [--max-docs N] [--index-path DIR]
    nice python3 bench/bench_retrieval.py engines [--points 20000]

`quality`: ingest the FinanceBench PDFs (all, or the N smallest that questions use) into one index;
for each question whose evidence PDF is indexed, is an evidence page among the top 5 / 20 chunks for
the question text? Reported over the whole index and with the search restricted to the company.
`engines`: the same random vectors and payloads in both embedded engines behind the `Store`
interface; p50/p95 latency of a top-10 search with a payload filter, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.index import ClientStore, EdgeStore, Where, point_id

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "financebench"


def questions() -> list[dict]:
    return [json.loads(line) for line in (DATA / "financebench_open_source.jsonl").read_text().splitlines() if line.strip()]


def quality(args: argparse.Namespace) -> None:
    qs = questions()
    used = {e["doc_name"] for q in qs for e in q["evidence"]}
    pdfs = sorted((p for p in (DATA / "pdfs").glob("*.pdf") if p.stem in used), key=lambda p: p.stat().st_size)
    if args.max_docs:
        pdfs = pdfs[: args.max_docs]
    settings = IndexSettings(path=args.index_path)
    report = ingest_paths(pdfs, settings)
    print(f"ingested {report.documents} PDFs, {report.pages} pages, {report.chunks} chunks, {report.tables} tables "
          f"in {report.seconds:.0f} s ({report.pages / max(report.seconds, 1e-9):.2f} pages/s); skipped {len(report.skipped)}")
    indexed = {p.stem for p in pdfs}
    evaluated = [q for q in qs if any(e["doc_name"] in indexed for e in q["evidence"])]
    hits = {("all", 5): 0, ("all", 20): 0, ("company", 5): 0, ("company", 20): 0}
    started = time.perf_counter()
    with open_index(settings) as index:
        for q in evaluated:
            gold = {(e["doc_name"], e["evidence_page_num"] + 1) for e in q["evidence"]}
            for scope, company in (("all", None), ("company", q["company"])):
                ranked = [(h.chunk.doc_id, h.chunk.page) for h in index.search(q["question"], 20, company=company)]
                for k in (5, 20):
                    hits[(scope, k)] += any(r in gold for r in ranked[:k])
    n = len(evaluated)
    per_query_ms = (time.perf_counter() - started) / max(2 * n, 1) * 1000
    print(f"questions evaluated: {n} (evidence PDF indexed); search {per_query_ms:.0f} ms/query incl. embedding")
    for scope in ("all", "company"):
        print(f"  {scope:8s} recall@5 = {hits[(scope, 5)] / n:.3f}   recall@20 = {hits[(scope, 20)] / n:.3f}")


def _latency(store, name: str, vectors: list[list[float]], excluded: list[str]) -> list[float]:
    times = []
    for vector in vectors:
        start = time.perf_counter()
        store.query(name, vector, 10, Where(must_not={"doc_id": excluded}))
        times.append((time.perf_counter() - start) * 1000)
    return times


def engines(args: argparse.Namespace) -> None:
    rng = random.Random(0)
    dim = 384

    def vec() -> list[float]:
        return [rng.gauss(0, 1) for _ in range(dim)]

    points = [(point_id(str(i)), vec(), {"doc_id": f"doc{i % 200}", "source_path": "x", "company_key": f"c{i % 30}"}) for i in range(args.points)]
    queries = [vec() for _ in range(args.queries)]
    excluded = [f"doc{i}" for i in range(0, 200, 7)]
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for label, store in (("qdrant-edge", EdgeStore(Path(tmp) / "edge")), ("qdrant-client local", ClientStore(path=str(Path(tmp) / "local")))):
            start = time.perf_counter()
            store.ensure("bench", dim)
            store.upsert("bench", points)
            load_s = time.perf_counter() - start
            times = _latency(store, "bench", queries, excluded)
            store.close()
            results[label] = statistics.median(times)
            print(f"{label:20s} load {load_s:6.1f} s   p50 {statistics.median(times):8.2f} ms   p95 {statistics.quantiles(times, n=20)[-1]:8.2f} ms")
    print(f"p50 ratio qdrant-client local / qdrant-edge = {results['qdrant-client local'] / results['qdrant-edge']:.1f}x  ({args.points} points, filtered top-10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--max-docs", type=int, default=0, help="only the N smallest PDFs that questions use (0: all)")
    q.add_argument("--index-path", default=".finmbs/bench-financebench")
    e = sub.add_parser("engines")
    e.add_argument("--points", type=int, default=20000)
    e.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    {"quality": quality, "engines": engines}[args.cmd](args)


if __name__ == "__main__":
    main()
