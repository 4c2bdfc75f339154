"""The figure reader (`finmbs.verify.finance.figures`) and mining's passage planning on real documents,
the linear-time pattern against the pattern it replaced (kept below as `OLD_FIGURE`, the baseline), in one run.

Every document of corpora/finance/docs, ../shared/data/credit_agreements/docs and ../shared/data/sec_10k is
read the way ingest reads it (`finmbs.ingest.parse.parse_file`), cut into 1,500-character windows (every 750
characters, so a bad spot is whole in some window) and each window timed through `figures`. The old pattern
gets at most `--old-cap` seconds a window (a window that reaches it is counted at the cap, so its ratio is a
lower bound) and `--old-budget` seconds a document (the windows after that are not timed for it).

Printed per document: characters, new chars/s, the new worst window (ms; the twelve slowest of one pass timed
again, best of five), the old chars/s over the windows it timed, the old worst window, old/new time on the same
windows; then mining's passage planning
(`finmbs.mine.passages.plan` over 1,500-character chunks) per document, old and new; then the bad inputs
(1 MB of whitespace, 10,000 dotted leaders, a line of 100,000 digits) through `figures` and planning.

    python bench/bench_figures.py [--data ../shared/data] [--old-cap 1] [--old-budget 20] [--only NAME]
        [--plan-docs 1995,brown_forman] [--plan-cap 30]
"""

from __future__ import annotations

import argparse
import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from finmbs.mine import passages
from finmbs.records import Chunk, Document
from finmbs.verify import finance

ROOT = Path(__file__).resolve().parents[1]
WINDOW, STRIDE = 1500, 750

# The figure pattern before it was made linear (a35ec78), verbatim: consecutive optional `\s*` around the
# figure's optional parts let a whitespace run be split among them in polynomially many ways.
_F = finance
OLD_FIGURE = re.compile(
    rf"""
    (?P<frac_of>(?P<fnum>\d+)\s*/\s*(?P<fden>\d+)|(?:(?<![\w-])(?P<fint>{_F._WORDNUM})\s+and\s+)?(?P<fword>{_F._FRACTION_WORDS}))
        \s+of\s+(?:one|1)\s*(?:%|percent|per\s+cent)
    | (?<![\w.,/])(?P<ratio>(?P<rnum>{_F._NUM})\s*(?::\s*(?P<rden>{_F._NUM})|\s+to\s+(?P<rone>1(?:\.0+)?))(?![\d/]))
    | (?<![\w.,/])(?P<lparen>\()?\s*
      (?P<sign>[-+])?\s*(?P<cur1>{_F._CUR})?\s*(?P<lparen2>\()?\s*(?P<sign2>-)?\s*
      (?:(?<![\w.,/])(?<!\w-)(?P<num>{_F._NUM})(?!\d)(?!/\d)(?!-[A-Za-z\d])
        |(?<![\w-])(?P<word>{_F._WORDNUM})\b(?=\s*(?:{_F._WORD_UNIT_AHEAD}))
        |(?<![\w-])(?P<wmixed>(?:(?P<wint>{_F._WORDNUM})\s+and\s+)?(?P<wfword>{_F._FRACTION_WORDS}))\b(?=\s*(?:%|percent|per\s+cent))
      )
      (?P<rparen>\))?
      \s*(?P<scale>(?:{_F._SCALE_RE})\b)?
      \s*(?P<cur2>USD|EUR|GBP|CAD|JPY|dollars?|euros?|yen)?
      (?:\s*(?P<unit>{_F._PCT}|x\b|×|times\b|business\s+days?\b|days?\b|months?\b|years?\b|weeks?\b|shares?\b|stores?\b|employees?\b))?
      (?![A-Za-z\d])
    """,  # noqa: E501 (the old pattern as it was)
    re.IGNORECASE | re.VERBOSE,
)


@contextmanager
def old_pattern():
    """`figures` (and everything calling it) reading with the old pattern."""
    with mock.patch.object(finance, "_FIGURE", OLD_FIGURE):
        yield


class TimedOut(Exception):
    pass


@contextmanager
def cap(seconds: float):
    """Raise TimedOut after `seconds` (the regex engine checks for signals while it matches)."""

    def expire(*_: object) -> None:
        raise TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def windows(text: str) -> list[str]:
    return [text[i : i + WINDOW] for i in range(0, max(1, len(text) - WINDOW + STRIDE), STRIDE)]


def time_windows(pieces: list[str], limit: float | None, budget: float | None) -> tuple[list[float], int]:
    """Seconds per window (capped ones at `limit`) for as many windows as `budget` allows; how many were capped."""
    times, capped, spent = [], 0, 0.0
    for piece in pieces:
        if budget is not None and spent >= budget:
            break
        start = time.perf_counter()
        try:
            if limit is None:
                finance.figures(piece)
            else:
                with cap(limit):
                    finance.figures(piece)
        except TimedOut:
            capped += 1
        took = min(time.perf_counter() - start, limit) if limit else time.perf_counter() - start
        times.append(took)
        spent += took
    return times, capped


def worst_window(pieces: list[str], times: list[float], top: int = 12, repeats: int = 5) -> float:
    """The slowest window's time, the `top` slowest of one pass timed again (best of `repeats`): one pass on
    a shared machine is noisy."""
    worst = 0.0
    for _, i in sorted(((t, i) for i, t in enumerate(times)), reverse=True)[:top]:
        best = min(time_windows([pieces[i]], None, None)[0][0] for _ in range(repeats))
        worst = max(worst, best)
    return worst


def documents(data: Path, only: str | None) -> list[tuple[str, str]]:
    from finmbs.ingest.parse import parse_file

    paths = sorted((ROOT / "corpora" / "finance" / "docs").glob("*.txt"))
    paths += sorted((data / "credit_agreements" / "docs").iterdir())
    paths += sorted(p for p in (data / "sec_10k").iterdir() if p.suffix in (".html", ".nc", ".txt"))
    out = []
    for path in paths:
        if only and only not in path.name:
            continue
        parsed = parse_file(path)
        text = "\n\n".join(d.text for d in parsed)
        out.append((f"{path.parent.name}/{path.name}", text))
    return out


def chunks_of(doc_id: str, text: str) -> list[Chunk]:
    return [
        Chunk(text=text[i : i + WINDOW], doc_id=doc_id, chunk_id=f"{doc_id}:{i}", char_start=i, char_end=i + WINDOW)
        for i in range(0, len(text), WINDOW)
    ]


def plan_seconds(doc_id: str, text: str, limit: float | None) -> float | None:
    """Planning eight questions of one document, seconds (None: reached `limit`)."""
    doc = Document(doc_id=doc_id, source_path=doc_id, sha256="0")
    chunks = chunks_of(doc_id, text)
    start = time.perf_counter()
    try:
        if limit is None:
            passages.plan(doc, text, chunks, 8, list(passages.TYPES))
        else:
            with cap(limit):
                passages.plan(doc, text, chunks, 8, list(passages.TYPES))
    except TimedOut:
        return None
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--old-cap", type=float, default=1.0, help="seconds the old pattern gets per window")
    parser.add_argument("--old-budget", type=float, default=20.0, help="seconds the old pattern gets per document")
    parser.add_argument("--plan-cap", type=float, default=30.0, help="seconds old planning gets per document")
    parser.add_argument(
        "--plan-docs",
        default="1995,brown_forman,realty_income",
        help="planning is compared on the documents whose file name contains one of these (comma-separated)",
    )
    parser.add_argument("--only", help="only documents whose file name contains this")
    parser.add_argument("--no-plan", action="store_true", help="skip the planning comparison")
    args = parser.parse_args()

    docs = documents(args.data, args.only)
    print(f"{len(docs)} documents; windows of {WINDOW} characters every {STRIDE}")
    print(
        f"{'document':62} {'chars':>9} {'new c/s':>10} {'new max ms':>10} "
        f"{'old c/s':>10} {'old max ms':>10} {'capped':>6} {'timed':>7} {'old/new':>8}"
    )
    total_new = total_chars = 0.0
    worst_new = (0.0, "")
    for name, text in docs:
        pieces = windows(text)
        new_times, _ = time_windows(pieces, None, None)
        with old_pattern():
            old_times, capped = time_windows(pieces, args.old_cap, args.old_budget)
        timed = len(old_times)
        chars = sum(len(p) for p in pieces)
        new_rate = chars / max(sum(new_times), 1e-9)
        old_chars = sum(len(p) for p in pieces[:timed])
        old_rate = old_chars / max(sum(old_times), 1e-9)
        ratio = sum(old_times) / max(sum(new_times[:timed]), 1e-9)
        worst = worst_window(pieces, new_times)
        if worst > worst_new[0]:
            worst_new = (worst, name)
        total_new += sum(new_times)
        total_chars += chars
        more = ">=" if capped else ""
        print(
            f"{name[:62]:62} {len(text):>9,} {new_rate:>10,.0f} {1000 * worst:>10.2f} "
            f"{old_rate:>10,.0f} {more + format(1000 * max(old_times), '.1f'):>10} {capped:>6} "
            f"{timed:>3}/{len(pieces):<3} {more + format(ratio, '.1f'):>8}"
        )
    print(
        f"all windows, new: {total_chars / max(total_new, 1e-9):,.0f} chars/s; "
        f"worst window {1000 * worst_new[0]:.2f} ms ({worst_new[1]})"
    )

    if not args.no_plan:
        print("\npassage planning (8 questions, 1,500-character chunks), seconds per document")
        for name, text in docs:
            if not any(part and part in name for part in args.plan_docs.split(",")):
                continue
            new = plan_seconds(name, text, None)
            with old_pattern():
                old = plan_seconds(name, text, args.plan_cap)
            shown = f">{args.plan_cap:.0f}" if old is None else f"{old:.2f}"
            print(f"  {name[:62]:62} new {new:7.2f}  old {shown:>7}")

    print("\nbad input (new pattern)")
    bad = {
        "1 MB of whitespace": " \n\t " * 250_000,
        "10,000 dotted leaders": "".join(f"Section {i}.01 Definitions {'.' * 60} {i}\n" for i in range(10_000)),
        "a line of 100,000 digits": "7" * 100_000,
    }
    for what, text in bad.items():
        start = time.perf_counter()
        found = len(finance.figures(text))
        took = time.perf_counter() - start
        planned = plan_seconds("bad", text, None)
        print(f"  {what:28} {len(text):>9,} chars: figures {took:6.2f} s ({found} figures), planning {planned:6.2f} s")


if __name__ == "__main__":
    main()
