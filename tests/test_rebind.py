"""Re-grounding by rebinding (stages.reground_rebind, finmbs/mbs/rebind.py) end to end on the shipped
agreements' real text: an engine-built finance problem over AvidXchange's Default Rate rebound onto Alphatec
and Realty Income (the analogous clause found, its figure quoted verbatim, the answer recomputed from d''s
figure, the entity d''s company, the round trip by a scripted teacher on the real OpenAI-compatible server),
and an agreement with no analogous clause counted as one reason naming it. The index is a small in-memory
stand-in (paragraph chunks, word-overlap search) so the test needs no ingest."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

from test_finance_leaves import PASSAGE, FinanceTeacher, config

from finmbs.llm import Gateway
from finmbs.mbs import finance_operators as fo
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.rebind import rebound
from finmbs.mbs.reground import Regrounder
from finmbs.records import Chunk, Document, Problem, Provenance, Snippet, SyntheticTree, TreeNode

DOCS = Path(__file__).resolve().parents[1] / "corpora" / "finance" / "docs"
TEXTS = {
    "alphatec": (
        (DOCS / "alphatec_2023_credit_security_guaranty_agreement.txt").read_text(),
        "Alphatec Holdings, Inc.",
    ),
    "realty": ((DOCS / "realty_income_2023_term_loan_agreement.txt").read_text(), "Realty Income Corporation"),
    "acme": ("“Closing Date” means the date on which $5,000,000 of Loans is first funded.\n" * 3, "Acme Corp."),
}


class WordIndex:
    """The Index calls rebinding makes, over whole texts: a chunk per paragraph (blank-line or line breaks),
    search by shared words."""

    settings = SimpleNamespace(context_tokens=0, context_scope="section")

    def document_text(self, doc_id: str) -> str:
        return TEXTS[doc_id][0]

    def chunks(self, doc_id: str) -> list[Chunk]:
        text, out = TEXTS[doc_id][0], []
        for i, m in enumerate(re.finditer(r"[^\n]+(?:\n(?!\n)[^\n]+){0,3}", text)):
            out.append(
                Chunk(chunk_id=f"{doc_id}-{i}", text=m.group(0), doc_id=doc_id, char_start=m.start(), char_end=m.end())
            )
        return out

    def search(self, query: str, k: int, doc_id: str, concepts: bool = False):
        words = set(re.findall(r"[a-z]{4,}", query.lower()))
        ranked = sorted(self.chunks(doc_id), key=lambda c: -len(words & set(re.findall(r"[a-z]{4,}", c.text.lower()))))
        return [SimpleNamespace(chunk=c) for c in ranked[:k]]


def seed() -> Problem:
    return Problem(
        id="av",
        question="q",
        answer="2%",
        domain="finance",
        entity="AvidXchange, Inc.",
        snippet=Snippet(text=PASSAGE, doc_id="avidxchange"),
    )


def engine_tree() -> SyntheticTree:
    [figure] = fo.quoted_figures("m = quote('two percent (2%)', 0.02)\nanswer = m * 100", PASSAGE)
    built = fo.build("finance:applied", [figure], fo.terms_for("av", figure.value, None))
    built.names = ["the Default Rate"]
    problem = Problem(
        id="av.f0",
        question=built.question("AvidXchange"),
        answer=fo.answer_of(built, built.expect),
        domain="finance",
        entity="AvidXchange, Inc.",
        snippet=seed().snippet,
        provenance=Provenance(seed_id="av", method="mbs", stage="leaf"),
        meta={"program": built.program(), "authored_by": "engine", "finance_op": built.spec()},
    )
    return SyntheticTree(seed_id="av", index=0, root=TreeNode(problem=problem, path="0"))


async def rebind_on(server, tmp_path: Path, doc_id: str):
    server.handler = FinanceTeacher(spans=True)
    ctx = Context(config=config(server.base_url, tmp_path / "c.sqlite"), gateway=Gateway(cache_path=None))
    ledger, index = Ledger("av"), WordIndex()
    doc = Document(doc_id=doc_id, source_path=f"{doc_id}.txt", title=doc_id, company=TEXTS[doc_id][1], sha256="x")
    regrounder = Regrounder(ctx, index, seed(), [], ledger)  # type: ignore[arg-type]
    tree = await rebound(ctx, index, seed(), engine_tree(), doc, 0, "default rate", regrounder, ledger)  # type: ignore[arg-type]
    return tree, ledger


async def test_rebinding_onto_alphatec_and_realty_recomputes_from_their_figure(tmp_path, openai_server):
    source = engine_tree().root.problem
    for doc_id, name in (("alphatec", "the Default Rate of Interest"), ("realty", "the Post-Default Rate")):
        tree, ledger = await rebind_on(openai_server, tmp_path / doc_id, doc_id)
        assert tree is not None, [r.reason for r in ledger.rejected]
        problem = tree.root.problem
        assert problem.entity == TEXTS[doc_id][1] and problem.snippet.doc_id == doc_id
        assert problem.question.startswith(f"Under {TEXTS[doc_id][1].split()[0]}")
        assert f"accrues as {name} provides" in problem.question and name.split()[-1] in problem.snippet.text
        assert problem.meta["rebound"] == {"two percent (2%)": "two percent (2.0%)"}
        assert "two percent (2.0%)" in problem.snippet.text  # the quote is verbatim in d'
        assert problem.snippet.text in TEXTS[doc_id][0]
        assert problem.meta["round_trip"] == "3 of 3" and problem.meta["regrounded_by"] == "rebind"
        assert "prose_traces" not in problem.meta  # tallied at final calibration, if it qualifies
        details = source.meta["finance_op"]["terms"]
        exact = Fraction(details["principal"]) * (Fraction(details["base"]) + Fraction(2, 100)) * details["days"] / 360
        assert problem.answer == f"${float(round(exact, 2)):,.2f}"


async def test_an_agreement_with_no_analogous_clause_is_one_counted_reason(tmp_path, openai_server):
    tree, ledger = await rebind_on(openai_server, tmp_path, "acme")
    assert tree is None
    [rejection] = ledger.rejected
    assert rejection.data["check"] == "rebind" and rejection.data["document"] == "acme"
    assert rejection.reason.startswith("no analogous clause: acme:")
