"""The stages declared once (finmbs/mbs/stages.py): the names on disk, each method's order, the progress
bars `finmbs grow` shows, and the order the report lists rejections in."""

from __future__ import annotations

import json

from finmbs.mbs.context import Ledger
from finmbs.mbs.stages import METHOD_STAGES, Check, Stage, in_order, progress
from finmbs.records import Problem, Rejection


def problem(i: str) -> Problem:
    return Problem(id=i, question=f"Compute {i}.", answer="1")


def test_names_on_disk_are_the_plain_strings():
    rejection = Rejection(problem=problem("a"), stage=Stage.NOVELTY, reason="restates its seed")
    assert json.loads(rejection.model_dump_json())["stage"] == "novelty"
    assert Rejection.model_validate_json(rejection.model_dump_json()).stage == Stage.NOVELTY
    direct = ["traces", "direct", "reground", "novelty", "quality", "calibrate"]
    assert [str(s) for s in METHOD_STAGES["direct"]] == direct


def test_progress_bars_per_method():
    assert progress("mbs", True) == [
        "seeds",
        "traces",
        "students",
        "decompose",
        "leaf",
        "compose",
        "reground",
        "quality",
        "calibrate",
    ]
    assert progress("direct", True) == ["seeds", "traces", "direct", "reground", "quality", "calibrate"]
    assert "reground" not in progress("mbs", False)


def test_report_order_follows_the_declaration():
    names = ["zeta", "calibrate", "effectivity", "traces", "novelty", "decompose"]
    assert sorted(names, key=in_order) == ["traces", "decompose", "effectivity", "novelty", "calibrate", "zeta"]


def test_the_ledger_counts_as_it_rejects_each_problem_once():
    ledger = Ledger("s")
    ledger.reject(problem("s.d0c0"), Stage.DECOMPOSE, "reveals the answer", check=Check.ANSWER_LEAK, form="question")
    # a row of an older run, without data.form: its form read from the reason
    ledger.reject(problem("s.d0c1"), Stage.DECOMPOSE, "its worked solution states '25'", check=Check.ANSWER_LEAK)
    ledger.reject(problem("s.h0v0"), Stage.LEAF, "unverified", check=Check.PROGRAM)
    ledger.reject(problem("s.h0v0"), Stage.NOVELTY, "restates its seed")  # a second rejection: not counted
    since = len(ledger.rejected)
    ledger.reject(problem("s.s0"), Stage.NOVELTY, "restates its seed")
    ledger.reject(problem("s.s1"), Stage.NOVELTY, "restates a sibling")
    ledger.mark_roots(since, {"s.s0"})
    ledger.reject(problem("g"), Stage.REGROUND, "unverified", check=Check.VERIFY)
    ledger.reject(problem("h"), Stage.REGROUND, "too easy", check=Check.SCREEN)
    counts = ledger.counts.model_dump()
    assert counts == {
        **counts,
        "answer_leaks": 2,
        "leaks_by_answer": 0,
        "leaks_by_question": 1,
        "leaks_by_solution": 1,
        "program_rejected": 1,
        "novelty_rejected": 2,
        "gated_roots": 1,
        "reground_unverified": 1,
        "reground_too_easy": 1,
    }
    assert [r.data.get("root") for r in ledger.rejected[since : since + 2]] == [True, False]
