"""Re-grounding step 1, searched by the seed passage alone and also by the seed's concept
(`stages.reground_concept`), side by side: for every (seed, unseen document) pair, is the document's
analogous clause among the excerpts the teacher sees, and is it the first excerpt (d' under
`stages.extract: retrieve`)? Then, for the passage + concept excerpts, as chunks (`stages.reground_document:
excerpts`) and as their small-to-big windows (`windows`): does one excerpt hold the whole clause, does d'
hold it, and how many characters the teacher reads.

The analogous clause is the one that states the default interest margin, found in each shipped agreement
by its own words (Alphatec Section 10.5, AvidXchange's "Default Rate" definition, Realty Income's
"Post-Default Rate" definition, Brown-Forman Section 2.13(c)); an excerpt is a hit when it overlaps that
clause's span of the stored document text. Unseen: no seed of the run comes from it, as in `finmbs grow`
(`--every-other`: every document but the seed's own). The concept is the seed's concepts.yaml entry, or
the config's first teacher names the provision through the gateway (no response cache).

    flock /tmp/finmbs-cpu.lock finmbs ingest corpora/finance/docs --index-path /tmp/fidx
    python bench/bench_reground_concept.py --index-path /tmp/fidx [--seeds corpora/finance/seeds-quickstart-finance.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from finmbs.ingest import find_verbatim, open_index
from finmbs.mbs.reground import EXCERPT_CHUNKS, document_chunks, excluded_documents, seed_concept, windows
from finmbs.records import Chunk

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reground_select import bench_context  # noqa: E402  (its config, index and seeds)

ROOT = Path(__file__).resolve().parents[1]
# each shipped agreement's default interest clause, by words it alone uses (whitespace runs aside)
DEFAULT_RATE_CLAUSE = {
    "alphatec_2023_credit_security_guaranty_agreement": "two percent (2.0%) per annum in excess of the rates "
    "otherwise payable under this Agreement",
    "avidxchange_2022_credit_and_security_agreement": "a rate per annum equal to two percent (2%) in excess of the "
    "Adjusted Term SOFR Rate",
    "realty_income_2023_term_loan_agreement": "the interest rate otherwise applicable to such Class of Loans plus "
    "an additional two percent (2.0%) per annum",
    "brown_forman_2023_credit_agreement": "2% per annum plus the rate otherwise applicable to such Loan",
}


def clause_rank(chunks: list[Chunk], span: tuple[int, int]) -> int | None:
    """1-based rank of the first excerpt that overlaps the clause's span, or None."""
    start, end = span
    for rank, chunk in enumerate(chunks, 1):
        if (
            chunk.char_start is not None
            and chunk.char_end is not None
            and chunk.char_start < end
            and start < chunk.char_end
        ):
            return rank
    return None


def holds_clause(chunk: Chunk, span: tuple[int, int]) -> bool:
    """The excerpt holds the whole clause's span."""
    return (
        chunk.char_start is not None
        and chunk.char_end is not None
        and chunk.char_start <= span[0]
        and span[1] <= chunk.char_end
    )


async def main(args: argparse.Namespace) -> None:
    ctx, seeds = bench_context(args, reground_concept=True)
    config, gateway = ctx.config, ctx.gateway
    counts = {"pairs": 0, "old_seen": 0, "new_seen": 0, "old_first": 0, "new_first": 0}
    whole = {shown: {"held": 0, "first": 0, "chars": 0} for shown in ("excerpts", "windows")}
    try:
        with open_index(config.index) as index:
            documents = index.documents()
            if not documents:
                raise SystemExit(f"no documents in the index at {args.index_path}: run `finmbs ingest` into it first")
            excluded = excluded_documents(index, seeds, []).excluded
            for seed in seeds:
                if seed.snippet is None:
                    continue
                concept = await seed_concept(ctx, seed)
                print(f"{seed.id}: concept {concept!r}")
                for doc in documents:
                    own = doc.doc_id == seed.snippet.doc_id
                    if (
                        own
                        or (doc.doc_id in excluded and not args.every_other)
                        or doc.doc_id not in DEFAULT_RATE_CLAUSE
                    ):
                        continue
                    span = find_verbatim(DEFAULT_RATE_CLAUSE[doc.doc_id], index.document_text(doc.doc_id))
                    if span is None:
                        raise SystemExit(f"{doc.doc_id}: its default rate clause is not in the stored text")
                    old = document_chunks(index, doc.doc_id, seed.snippet.text, EXCERPT_CHUNKS)
                    new = document_chunks(index, doc.doc_id, seed.snippet.text, EXCERPT_CHUNKS, concept)
                    was, now = clause_rank(old, span), clause_rank(new, span)
                    for shown, excerpts in (("excerpts", new), ("windows", windows(index, new))):
                        whole[shown]["held"] += any(holds_clause(c, span) for c in excerpts)
                        whole[shown]["first"] += bool(excerpts) and holds_clause(excerpts[0], span)
                        whole[shown]["chars"] += sum(len(c.text) for c in excerpts)
                    counts["pairs"] += 1
                    counts["old_seen"] += was is not None
                    counts["new_seen"] += now is not None
                    counts["old_first"] += was == 1
                    counts["new_first"] += now == 1
                    print(
                        f"  {doc.doc_id}: clause at excerpt {was or '-'} of {len(old)} (passage) -> "
                        f"{now or '-'} of {len(new)} (passage + concept)",
                        flush=True,
                    )
    finally:
        gateway.close()
    n = counts["pairs"]
    print(
        f"analogous clause among the excerpts: {counts['old_seen']}/{n} old, {counts['new_seen']}/{n} new; "
        f"first excerpt (d' under extract: retrieve): {counts['old_first']}/{n} old, {counts['new_first']}/{n} new"
    )
    for shown, c in whole.items():
        print(
            f"reground_document: {shown}: an excerpt holds the whole clause {c['held']}/{n}, d' (retrieve) holds it "
            f"{c['first']}/{n}, characters shown per document {c['chars'] / max(n, 1):,.0f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-path", required=True)
    parser.add_argument("--seeds", type=Path, default=ROOT / "corpora" / "finance" / "seeds-quickstart-finance.jsonl")
    parser.add_argument("--config", default=None)
    parser.add_argument(
        "--every-other", action="store_true", help="every document but the seed's own, other seeds' documents too"
    )
    asyncio.run(main(parser.parse_args()))
