"""A passage's candidate figures (`verify.quote_spans`): every figure the finance figure reader finds in
the passage d' (numbers, percentages, basis points, amounts, ratios, word numbers such as "fifty basis
points"), as the verbatim text that states it, a few words of context and the value a program binds.

A finance program then takes document figures by choosing among these spans (the reply's `figures`
list, constrained to their texts), and the engine writes `name = quote('text', value)` for each choice:
the quote is copied from the passage by construction, and `quote()` still checks it verbatim and by
value in the sandbox (finmbs/verify/quotes.py). Dates are not offered: `quote()` reads no date value.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from fractions import Fraction

from finmbs.verify.finance import _REFERENCE, _REFERENCE_LOOKBACK, _WORD_NUMBERS, Figure, figures
from finmbs.verify.quotes import check_quote

MAX_SPANS = 40  # a passage's spans offered to the teacher (an excerpt of an agreement holds far fewer)
CONTEXT_WORDS = 6  # words of the passage shown on each side of a span
NAME = re.compile(r"^[a-z][a-z0-9_]*$")  # a figure's variable name in a program (a JSON-schema pattern too)
RESERVED = {"answer", "quote", "math", "fractions", "decimal", "statistics", "datetime"}


@dataclass(frozen=True)
class Span:
    """One candidate figure of a passage: its verbatim text, the value a program binds, and its context."""

    number: int  # 1-based, the order of the passage
    text: str
    value: Fraction  # a percentage as a rate (2.0% -> 0.02), an amount in currency units, a count or ratio as read
    kind: str
    before: str
    after: str

    @property
    def literal(self) -> str:
        """The value as a Python literal (an integer exactly, else the nearest float)."""
        return str(self.value.numerator) if self.value.denominator == 1 else repr(float(self.value))

    def line(self) -> str:
        """The span as the teacher sees it: number, text, the value bound, context."""
        shown = f"{self.literal} (that is {float(self.value * 100):g}%)" if self.kind == "percent" else self.literal
        return f'[{self.number}] "{self.text}" = {shown} ... {self.before} [{self.text}] {self.after} ...'


def bound_value(figure: Figure) -> Fraction:
    """The value a program binds for `figure`: a percentage (or basis points) as a rate, anything else as read."""
    return figure.value / 100 if figure.kind == "percent" else figure.value


def _located(passage: str) -> list[tuple[int, int, Figure]]:
    """(start, end, figure) of each figure of `passage`, found in order; a figure whose text is not a
    substring of the passage (read across a removed date) is left out."""
    found, cursor = [], 0
    for figure in figures(passage):
        start = passage.find(figure.text, cursor)
        while start >= 0 and _REFERENCE.search(passage[max(0, start - _REFERENCE_LOOKBACK) : start]):
            start = passage.find(figure.text, start + 1)  # where figures() read it: not a section reference
        if start < 0:
            continue
        end = start + len(figure.text)
        found.append((start, end, figure))
        cursor = end
    return found


def _merged(passage: str, located: list[tuple[int, int, Figure]]) -> list[tuple[int, int, Figure]]:
    """Figures written twice in a row, in words and then in digits ("two percent (2.0%)", "Thirty-Five
    Million Dollars ($35,000,000)"), as one span; an opening parenthesis left unclosed is closed."""
    out: list[tuple[int, int, Figure]] = []
    for start, end, figure in located:
        if out:
            p_start, p_end, previous = out[-1]
            between = passage[p_end:start]
            if not between.strip() and between.count("\n") < 2 and bound_value(previous) == bound_value(figure):
                out[-1] = (p_start, end, previous)
                continue
        out.append((start, end, figure))
    closed = []
    for start, end, figure in out:
        text = passage[start:end]
        if text.count("(") > text.count(")") and passage[end : end + 1] == ")":
            end += 1
        if text.startswith("("):  # "three hundred sixty (360) days": alone, "(360) days" reads as -360
            start = _number_words_before(passage, start)
        closed.append((start, end, figure))
    return closed


_WORD_BEFORE = re.compile(r"([A-Za-z]+(?:-[A-Za-z]+)*)\s+$")


def _number_words_before(passage: str, start: int) -> int:
    """Where the run of number words ("three hundred sixty", "one", "twenty-five") that ends right before
    `start` begins (an "and" never begins it); `start` when there is none."""
    runs: list[tuple[int, str]] = []
    first = start
    while (m := _WORD_BEFORE.search(passage, max(0, start - 40), start)) and all(
        part in _WORD_NUMBERS or part == "and" for part in m.group(1).lower().split("-")
    ):
        start = m.start()
        runs.append((start, m.group(1).lower()))
    while runs and runs[-1][1] == "and":
        runs.pop()
    return runs[-1][0] if runs else first


def _words(text: str, n: int, *, last: bool) -> str:
    words = text.split()
    return " ".join(words[-n:] if last else words[:n])


def candidate_spans(passage: str | None, limit: int = MAX_SPANS) -> list[Span]:
    """The candidate figures of `passage`, each text once (its first occurrence), numbered in passage order;
    only spans whose `quote(text, value)` holds on the passage are offered."""
    if not passage:
        return []
    spans: list[Span] = []
    seen: set[str] = set()
    for start, end, figure in _merged(passage, _located(passage)):
        text = " ".join(passage[start:end].split())
        if text in seen:
            continue
        seen.add(text)
        value = bound_value(figure)
        span = Span(
            number=len(spans) + 1,
            text=text,
            value=value,
            kind=figure.kind,
            before=_words(passage[max(0, start - 200) : start], CONTEXT_WORDS, last=True),
            after=_words(passage[end : end + 200], CONTEXT_WORDS, last=False),
        )
        if check_quote(text, float(value) if value.denominator != 1 else int(value), passage) is None:
            spans.append(span)
        if len(spans) >= limit:
            break
    return spans


def listing(spans: list[Span]) -> str:
    """The numbered list of spans shown to the teacher, one per line."""
    return "\n".join(span.line() for span in spans)


def name_error(name: str) -> str | None:
    """Why `name` cannot hold a figure in a program, or None."""
    if not NAME.fullmatch(name) or len(name) > 40 or keyword.iskeyword(name) or name in RESERVED:
        return f"{name!r} is not a usable variable name for a figure"
    return None


def bind(choices: list[tuple[str, str]], spans: list[Span], program: str) -> tuple[str | None, str | None]:
    """(`program` preceded by `name = quote('text', value)` for each (name, span text) chosen, None), or
    (None, why) when a choice names no span or its name cannot be a variable."""
    by_text = {span.text: span for span in spans}
    lines, names = [], set()
    for name, text in choices:
        span = by_text.get(" ".join(text.split()))
        if span is None:
            return None, f"figure {text[:60]!r} is not one of the passage's figures"
        if why := name_error(name):
            return None, why
        if name in names:
            return None, f"figure name {name!r} is chosen twice"
        names.add(name)
        lines.append(f"{name} = quote({span.text!r}, {span.literal})")
    return "\n".join([*lines, program.strip("\n")]), None
