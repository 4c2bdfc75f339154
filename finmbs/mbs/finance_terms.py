"""Finance terms the engine and seed mining share: how a rate's role reads in its clause (a fee, a
margin over another rate), the amounts, periods and benchmarks the engine states in a question, how an
answer is written, the teacher's reply naming a figure and the check of that name, and how a question
names a company. Moved here from finmbs/mine/ so the engine's finance operators (finmbs/mbs/) use them
without importing the layer above (mining imports them from here)."""

from __future__ import annotations

import hashlib
import re
from fractions import Fraction
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from finmbs.mbs.candidates import placeholder
from finmbs.mbs.leakage import entity_name
from finmbs.verify.finance import figures

FEE = re.compile(r"\b(commitment fee|unused|facility fee|undrawn)\b", re.I)
OVER = re.compile(r"\b(plus|margin|applicable|spread)\b[^.;]{0,160}$", re.I)  # a rate added to another
OVER_AFTER = re.compile(r"^\s*(?:\([^)]{0,20}\)\s*)?(?:per annum\s*)?(in excess of|above|over|plus)\b", re.I)
PRINCIPALS = (10_000_000, 25_000_000, 40_000_000, 75_000_000, 120_000_000)
DAYS = (30, 60, 90, 180)
BENCHMARKS = (Fraction(430, 10000), Fraction(480, 10000), Fraction(505, 10000), Fraction(530, 10000))


def answer_text(value: Fraction | float, unit: str) -> str:
    """The answer as written: money to the cent, a percentage or ratio to two decimals."""
    v = float(value)
    if unit == "money":
        return f"${v:,.2f}"
    if unit == "percent":
        return f"{v:.2f}%"
    return f"{v:.2f}"


def pick(options: tuple, key: str, salt: str) -> object:
    """One of `options`, the same for the same key and salt (a rerun asks the same questions)."""
    digest = hashlib.sha256(f"{key}/{salt}".encode()).digest()
    return options[digest[0] % len(options)]


def written(value: str) -> str:
    """A reply field's text, or the error that it is the template's placeholder, not content."""
    if placeholder(value):
        raise ValueError(f"a placeholder, not content: {value.strip()[:40]!r}")
    return value


class FactName(BaseModel):
    """The teacher's reply with `mine.engine_question`: the words that name the passage's figure."""

    name: Annotated[str, AfterValidator(written)] = Field(min_length=3, max_length=160)


def naming_error(name: str) -> str | None:
    """Why the teacher's words cannot name the figure in the question: they state a rate or an amount, or
    are one bare word ("rate": the 1.5B's, which names no provision)."""
    stated = [f.text for f in figures(name) if f.kind in ("percent", "money")]
    if stated:
        return f"the words naming the figure state {'; '.join(stated)}: the solver must look it up"
    if len(name.split()) < 2:
        return f"the words {name.strip()!r} name no provision"
    return None


def short_name(company: str) -> str:
    """How a question names the company: without its legal form, an all-capitals name in title case and a
    web suffix dropped ("AMAZON.COM, INC." -> "Amazon"; "Brown-Forman Corporation" -> "Brown-Forman")."""
    name = entity_name(re.sub(r"\.com\b", "", company, flags=re.IGNORECASE)) or company
    return re.sub(r"[A-Za-z][A-Za-z’']*", lambda m: m.group(0).capitalize(), name.lower()) if name.isupper() else name


def flat_decimals(text: str) -> str:
    """`text` with the points of decimals removed ("0.50%", "Section 2.05" end no sentence)."""
    return re.sub(r"(?<=\d)\.(?=\d)", "", text)
