"""Text processing is linear in its input: the figure reader, the finance comparer, the quote check, the
leakage rules, passage scoring and the ingest patterns finish generated layout text (whitespace runs around
dates and amounts, dotted leaders, underscores, unicode spaces, long digit runs) within small time bounds,
and the figure reader reads exactly what the pattern it replaced read (bench/bench_figures.py keeps that one).

Each bound is enforced with SIGALRM (the regex engine checks for signals while it matches), so a pattern that
backtracks fails the test instead of hanging it."""

from __future__ import annotations

import functools
import importlib.util
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import pytest

from finmbs.ingest import chunk, parse
from finmbs.ingest.verbatim import find_verbatim
from finmbs.mbs.leakage import Grounding, text_figures
from finmbs.mine import passages
from finmbs.records import Chunk, Document
from finmbs.verify import finance
from finmbs.verify.finance import compare, figures
from finmbs.verify.quotes import check_quote

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _bench():
    spec = importlib.util.spec_from_file_location("bench_figures", ROOT / "bench" / "bench_figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@contextmanager
def within(seconds: float, what: str):
    """Fail (not hang) when the block runs longer than `seconds`."""
    bench = _bench()
    try:
        with bench.cap(seconds):
            yield
    except bench.TimedOut:
        raise AssertionError(f"{what}: still running after {seconds} s") from None


# the shapes EDGAR layout gives text: a date or an amount between long whitespace runs
SLOW_BEFORE = [
    "dated as of\n\n" + " " * 30 + "September 26, 1995\n\n" + " " * 30,
    "                    CREDIT AGREEMENT\n\n" + " " * 40 + "$150,000,000\n\n" + " " * 40 + "among\n" + " " * 40,
    "Applicable Margin" + " " * 60 + "(" + " " * 20 + "1.25" + " " * 20 + ")" + " " * 40 + "Lenders",
    "1.00" + " " * 200 + "x",
    "\u3000" * 50 + "5" + "\xa0" * 50 + "million" + "\u2009" * 50 + "z",
]


@pytest.mark.parametrize("text", SLOW_BEFORE, ids=range(len(SLOW_BEFORE)))
def test_figures_whitespace_runs_linear(text):
    with within(0.5, "figures"):
        figures(text)


def test_issue_example_reads_the_amount_not_the_date():
    assert figures("dated as of\n\n" + " " * 30 + "September 26, 1995\n\n" + " " * 30) == []
    (fig,) = figures("\n\n" + " " * 40 + "$150,000,000\n\n" + " " * 40 + "among")
    assert (fig.value, fig.kind, fig.currency) == (150_000_000, "money", "USD")


def test_new_pattern_reads_what_the_old_one_read():
    """Matches (start, end, every group), the whole-answer reading and the figures themselves, on generated
    text short enough for the old pattern."""
    bench = _bench()
    rng = random.Random(50)
    for _ in range(3000):
        text = _answer_like(rng)
        new = [(m.span(), m.groupdict()) for m in finance._FIGURE.finditer(text)]
        old = [(m.span(), m.groupdict()) for m in bench.OLD_FIGURE.finditer(text)]
        assert new == old, text
        with bench.old_pattern():
            before = repr(figures(text))
        assert repr(figures(text)) == before, text


_TOKENS = (
    "5 12 1995 1,000 2.5 .5 3,250,000 0 100 1 1.00 3.50 $ US$ U.S.$ € £ ( ) - + % percent bps million bn m k "
    "thousand USD dollars yen x × times days months years shares : / to of one one-half half three-fourths and "
    "fifty twenty-five hundred Section no. page . , ; the Lenders September 26, 26th June 2023 12/31/2023 3M abc"
).split() + ["per cent", "basis points", "U.S. $", "one hundred", "business days", "........", "__"]
_SPACES = [" ", "  ", "\n", "\n\n", "\t", "\xa0", "\u2009", "\u3000", " \n ", ""]


def _answer_like(rng: random.Random) -> str:
    return "".join(
        rng.choice(_TOKENS) + "".join(rng.choice(_SPACES) for _ in range(rng.choice((1, 1, 2, 3))))
        for _ in range(rng.randint(1, 9))
    )


# ------------------------------------------------------------------------------------------------ fuzz
_PIECES = [
    lambda r: r.choice(["September 26, 1995", "the 5th day of June, 2023", "Dec. 31, 2024", "12/31/2023"]),
    lambda r: r.choice(["$1,250,000", "(3.5)%", "50 basis points", "1.00:1.00", "one-half of one percent", "2.25%"]),
    lambda r: r.choice(["US$ 5 million", "( 12.5 )", "- $ (4)", "3.50 to 1.00", "fifty basis points", "10 days"]),
    lambda r: "." * r.randint(4, 4000),
    lambda r: "_" * r.randint(1, 3000),
    lambda r: "7" * r.randint(1, 3000),
    lambda r: r.choice([" ", "\n", "\t", "\xa0", "\u2009", "\u3000", "\u2003"]) * r.randint(1, 3000),
    lambda r: r.choice(["Applicable Margin", "Section 2.05", "means", "“Default Rate”", "Lenders", "(a)", "per annum"]),
]


def _layout(rng: random.Random, pieces: int = 24) -> str:
    return "".join(rng.choice(_PIECES)(rng) + rng.choice(["", " ", "\n"]) for _ in range(pieces))


@pytest.mark.parametrize("seed", range(12))
def test_fuzz_text_layer_within_bounds(seed):
    """Generated layout text through every reader of document text, each call within a small bound."""
    rng = random.Random(seed)
    text, other = _layout(rng), _layout(rng, 8)
    doc = Document(doc_id="fuzz", source_path="fuzz.txt", sha256="0")
    chunks = [
        Chunk(text=text[i : i + 1500], doc_id="fuzz", chunk_id=f"fuzz:{i}", char_start=i, char_end=i + 1500)
        for i in range(0, len(text), 1500)
    ]
    quote = text[len(text) // 3 : len(text) // 3 + 250]
    checks = {
        "figures": lambda: figures(text),
        "text_figures": lambda: text_figures(text),
        "compare": lambda: (compare(other, text), compare(text, "2.25%"), compare(text, other, question=other)),
        "quote": lambda: check_quote(quote, 2.25, text),
        "verbatim": lambda: find_verbatim(quote, text),
        "leakage": lambda: Grounding(passage=text, seed_material=[other]).check(other, other, solution=text),
        "planning": lambda: passages.plan(doc, text, chunks, 4, list(passages.TYPES)),
        "paragraphs": lambda: [chunk.heading(text[a:b]) for a, b in chunk.paragraphs(text)],
        "tabular": lambda: parse._tabular(text),
    }
    for what, call in checks.items():
        with within(2.0, f"{what} on seed {seed} ({len(text)} chars)"):
            call()


# ------------------------------------------------------------------------------------------------ bad input
BAD = {
    "1 MB of whitespace": " \n\t " * 250_000,
    "10,000 dotted leaders": "".join(f"Section {i}.01 Definitions {'.' * 60} {i}\n" for i in range(10_000)),
    "a line of 100,000 digits": "7" * 100_000,
}


@pytest.mark.parametrize("what", list(BAD))
def test_bad_input_finishes_in_seconds(what):
    text = BAD[what]
    doc = Document(doc_id="bad", source_path="bad.txt", sha256="0")
    chunks = [
        Chunk(text=text[i : i + 1500], doc_id="bad", chunk_id=f"bad:{i}", char_start=i, char_end=i + 1500)
        for i in range(0, len(text), 1500)
    ]
    start = time.monotonic()
    with within(15.0, f"{what}: figures and planning"):
        found = figures(text)
        passages.plan(doc, text, chunks, 8, list(passages.TYPES))
        for a, b in chunk.paragraphs(text):
            chunk.heading(text[a:b])
    assert time.monotonic() - start < 15.0
    if what.startswith("a line"):
        assert found == []  # a run of digits is no amount
    if what.startswith("10,000"):
        # each line's page number (section numbers are references; 1900-2099 read as years drop out)
        assert len(found) == 10_000 - 200


def test_long_numeral_is_no_figure_but_a_long_amount_is():
    assert figures("9" * 41) == []
    assert [f.value for f in figures("$1" + ",000" * 9)] == [Fraction(10**27)]  # 37 characters


@pytest.mark.parametrize(
    "line", ["Section 1.01 Definitions" + " " * 390 + "x", "Definitions" + " \t" * 190 + "y", "1" + " " * 5000 + "x5"]
)
def test_ingest_line_patterns_linear(line):
    with within(0.5, "heading / tabular"):
        chunk.heading(line)
        parse._tabular(line)
        chunk.defined_term("“Term”" + " " * 5000 + "x", in_definitions=False)


# ------------------------------------------------------------------------------------------------ stopping
STOPPED_IN_TEXT = """
import asyncio, importlib.util, sys
spec = importlib.util.spec_from_file_location("bench_figures", sys.argv[1])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from finmbs.runs.grow import sigterm_as_interrupt
from finmbs.verify.finance import figures

async def main():
    with sigterm_as_interrupt(None):
        print("inside", flush=True)
        with bench.old_pattern():  # minutes inside one match of the old pattern, the loop never reached
            figures("dated as of\\n\\n" + " " * 60 + "September 26, 1995\\n\\n" + " " * 60)
    print("finished", flush=True)

try:
    asyncio.run(main())
except KeyboardInterrupt as exc:
    print("interrupted:", exc, flush=True)
    sys.exit(130)
"""


def test_sigterm_stops_a_run_inside_text_processing(tmp_path):
    """A SIGTERM reaches a run whose event loop is blocked in one long regular-expression match."""
    from finmbs.runs.grow import STOP_GRACE_S

    script = tmp_path / "stuck.py"
    script.write_text(STOPPED_IN_TEXT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ROOT / "bench" / "bench_figures.py")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=STOP_GRACE_S + 10)
    finally:
        proc.kill()
    assert time.monotonic() - sent < STOP_GRACE_S + 5
    assert proc.returncode == 130 and "interrupted: terminated (SIGTERM)" in out, out
