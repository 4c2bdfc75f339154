"""The answer-program sandbox (finmbs/verify/program.py) and quote() on a shipped agreement's passage.

Every bad program of issue #36's list is a one-line rejection with its reason, returned (never raised,
never a hang), and leaves no file behind; good programs give their exact answer."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from finmbs.verify.program import ProgramResult, run_program
from finmbs.verify.quotes import check_quote

ROOT = Path(__file__).resolve().parents[1]
ALPHATEC = ROOT / "corpora" / "finance" / "docs" / "alphatec_2023_credit_security_guaranty_agreement.txt"

BAD = {
    "infinite loop": ("while True:\n    pass", "time limit"),  # CPU, or wall-time on a loaded machine
    "allocate 10 GB": ("x = [0] * (10 * 1024**3)\nanswer = 1", "memory limit exceeded"),
    "allocate 10 GB as text": ("x = 'a' * (10 * 1024**3)\nanswer = len(x)", "memory limit exceeded"),
    "fork": ("import os\nos.fork()\nanswer = 1", "import of 'os' is not allowed"),
    "open a file": ("f = open('/etc/passwd')\nanswer = 1", "name 'open' is not defined"),
    "write a file": (
        "import pathlib\npathlib.Path('/tmp/pwned').write_text('x')\nanswer = 1",
        "import of 'pathlib' is not allowed",
    ),
    "open a socket": ("import socket\ns = socket.socket()\nanswer = 1", "import of 'socket' is not allowed"),
    "import os": ("import os\nanswer = 1", "import of 'os' is not allowed"),
    "import subprocess": ("import subprocess\nanswer = 1", "import of 'subprocess' is not allowed"),
    "from os import": ("from os import system\nanswer = 1", "import of 'os' is not allowed"),
    "__subclasses__": ("answer = ().__class__.__subclasses__()", "invalid attribute name"),
    "a module behind a module": (
        "import fractions\nanswer = fractions.sys.modules['os'].getpid()",
        "offers no public name 'sys'",
    ),
    "dunder through a string": ("answer = '{0.__class__}'.format(1)", "format"),
    "eval": ("answer = eval('1 + 1')", "Eval calls are not allowed"),
    "print 100 MB": ("print('x' * 100_000_000)\nanswer = 1", "printed output over"),
    "raise": ("raise ValueError('boom')", "raised ValueError: boom"),
    "a non-number": ("answer = 'fifty'", "answer is not a finite number: str"),
    "a boolean": ("answer = 3 > 2", "answer is not a finite number: bool"),
    "infinity": ("answer = float('inf')", "answer is not a finite number"),
    "no answer": ("x = 3", "did not bind answer"),
    "huge integer": ("answer = 10 ** 10 ** 10", "time limit"),
    "deep recursion": ("def f(n):\n    return f(n + 1)\nanswer = f(0)", "recursion too deep"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_program_is_one_line_rejection(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, why = BAD[name]
    monkeypatch.chdir(tmp_path)
    before = set(Path("/tmp").iterdir())
    start = time.monotonic()
    result = run_program(source, timeout_s=2)
    assert isinstance(result, ProgramResult)
    assert not result.ok and result.value is None and result.answer is None
    assert why in result.error, result.error
    assert "\n" not in result.error and len(result.error) <= 300
    assert time.monotonic() - start < 30  # the wall limit: timeout_s + START_S
    assert not Path("/tmp/pwned").exists()
    assert not list(tmp_path.iterdir())
    assert {p for p in Path("/tmp").iterdir() if p.name.startswith("pwned")} - before == set()


def test_the_worker_imports_only_what_it_runs_with() -> None:
    # every program pays the worker's imports in a fresh process: the model stack, pydantic and asyncio
    # are not among them (what they cost each run: docs/measurements.md)
    probe = "import sys, finmbs.verify.program_worker; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "finmbs.verify.program_worker" in loaded and "RestrictedPython" in loaded
    heavy = {"pydantic", "asyncio", "litellm", "numpy", "torch", "qdrant_client", "finmbs.llm", "finmbs.config"}
    assert not loaded & heavy, loaded & heavy


def test_good_programs_give_exact_answers() -> None:
    assert run_program("answer = 1470 // 25").answer == "58"
    assert run_program("answer = 0.1 + 0.2").answer == "0.3"
    third = run_program("from fractions import Fraction\nanswer = Fraction(2, 3)")
    assert third.ok and third.answer == "2/3"
    assert run_program("from fractions import Fraction\nanswer = Fraction(5, 4)").answer == "1.25"
    mixed = run_program(
        "import math, statistics, datetime\n"
        "days = (datetime.date(2024, 3, 1) - datetime.date(2024, 2, 1)).days\n"
        "t = 0\nfor k in range(3):\n    t += k\n"
        "d = {'a': 1}\nd['a'] = 2\n"
        "answer = days + math.floor(statistics.mean([1, 2, 4])) + t + d['a']"
    )
    assert mixed.ok and mixed.answer == str(29 + 2 + 3 + 2), mixed.error
    printed = run_program("print('step', 7)\nanswer = 7")
    assert printed.ok and printed.output == "step 7\n"


def test_child_functions_compose() -> None:
    children = {"child_1": "answer = 6 * 7 * 35", "child_2": "answer = 25"}
    result = run_program("answer = child_1() // child_2()", functions=children)
    assert result.ok and result.answer == "58"
    nested = {
        "child_1": {
            "source": "answer = child_1() * child_2()",
            "functions": {"child_1": "answer = 6 * 7", "child_2": "answer = 35"},
        },
        "child_2": "answer = 25",
    }
    assert run_program("answer = child_1() // child_2()", functions=nested).answer == "58"
    broken = run_program("answer = child_1() + 1", functions={"child_1": "import os\nanswer = 1"})
    assert not broken.ok and "import of 'os'" in broken.error


@pytest.fixture(scope="module")
def passage() -> str:
    text = ALPHATEC.read_text(encoding="utf-8")
    at = text.index("two percent (2.0%) per annum in excess")
    return text[at - 400 : at + 300]


def test_quote_accepts_verbatim_figures(passage: str) -> None:
    assert check_quote("two percent (2.0%)", 0.02, passage) is None
    assert check_quote("two percent (2.0%)", 2, passage) is None  # percent points
    assert check_quote("two   percent\n(2.0%)", 0.02, passage) is None  # whitespace runs, as the verbatim check
    program = "margin = quote('two percent (2.0%)', 0.02)\nanswer = 100000 * (0.10 + margin)"
    result = run_program(program, passage=passage)
    assert result.ok and result.answer == "12000", result.error
    assert [(q.text, q.value) for q in result.quotes] == [("two percent (2.0%)", "0.02")]


def test_quote_rejects_what_the_passage_does_not_state(passage: str) -> None:
    assert "does not state" in check_quote("two percent (2.0%)", 0.2, passage)
    assert "does not state" in check_quote("two percent (2.0%)", 0.03, passage)
    assert "not in the passage" in check_quote("three percent (3.0%)", 0.03, passage)
    assert "not in the passage" in check_quote("2.5%", 0.025, passage)
    assert "states no figure" in check_quote("per annum in excess", 2, passage)
    assert "finite number" in check_quote("two percent (2.0%)", "0.02", passage)
    assert "has none" in check_quote("two percent (2.0%)", 0.02, None)
    wrong = run_program("m = quote('two percent (2.0%)', 0.2)\nanswer = 100000 * (0.10 + m)", passage=passage)
    assert not wrong.ok and "does not state 0.2" in wrong.error
    caught = run_program(  # a failed quote the program catches still fails the program
        "try:\n    m = quote('ten percent', 0.1)\nexcept Exception:\n    m = 0.1\nanswer = m", passage=passage
    )
    assert not caught.ok and "not in the passage" in caught.error


def test_quote_dollar_amounts() -> None:
    text = "a principal amount of $100,000 bears interest"
    assert check_quote("$100,000", 100000, text) is None
    assert "does not state" in check_quote("$100,000", 10000, text)
    bps = "an increase of 50 basis points per annum"
    assert check_quote("50 basis points", 0.005, bps) is None
    assert check_quote("50 basis points", 50, bps) is None
    assert "does not state" in check_quote("50 basis points", 0.05, bps)


# word numbers before a unit read as figures (credit agreements write "fifty basis points", "one-half of one
# percent (0.50%)"); a word number before anything else states no figure
WORD_QUOTES = [
    ("fifty basis points", 0.005, None),
    ("fifty basis points", 50, None),
    ("Fifty Basis Points", 0.5, None),  # percent points
    ("twenty-five basis points (0.25%)", 0.0025, None),
    ("one hundred fifty basis points", 0.015, None),
    ("one hundred and fifty basis points", 150, None),
    ("seventy-five bps", 0.0075, None),
    ("one-half of one percent (0.50%)", 0.005, None),
    ("one-half of one percent", 0.005, None),
    ("one-fourth percent (1/4%)", 0.0025, None),
    ("three and one-fourth percent (3.25%)", 0.0325, None),
    ("three and one-fourth percent", 0.0325, None),
    ("five and three-fourths of one percent", 0.0575, None),
    ("one and one-half percent", 0.015, None),
    ("thirty-five percent (35%)", 0.35, None),
    ("one hundred five percent", 1.05, None),
    ("two hundred percent", 2, None),
    ("one hundred eighty days", 180, None),
    ("ninety (90) days", 90, None),
    ("fifty basis points", 0.05, "does not state"),
    ("one hundred fifty basis points", 0.0015, "does not state"),
    ("two hundred percent", 1, "does not state"),  # not "hundred percent" alone
    ("twenty-five basis points", 0.025, "does not state"),
    ("fifty Lenders", 50, "states no figure"),
    ("one of the Lenders", 1, "states no figure"),
    ("the one hundred largest", 100, "states no figure"),
    ("one-half of the Commitments", 0.5, "states no figure"),
    ("twenty-one Business", 21, "states no figure"),
]


@pytest.mark.parametrize(("text", "value", "fails"), WORD_QUOTES)
def test_quote_reads_word_numbers_before_a_unit(text: str, value: float, fails: str | None) -> None:
    passage = f"The Borrower shall pay, as provided in Section 2.05, {text} as set forth herein."
    why = check_quote(text, value, passage)
    assert (why is None) if fails is None else (why is not None and fails in why), why


def test_quote_of_basis_points_in_words_computes() -> None:
    passage = (
        "the Applicable Rate shall be increased by fifty basis points for so long as the Event of Default continues"
    )
    program = "step_up = quote('fifty basis points', 0.005)\nanswer = 2000000 * step_up"
    result = run_program(program, passage=passage)
    assert result.ok and result.answer == "10000", result.error


def test_one_basis_point_in_words_is_a_unit_not_a_figure() -> None:
    # "Absolute Rate" (a real agreement's definition): the singular is the unit of precision, not a rate
    passage = "“Absolute Rate” means a fixed rate of interest expressed in multiples of 1/100th of one basis point."
    assert "states no figure" in check_quote("one basis point", 0.0001, passage)
    assert check_quote("1 basis point", 0.0001, "an increase of 1 basis point") is None  # a numeral still reads


def test_line_breaks_only_split_statements_a_model_ran_together():
    from finmbs.verify.program import line_breaks

    cases = {  # written (each measured from the 1.5B's programs) -> run as
        "total_spaces = 5 * 15 answer = total_spaces - 40": "total_spaces = 5 * 15\nanswer = total_spaces - 40",
        "answer = 18 + 6 print(answer)": "answer = 18 + 6\nprint(answer)",
        "rate = quote('two percent (2.0%)', 0.02): answer = rate * 2": "rate = quote('two percent (2.0%)', 0.02)\nanswer = rate * 2",
        "rate = 0.03 # applicable rate_overdue = rate + 0.02 # overdue answer = rate_overdue": (
            "rate = 0.03 # applicable\nrate_overdue = rate + 0.02 # overdue\nanswer = rate_overdue"
        ),
        "x = 3 x += 2 answer = x": "x = 3\nx += 2\nanswer = x",
        "if True:\n    y = 1 answer = y": "if True:\n    y = 1\n    answer = y",
        "a = [1,\n 2] b = 3 answer = a[0] + b": "a = [1,\n 2]\nb = 3\nanswer = a[0] + b",
    }
    for written, fixed in cases.items():
        assert line_breaks(written) == fixed, written
        assert run_program(fixed, passage="a rate of two percent (2.0%) a year").ok
    for whole_or_hopeless in (
        "x = 5\nanswer = x",  # parses: nothing to do
        "answer = 5 # answer = 6",  # binds answer already; the comment stays a comment
        "x = 2 # note: x = 3 is wrong\nanswer = x",
        "B = C + 4; B + C = 30",  # an equation, not two statements
        "answer = max(1, 2) y",  # no statement to split off
    ):
        assert line_breaks(whole_or_hopeless) is None, whole_or_hopeless
