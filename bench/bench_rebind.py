"""Re-grounding by rebinding alone (`stages.reground_rebind`, finmbs/mbs/rebind.py): for every (seed, other
agreement) pair, does the rebinding find the analogous figure? The seed's figure is the add-on its passage
quotes (the default-rate increase of the quickstart seeds); the answer key is each shipped agreement's
default interest clause (`bench_reground_concept.DEFAULT_RATE_CLAUSE`, found by its own words) and the figure
a hand reading binds there (2 percentage points in all four). A pair is a hit when d' overlaps that clause
and the figure bound is 0.02; a miss prints the clause d' came from; a refusal prints its counted reason.
No model is called (the concept is the concepts.yaml entry, or none).

    finmbs ingest corpora/finance/docs --index-path /tmp/fidx
    python bench/bench_rebind.py --index-path /tmp/fidx [--seeds corpora/finance/seeds-quickstart-finance.jsonl]
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

from finmbs.ingest import find_verbatim, open_index
from finmbs.ingest.concepts import named_concept
from finmbs.mbs import finance_operators as fo
from finmbs.mbs.rebind import Wanted, clause

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reground_concept import DEFAULT_RATE_CLAUSE  # noqa: E402
from bench_reground_select import bench_context  # noqa: E402

KEY_VALUE = Fraction(2, 100)  # the figure a hand reading binds in every shipped default interest clause


def seed_wanted(passage: str) -> Wanted | None:
    """The seed passage's first add-on figure, as the quote rebinding fills."""
    for span in fo.candidate_spans(passage):
        figure = fo.span_figure(passage, span, "margin")
        if figure.role == fo.ADD_ON:
            name = fo.engine_name(passage, figure) or ""
            return Wanted("margin", figure.text, figure.value, figure.role, figure.base, figure.context, name)
    return None


def main(args: argparse.Namespace) -> None:
    ctx, seeds = bench_context(args)
    hits = pairs = 0
    with open_index(ctx.config.index) as index:
        for seed in seeds:
            if seed.snippet is None or (wanted := seed_wanted(seed.snippet.text)) is None:
                print(f"{seed.id}: no add-on figure in its passage")
                continue
            concept = named_concept(seed.question, seed.snippet.text)
            for doc in index.documents():
                if doc.doc_id == seed.snippet.doc_id:
                    continue
                pairs += 1
                text = index.document_text(doc.doc_id)
                key = find_verbatim(DEFAULT_RATE_CLAUSE.get(doc.doc_id, "\0"), text)
                snippet, figures, reasons = clause(index, doc, seed, concept, [wanted])
                if snippet is None:
                    print(f"{seed.id} -> {doc.doc_id}: REFUSED {reasons[0] if reasons else ''}")
                    continue
                overlap = key is not None and snippet.char_start < key[1] and key[0] < snippet.char_end
                hit = overlap and figures[0].value == KEY_VALUE
                hits += hit
                where = " ".join(snippet.text.split())[:110]
                print(f"{seed.id} -> {doc.doc_id}: {'HIT ' if hit else 'MISS'} {figures[0].text!r} in {where!r}")
    print(f"{hits} of {pairs} pairs found the analogous figure")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-path", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--seeds", default="corpora/finance/seeds-quickstart-finance.jsonl")
    main(parser.parse_args())
