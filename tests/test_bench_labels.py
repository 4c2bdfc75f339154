"""How bench/bench_labels.py scores `finmbs verify` output against the labels, and the program runner and
answer reading of bench/bench_program_vs_prose.py (no model: rows and programs written here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from finmbs.seeds import load_seeds

ROOT = Path(__file__).resolve().parents[1]


def bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def labels():
    return {p.id: p for p in load_seeds(ROOT / "bench" / "data" / "labels.jsonl")}


def verdict(status: str, answer: str | None, reason: str = "") -> dict:
    """A row as `finmbs verify` writes it (finmbs/mbs/labels.py LabelCheck, the fields the bench reads)."""
    return {"outcome": status, "answer": answer, "reason": reason, "check": None}


def test_each_outcome_is_scored_against_the_label(labels):
    b = bench("bench_labels")
    picked = [
        labels[i]
        for i in (
            "f-al-undrawn-fee-daycount",
            "f-al-default-rate",
            "f-al-exit-fee",
            "f-av-default-sofr",
            "m-fence-posts",
            "m-buses",
            "m-rope",
        )
    ]
    rows = {
        "f-al-undrawn-fee-daycount": verdict("verified", "$110,958.90"),  # the wrong label, accepted as stated
        "f-al-default-rate": verdict("relabeled", "11.5%"),  # relabeled to the right answer, written otherwise
        "f-al-exit-fee": verdict("verified", "$1,170,000.00"),
        "f-av-default-sofr": verdict("rejected", None, "program gives 7.85% and traces give 9.85%"),
        "m-fence-posts": verdict("relabeled", "11"),  # relabeled, but to another wrong answer
        "m-buses": verdict("relabeled", "4"),  # a right label changed to a wrong one
    }  # m-rope: missing from the output
    tallies, results = b.score(picked, rows)
    assert results == {
        "f-al-undrawn-fee-daycount": "wrong: accepted wrong",
        "f-al-default-rate": "wrong: fixed",
        "f-al-exit-fee": "right: kept",
        "f-av-default-sofr": "right: rejected",
        "m-fence-posts": "wrong: relabeled wrong",
        "m-buses": "right: relabeled wrong",
        "m-rope": "wrong: missing",
    }
    assert tallies["finance"].reasons == ["f-av-default-sofr (right): program gives 7.85% and traces give 9.85%"]
    assert tallies["math"].counts["wrong"] == 2 and tallies["finance"].counts["right"] == 2


def test_a_rejection_names_its_check_and_the_program_result():
    b = bench("bench_labels")
    got = b.outcome(
        {
            "id": "x",
            "outcome": "rejected",
            "answer": None,
            "reason": "program and traces disagree",
            "check": "program",
            "program_answer": "7.85%",
        }
    )
    assert (got.status, got.answer) == ("rejected", None)
    assert got.reason == "[program] program and traces disagree (program: 7.85%)"


def test_minimal_runner_returns_answer_and_contains_bad_programs():
    b = bench("bench_program_vs_prose")
    assert b.minimal_run("apples = 7 * 6\nprint('ignored')\nanswer = apples / 2").value == 21.0
    assert b.minimal_run("while True:\n    pass", timeout_s=2).error == "timeout"
    assert "answer" in b.minimal_run("total = 3").error
    assert "ZeroDivisionError" in b.minimal_run("answer = 1 / 0").error


def test_program_and_answer_read_from_a_reply():
    b = bench("bench_program_vs_prose")
    from finmbs.verify.program import program_in

    reply = "Here it is:\n```python\nx = 2\nanswer = x + 1\n```\nThe answer is 3."
    assert program_in(reply) == "x = 2\nanswer = x + 1"
    assert program_in("```py\n    x = 2\n    answer = x\n```") == "x = 2\nanswer = x"  # an indented block is dedented
    assert program_in("The answer is 3.") is None and program_in("answer = 4") == "answer = 4"
    # no fence: the prose around the program is left out (it was run as code, a SyntaxError on its first words)
    prose = "Here is the step-by-step breakdown:\nq = 540 // 24\nif q > 0:\n    d = 30 - q\nanswer = q\nSo 18 quarters."
    assert program_in(prose) == "q = 540 // 24\nif q > 0:\n    d = 30 - q\nanswer = q"
    assert program_in("```python\nx = 2\nanswer = x\nThe answer") == "x = 2\nanswer = x"  # a fence left open
    assert program_in("The result: answer = 18 quarters") is None  # no line that binds answer parses
    assert [b.as_answer(v) for v in (12.0, 2.5, 1 / 3, "1,200", True, float("nan"))] == [
        "12",
        "2.5",
        "0.333333",
        "1200",
        None,
        None,
    ]
