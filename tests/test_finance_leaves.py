"""The engine's finance leaf hardening end to end (stages.finance_operators, finmbs/mbs/finance_leaves.py)
through a real HTTP server speaking the OpenAI API: a scripted teacher that names the quoted figure (well, or
as a benchmark), writes the round trip's programs from the question and passage alone by hand-written rules
(choosing the passage's figure among the listed spans), and misses every prose trace; students that miss
everything. Checked: the variants kept (labels the engine's exact values, round-trip tallies, the provision
named by the teacher or, when its name is a benchmark, by the engine), a teacher whose programs miss making
the round trip reject each one, and the switch off."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

from test_engine_leaves import config as math_config

from finmbs.config import PAPER_VALUES, RunConfig, StageParams
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.engine_leaves import operator_funnel
from finmbs.mbs.finance_leaves import on
from finmbs.mbs.leaves import harder_leaves
from finmbs.records import Decision, Problem, Snippet, Trace, TreeNode
from finmbs.testing.server import Reply, Request

PASSAGE = (
    "“Default Rate” means (a) with respect to any SOFR Loan, a rate per annum\nequal to two percent (2%) in excess of "
    "the Adjusted Term SOFR Rate or the Adjusted Daily Simple SOFR Rate, as applicable, plus the then Applicable "
    "Margin for such Loans"
)
QUESTION = (
    "Under AvidXchange's credit agreement, the Default Rate for a SOFR Loan is a rate per annum how many percentage "
    "points in excess of the Adjusted Term SOFR Rate (plus the then Applicable Margin)?"
)
_N = r"\$?([\d,]+(?:\.\d+)?)"


def num(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def solving(question: str) -> str | None:
    """The scripted teacher's program body over the figure `m` (the Default Rate's increase), by rules."""
    rate = re.search(rf"otherwise bear interest at {_N}% per annum", question)
    if not rate:
        return None
    r = f"({num(rate[1])} / 100 + m)"
    if "At what rate per annum" in question:
        return f"answer = {r} * 100"
    principal = re.search(rf"a loan of {_N}", question)
    if second := re.search(
        rf"first period of (\d+) days\. For the next (\d+) days the rate it would otherwise bear is {_N}%", question
    ):
        r2 = f"({num(second[3])} / 100 + m)"
        p = num(principal[1])
        return f"answer = round({p} * {r} * {second[1]} / 360 + {p} * {r2} * {second[2]} / 360, 2)"
    if owed := re.search(rf"{_N} of interest accrues on it\. What is the loan's principal", question):
        days = re.search(r"Over (\d+) days", question)
        return f"answer = round({num(owed[1])} * 360 / ({r} * {days[1]}))"
    if owed := re.search(rf"{_N} of interest has accrued on it\. For how many days", question):
        return f"answer = round({num(owed[1])} * 360 / ({num(principal[1])} * {r}))"
    days = re.search(r"over (\d+) days", question)
    return f"answer = round({num(principal[1])} * {r} * {days[1]} / 360, 2)"


class FinanceTeacher:
    """The scripted server's handler: `name` is what it calls the figure; `programs_miss`: its round-trip
    programs all add 1; `spans`: it chooses the listed span stating 2% (else AvidXchange's own text)."""

    def __init__(self, name: str = "the Default Rate", programs_miss: bool = False, spans: bool = False):
        self.name, self.programs_miss, self.spans = name, programs_miss, spans
        self.asked: list[str] = []

    def __call__(self, request: Request) -> Reply:
        text = request.text
        if "write only the few words that name the figure" in text:
            self.asked.append("name")
            return Reply(texts=[json.dumps({"name": self.name})])
        if "Write a short Python program that solves" in text:
            self.asked.append("program")
            problem = re.search(r"<problem>\n(.+?)\n</problem>", text, re.S)
            body = solving(problem[1]) if problem else None
            if body is None:  # the leaf's own lookup
                body = "answer = m * 100"
            if self.programs_miss:
                body += " + 1"
            figure = "two percent (2%)"
            if self.spans:  # the listed span that binds 0.02 (another agreement writes it its own way)
                figure = re.search(r'\[\d+\] "([^"]+)" = 0\.02 ', text)[1]
            reply = {"figures": [{"name": "m", "figure": figure}], "program": body}
            return Reply(texts=[json.dumps(reply)] * request.n)
        self.asked.append("solve")  # prose traces and students: always wrong
        return Reply(texts=["I think it is \\boxed{7}."] * request.n)


def config(base_url: str, cache: Path, **stages: object) -> RunConfig:
    """The math tests' scripted roles (test_engine_leaves.config), in finance, figures chosen among spans."""
    base = math_config(base_url, cache, R=1, **stages)
    verify = base.verify.model_copy(update={"quote_spans": True})
    return base.model_copy(update={"domain": "finance", "verify": verify})


def leaf() -> TreeNode:
    problem = Problem(
        id="av",
        question=QUESTION,
        answer="2%",
        domain="finance",
        entity="AvidXchange, Inc.",
        snippet=Snippet(text=PASSAGE, doc_id="avidxchange"),
        meta={"program": "m = quote('two percent (2%)', 0.02)\nanswer = m * 100"},
    )
    trace = Trace(text="two percent", answer="2%", model="teacher", verified=True)
    node = TreeNode(problem=problem, trace=trace, path="0", decisions=[Decision(stage="traces", outcome="accepted")])
    node.student_accuracy["student"] = 1.0
    return node


async def hardened(server, tmp_path: Path, teacher: FinanceTeacher, **stages: object):
    server.handler = teacher
    ctx = Context(config=config(server.base_url, tmp_path / "c.sqlite", **stages), gateway=Gateway(cache_path=None))
    node, ledger = leaf(), Ledger("av")
    return await harder_leaves(ctx, node, ledger), node, ledger


async def test_the_engine_builds_names_and_round_trips_each_finance_variant(tmp_path, openai_server):
    kept, node, ledger = await hardened(openai_server, tmp_path, FinanceTeacher())
    by_op = {n.problem.meta["operator"]: n.problem for n in kept}
    expected = {
        "finance:all_in_rate",
        "finance:applied",
        "finance:backward:principal",
        "finance:second_period",
        "finance:backward:days",
    }
    assert set(by_op) == expected, [r.reason for r in ledger.rejected]
    for problem in by_op.values():
        meta = problem.meta
        assert meta["authored_by"] == "engine" and meta["round_trip"] == "3 of 3" and meta["named_by"] == "teacher"
        assert "the Default Rate" in problem.question and "2%" not in problem.question
        assert "prose_traces" not in meta  # drawn at final calibration, for those that qualify
        assert meta["finance_op"]["figures"][0]["text"] == "two percent (2%)"
        assert meta["finance_op"]["figures"][0]["provision"] == "the Default Rate"
    applied = by_op["finance:applied"]
    details = applied.meta["operator_details"]
    rate = Fraction(details["base"]) + Fraction(1, 50)
    exact = Fraction(details["principal"]) * rate * details["days"] / 360
    assert applied.answer == f"${float(round(exact, 2)):,.2f}"
    assert by_op["finance:backward:principal"].answer == f"${int(details['principal']):,}"
    assert by_op["finance:backward:days"].answer == str(details["days"])
    assert by_op["finance:all_in_rate"].answer == f"{float(rate * 100):.2f}%"
    funnel = operator_funnel([n.problem for n in kept], [])  # each finance operator its own row
    assert set(funnel) == {"finance:all_in_rate", "finance:applied", "finance:backward", "finance:second_period"}
    assert funnel["finance:backward"]["qualified"] == 2


async def test_a_benchmark_name_falls_back_to_the_engines_name(tmp_path, openai_server):
    kept, _, _ = await hardened(openai_server, tmp_path, FinanceTeacher(name="the Adjusted Term SOFR Rate"))
    assert kept
    for node in kept:
        meta = node.problem.meta
        assert meta["named_by"] == "engine" and "the Default Rate" in node.problem.question
        assert "Adjusted Term SOFR" not in node.problem.question.split("accrues as")[1]
        assert any("names a benchmark" in why or "name a benchmark" in why for why in meta["naming_failed"])


async def test_a_name_the_passage_does_not_define_for_the_figure_falls_back_to_the_defined_term(
    tmp_path, openai_server
):
    # the 1.5B's name in the finance quickstart: a margin of another provision, for the 2% that the Default
    # Rate's definition holds; it passes the role check (a margin, not a benchmark), not the passage's
    kept, _, _ = await hardened(
        openai_server, tmp_path, FinanceTeacher(name="the Applicable Margin for Term SOFR Loans")
    )
    assert kept
    for node in kept:
        meta = node.problem.meta
        assert meta["named_by"] == "engine" and "Applicable Margin" not in node.problem.question
        assert any("defines the figure's provision as “Default Rate”" in why for why in meta["naming_failed"])


async def test_round_trip_misses_reject_every_variant(tmp_path, openai_server):
    kept, _, ledger = await hardened(openai_server, tmp_path, FinanceTeacher(programs_miss=True))
    assert kept == []
    checks = [r.data.get("check") for r in ledger.rejected if r.problem.meta.get("authored_by") == "engine"]
    assert checks.count("round_trip") == 5, [r.reason for r in ledger.rejected]


def test_the_switch_and_the_paper_profile(tmp_path):
    assert StageParams().finance_operators and PAPER_VALUES["stages.finance_operators"] is False
    assert PAPER_VALUES["stages.reground_rebind"] is False
    ctx = Context(config=config("http://x", tmp_path / "c.sqlite", finance_operators=False), gateway=Gateway())
    assert not on(ctx, leaf().problem)
    ctx = Context(config=config("http://x", tmp_path / "c.sqlite"), gateway=Gateway())
    assert on(ctx, leaf().problem)


async def test_a_lookup_no_teacher_program_reaches_gets_the_engines_quote(tmp_path, openai_server):
    from finmbs.mbs.labels import lookup_program, program_to_answer

    openai_server.handler = lambda request: Reply(texts=["answer = 0.02 + 0.005 = 0.025"] * request.n)
    ctx = Context(config=config(openai_server.base_url, tmp_path / "c.sqlite"), gateway=Gateway(cache_path=None))
    seed = leaf().problem.model_copy(update={"meta": {}})
    written, why = await program_to_answer(ctx, seed)
    assert why is None and written.meta["program"] == "answer = quote('two percent (2%)', 0.02)"
    assert written.meta["program_writer"] == "engine (lookup)"
    # the engine's program only where it is unambiguous: one figure stated once, of the answer's kind
    twice = seed.model_copy(update={"snippet": Snippet(text=PASSAGE + " and two percent (2%) more", doc_id="av")})
    assert lookup_program(ctx, twice) is None
    assert lookup_program(ctx, seed.model_copy(update={"answer": "3%"})) is None
    assert lookup_program(ctx, seed.model_copy(update={"answer": "2% or 3%"})) is None
    off = config(openai_server.base_url, tmp_path / "c.sqlite")
    off = off.model_copy(update={"verify": off.verify.model_copy(update={"lookup_programs": False})})
    assert lookup_program(Context(config=off, gateway=Gateway(cache_path=None)), seed) is None
    assert PAPER_VALUES["verify.lookup_programs"] is False
