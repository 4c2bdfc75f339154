"""Document figures by quotation: `quote(text, value)` inside a finance program binds a figure only
when `text` is copied from the passage d' (equal up to whitespace runs, the verbatim check of
`finmbs.ingest.verbatim`) and states `value` (read with the finance comparer's figure reader).

Strict on purpose: "two percent (2.0%)" states 2 (percent points) and 0.02 (a rate), nothing else;
"$100,000" states 100000; "50 basis points" states 0.5 (percent points), 0.005 (a rate) and 50 (the
numeral as written). Word numbers before a unit read the same: "fifty basis points", "one hundred fifty
basis points", "one-half of one percent", "three and one-fourth percent"; a word number before anything
else ("fifty Lenders") states no figure. A quote whose text states no figure, or another figure, fails.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction

from finmbs.ingest.verbatim import find_verbatim
from finmbs.verify.finance import Figure, figures

QUOTE_CHARS = 300  # a quote is a phrase of the passage, not the passage
_BASIS_POINTS = re.compile(r"basis\s+points?|bps?\b", re.IGNORECASE)


def exact(value: object) -> Fraction | None:
    """`value` as an exact fraction when it is a finite real number (bool excluded), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction, Decimal)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Decimal) and not value.is_finite():
        return None
    return Fraction(value)


def readings(figure: Figure) -> list[Fraction]:
    """The values a program may bind for one figure of the quoted text."""
    values = [figure.value]
    if figure.kind == "percent":
        values.append(figure.value / 100)  # 2% as the rate 0.02
        if _BASIS_POINTS.search(figure.text):
            values.append(figure.value * 100)  # 50 bps as the numeral 50
    return values


def same_value(a: Fraction, b: Fraction) -> bool:
    """Equal up to float representation (0.02 is not exactly 1/50 in binary)."""
    return abs(a - b) <= Fraction(1, 10**9) * max(1, abs(b))


def check_quote(text: object, value: object, passage: str | None) -> str | None:
    """Why `quote(text, value)` fails on `passage`, or None when it holds."""
    if not isinstance(text, str) or not text.strip():
        return "quote text must be a non-empty string"
    shown = text.strip()[:60]
    if len(text) > QUOTE_CHARS:
        return f"quote longer than {QUOTE_CHARS} characters: {shown!r}..."
    number = exact(value)
    if number is None:
        return f"quote value must be a finite number, got {type(value).__name__}"
    if not passage:
        return "quote() needs the problem's passage; this problem has none"
    if find_verbatim(text, passage) is None:
        return f"quote not in the passage: {shown!r}"
    stated = figures(text)
    if not stated:
        return f"quote states no figure: {shown!r}"
    if not any(same_value(number, r) for f in stated for r in readings(f)):
        said = ", ".join(f.text for f in stated)
        return f"quote {shown!r} does not state {value} (it states {said})"
    return None
