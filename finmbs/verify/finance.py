"""Deterministic, finance-aware answer comparer: equal / different / undecided.

It reads both answers as figures (currency and scale words, percent, basis points, fractions of
one percent, ratios, parenthesized negatives), dates or yes/no, and decides only when the reading
is unambiguous. A predicted figure matches when it rounds to the gold at the gold's stated
precision ("12.3%" accepts 12.34%, "12.30%" does not) or at the precision the question asks for.
A wrong "equal" is the worst error, so anything unclear is "undecided" and goes to the LLM judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from typing import Literal

Verdict = Literal["equal", "different", "undecided"]


@dataclass(frozen=True)
class Comparison:
    """The comparer's verdict and why (a dataclass: the program sandbox's worker imports this module)."""

    verdict: Verdict
    reason: str


# --------------------------------------------------------------------------------------------
# cleaning
_LATEX = [
    (re.compile(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}"), r"\1/\2"),
    (re.compile(r"\\([%$])"), r"\1"),
    (re.compile(r"\\[,;!: ]|\\left|\\right"), " "),
    (re.compile(r"\\times"), "x"),
]


def clean(text: str) -> str:
    """Plain text: LaTeX escapes, unicode minus and spaces, markdown emphasis removed."""
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("\u2014", "-").replace("\xa0", " ")
    for pattern, repl in _LATEX:
        text = pattern.sub(repl, text)
    text = re.sub(r"\s+", " ", text.replace("$$", "$").replace("**", "").replace("`", "")).strip()
    if len(text) > 1 and text[0] == text[-1] == "$":  # a LaTeX math span
        text = text[1:-1].strip()
    return text.rstrip(".").strip()


def normalize_text(text: str) -> str:
    """Lower-case words only, articles dropped: for exact textual agreement."""
    words = re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.lower())
    return " ".join(w for w in words if w not in {"a", "an", "the"})


# --------------------------------------------------------------------------------------------
# figures
_CURRENCY = {
    "$": "USD",
    "us$": "USD",
    "usd": "USD",
    "u.s.$": "USD",
    "dollars": "USD",
    "dollar": "USD",
    "€": "EUR",
    "eur": "EUR",
    "euro": "EUR",
    "euros": "EUR",
    "£": "GBP",
    "gbp": "GBP",
    "c$": "CAD",
    "cad": "CAD",
    "¥": "JPY",
    "jpy": "JPY",
    "yen": "JPY",
}
_SCALE = {
    "thousand": 3,
    "k": 3,
    "million": 6,
    "millions": 6,
    "mm": 6,
    "mn": 6,
    "mil": 6,
    "m": 6,
    "billion": 9,
    "billions": 9,
    "bn": 9,
    "b": 9,
    "trillion": 12,
    "trillions": 12,
    "tn": 12,
}
_SHORT_SCALES = {"k", "m", "b"}  # only with a currency sign: "$5m", never "3M" the company
_COUNT_UNITS = {
    "day": "day",
    "days": "day",
    "business day": "business day",
    "business days": "business day",
    "month": "month",
    "months": "month",
    "year": "year",
    "years": "year",
    "week": "week",
    "weeks": "week",
    "share": "share",
    "shares": "share",
    "store": "store",
    "stores": "store",
    "employee": "employee",
    "employees": "employee",
}
_WORD_NUMBERS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100}
_WORD_FRACTIONS = {
    "one-half": Fraction(1, 2),
    "one half": Fraction(1, 2),
    "half": Fraction(1, 2),
    "one-quarter": Fraction(1, 4),
    "one quarter": Fraction(1, 4),
    "one-fourth": Fraction(1, 4),
    "three-quarters": Fraction(3, 4),
    "three quarters": Fraction(3, 4),
    "three-fourths": Fraction(3, 4),
    "one-eighth": Fraction(1, 8),
    "one eighth": Fraction(1, 8),
    "three-eighths": Fraction(3, 8),
    "five-eighths": Fraction(5, 8),
    "seven-eighths": Fraction(7, 8),
    "one-third": Fraction(1, 3),
    "two-thirds": Fraction(2, 3),
}
_ZERO_WORDS = {"none", "zero", "nil", "there are none", "there is none"}
_NEGATIVE_CUES = re.compile(
    r"\b(decreas\w*|declin\w*|drop\w*|down|fell|fall\w*|lower|negative|loss\w*|shr[ua]nk\w*|reduc\w*|deficit|outflow)\b",
    re.IGNORECASE,
)
_POSITIVE_CUES = re.compile(
    r"\b(increas\w*|ris(?:e|es|ing|en)|rose|gr[eo]w\w*|higher|up|gain\w*|improv\w*)\b", re.IGNORECASE
)
_REFERENCE = re.compile(r"(?:section|article|exhibit|schedule|clause|note|item|annex|§|no\.|page|rule)\s*$", re.I)
_REFERENCE_LOOKBACK = 40  # characters before a figure searched for a reference word (keeps figures() linear)
_NUMERAL_CHARS = 40  # a longer run of digits (a line of digits, an account number) is no figure: nothing to ask about

_FRACTION_WORDS = "|".join(k.replace(" ", r"\s+") for k in _WORD_FRACTIONS)
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_WORD_UNITS = r"one|two|three|four|five|six|seven|eight|nine"
_WORD_BELOW_100 = (
    rf"(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[- ](?:{_WORD_UNITS}))?"
    rf"|{_WORD_UNITS}|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen"
)
# one to ninety-nine, and hundreds: "one hundred fifty", "two hundred and twenty-five"
_WORDNUM = rf"(?:{_WORD_UNITS})\s+hundred(?:\s+(?:and\s+)?(?:{_WORD_BELOW_100})\b)?|{_WORD_BELOW_100}|zero|hundred"
# what a word number must stand before to be read as a figure ("fifty basis points", never "fifty Lenders"); basis
# points plural only: agreements write the singular as a unit of precision ("in multiples of 1/100th of one basis
# point", "rounded to the nearest one basis point"), never as a rate anyone is asked about
_WORD_UNIT_AHEAD = (
    r"%|percent|per\s+cent|basis\s+points\b|bps\b|million|billion|thousand|times|days?|months?"
    r"|years?|weeks?|business\s+days?"
)
_CUR = r"US\$|U\.S\.\s?\$|C\$|USD|EUR|GBP|CAD|JPY|[$€£¥]"
_SCALE_RE = r"thousand|millions?|billions?|trillions?|mm|mn|mil|bn|tn|k|m|b"
_PCT = r"%|percent(?:age\s+points?)?|per\s+cent|pct|basis\s+points?|bps|bp"
# Matching is linear in the text (a whitespace run costs its length, not a power of it): every whitespace run
# between two tokens is consumed possessively (`\s*+`; a token never starts with whitespace, so giving some back
# could only move it to a later `\s*` with the same result); an attempt starts inside a whitespace run only where
# the old pattern's first attempt in that run would (its first character, the next one when the lookbehind refuses
# the first, or the last one, where a previous match may end; an atomic group, so that a failed attempt does not
# retry it); and the trailing whitespace a figure swallows is stated explicitly (the `(?(cur2)...)` tail): all of
# the run when what follows may end a figure, else all but its last character, exactly as the nested optional `\s*`
# of the earlier pattern ended (tests/test_text_time.py compares both on generated text).
_FIGURE = re.compile(
    rf"""
    (?P<frac_of>(?<!\d)(?P<fnum>\d++)\s*+/\s*+(?P<fden>\d++)
        |(?:(?<![\w-])(?P<fint>{_WORDNUM})\s++and\s++)?(?P<fword>{_FRACTION_WORDS}))
        \s++of\s++(?:one|1)\s*+(?:%|percent|per\s++cent)
    | (?<![\w.,/])(?P<ratio>(?P<rnum>{_NUM})(?:\s*+:\s*+(?P<rden>{_NUM})|\s++to\s++(?P<rone>1(?:\.0+)?))(?![\d/]))
    | (?<![\w.,/])(?>(?!\s)|(?<!\s)|(?<=[\w.,/]\s)|(?=\s\S))
      (?P<lparen>\()?\s*+
      (?P<sign>[-+])?\s*+(?P<cur1>{_CUR})?\s*+(?P<lparen2>\()?\s*+(?P<sign2>-)?\s*+
      (?:(?<![\w.,/])(?<!\w-)(?P<num>{_NUM})(?!\d)(?!/\d)(?!-[A-Za-z\d])
        |(?<![\w-])(?P<word>{_WORDNUM})\b(?=\s*+(?:{_WORD_UNIT_AHEAD}))
        |(?<![\w-])(?P<wmixed>(?:(?P<wint>{_WORDNUM})\s++and\s++)?(?P<wfword>{_FRACTION_WORDS}))\b(?=\s*+(?:%|percent|per\s+cent))
      )
      (?P<rparen>\))?
      (?:\s*+(?P<scale>(?:{_SCALE_RE})\b))?
      (?:\s*+(?P<cur2>USD|EUR|GBP|CAD|JPY|dollars?|euros?|yen))?
      (?:\s*+(?P<unit>{_PCT}|x\b|×|times\b|business\s+days?\b|days?\b|months?\b|years?\b|weeks?\b|shares?\b|stores?\b|employees?\b))?
      (?(cur2)|(?(unit)|(?:\s*+(?![A-Za-z\d])|(?:\s(?=\s))*+(?=\s))))
      (?![A-Za-z\d])
    """,
    re.IGNORECASE | re.VERBOSE,
)


@dataclass(frozen=True)
class Figure:
    """One figure read from an answer, in base units (currency units, percent points, ratio)."""

    value: Fraction
    kind: Literal["money", "percent", "ratio", "count", "plain"]
    step: Fraction  # the stated precision in base units; 0 for exact (fractions of one percent)
    text: str
    currency: str | None = None
    scaled: bool = False  # a scale word (million, bn) was stated
    unit: str | None = None  # for counts: day, month, share ...
    paren: bool = False  # parenthesized in running text: the sign is ambiguous
    year_like: bool = False


def _decimal_step(numeral: str) -> Fraction:
    numeral = numeral.replace(",", "")
    return Fraction(1, 10 ** len(numeral.split(".")[1])) if "." in numeral else Fraction(1)


def _word_value(word: str) -> Fraction:
    """A word number's value: "twenty-five" 25, "one hundred and fifty" 150, "hundred" 100."""
    total = 0
    for part in re.split(r"[-\s]+", word.lower()):
        if part == "hundred":
            total = (total or 1) * 100
        elif part != "and":
            total += _WORD_NUMBERS[part]
    return Fraction(total)


def _figure(m: re.Match[str], whole: bool) -> Figure | None:
    text = m.group(0).strip()
    if m.group("frac_of"):
        if max(len(m.group("fnum") or ""), len(m.group("fden") or "")) > _NUMERAL_CHARS:
            return None
        value = (
            Fraction(int(m.group("fnum")), int(m.group("fden")))
            if m.group("fnum")
            else _WORD_FRACTIONS[re.sub(r"\s+", " ", m.group("fword").lower())]
        )
        if m.group("fint"):  # "five and three-fourths of one percent": 5.75
            value += _word_value(m.group("fint"))
        return Figure(value, "percent", Fraction(0), text)
    if m.group("ratio"):
        if max(len(m.group("rnum")), len(m.group("rden") or "")) > _NUMERAL_CHARS:
            return None
        num, den = (Fraction(x.replace(",", "")) for x in (m.group("rnum"), m.group("rden") or m.group("rone")))
        if den == 0:
            return None
        step = _decimal_step(m.group("rnum")) / den if den == 1 else Fraction(0)
        return Figure(num / den, "ratio", step, text)
    if m.group("word"):
        value, step = _word_value(m.group("word")), Fraction(1)
    elif m.group("wmixed"):  # "one and one-half percent", "one-half percent": exact
        whole_part = _word_value(m.group("wint")) if m.group("wint") else Fraction(0)
        value = whole_part + _WORD_FRACTIONS[re.sub(r"\s+", " ", m.group("wfword").lower())]
        step = Fraction(0)
    else:
        numeral = m.group("num")
        if len(numeral) > _NUMERAL_CHARS:
            return None
        value, step = Fraction(numeral.replace(",", "")), _decimal_step(numeral)
    currency = _CURRENCY.get(re.sub(r"\s", "", (m.group("cur1") or m.group("cur2") or "").lower()))
    scale_word = (m.group("scale") or "").lower()
    if scale_word in _SHORT_SCALES and not currency:
        return None  # "3M" the company, "5k": not an amount
    if scale_word:
        factor = Fraction(10) ** _SCALE[scale_word]
        value, step = value * factor, step * factor
    negative = bool(m.group("sign") == "-" or m.group("sign2"))
    paren = bool((m.group("lparen") or m.group("lparen2")) and m.group("rparen"))
    if paren and whole:
        negative, paren = True, False
    if negative:
        value = -value
    unit = re.sub(r"\s+", " ", (m.group("unit") or "").lower())
    if unit in ("%", "percent", "per cent", "pct") or unit.startswith("percentage point"):
        return Figure(value, "percent", step, text, paren=paren)
    if unit.startswith(("basis point", "bp")):
        return Figure(value / 100, "percent", step / 100, text, paren=paren)
    if unit in ("x", "×", "times"):
        return Figure(value, "ratio", step, text, paren=paren)
    if unit:
        return Figure(value, "count", step, text, unit=_COUNT_UNITS.get(unit, unit), paren=paren)
    if currency:
        return Figure(value, "money", step, text, currency=currency, scaled=bool(scale_word), paren=paren)
    numeral = m.group("num") or ""
    year_like = not scale_word and bool(re.fullmatch(r"(19|20)\d\d", numeral))
    return Figure(value, "plain", step, text, scaled=bool(scale_word), paren=paren, year_like=year_like)


def figures(text: str) -> list[Figure]:
    """Every figure in `text`, dates and section references left out."""
    text = _DATE.sub(" ", text)
    if text.strip().lower() in _ZERO_WORDS:
        return [Figure(Fraction(0), "plain", Fraction(1), text.strip())]
    whole = _FIGURE.fullmatch(text.strip()) is not None
    found = []
    for m in _FIGURE.finditer(text):
        if not m.group(0).strip() or _REFERENCE.search(text[max(0, m.start() - _REFERENCE_LOOKBACK) : m.start()]):
            continue
        figure = _figure(m, whole)
        if figure is not None:
            found.append(figure)
    if len(found) > 1:
        found = [f for f in found if not f.year_like] or found
    return found


# --------------------------------------------------------------------------------------------
# the question's scale and rounding
_QUESTION_SCALE = re.compile(
    r"\b(?:in|as)\s+(?:(?:usd|us\s*\$|\$|u\.s\.\s*dollars?)\s*)?(thousands|millions|billions)\b"
    r"|\b(thousands|millions|billions)\s+of\s+(?:dollars|usd)\b",
    re.IGNORECASE,
)
_QUESTION_DECIMALS = re.compile(
    r"(?:round\w*|to)\s+(?:\w+\s+){0,4}?(?P<n>\d|one|two|three|four)\s+decimal", re.IGNORECASE
)
_QUESTION_NEAREST = re.compile(
    r"nearest\s+(?P<what>whole\s+number|integer|whole\s+percent|percent|tenth|hundredth|thousandth|dollar|cent)",
    re.IGNORECASE,
)
_NEAREST = {
    "whole number": 0,
    "integer": 0,
    "whole percent": 0,
    "percent": 0,
    "dollar": 0,
    "tenth": 1,
    "hundredth": 2,
    "thousandth": 3,
    "cent": 2,
}


def question_scale(question: str | None) -> int:
    """Powers of ten the question asks figures to be stated in ("in USD millions" -> 6)."""
    m = _QUESTION_SCALE.search(question or "")
    return {"thousands": 3, "millions": 6, "billions": 9}[(m.group(1) or m.group(2)).lower()] if m else 0


def question_step(question: str | None) -> Fraction | None:
    """The rounding step the question asks for, in the stated unit ("two decimal places" -> 0.01)."""
    if m := _QUESTION_DECIMALS.search(question or ""):
        n = m.group("n")
        digits = int(n) if n.isdigit() else _WORD_NUMBERS[n.lower()]
        return Fraction(1, 10**digits)
    if m := _QUESTION_NEAREST.search(question or ""):
        return Fraction(1, 10 ** _NEAREST[re.sub(r"\s+", " ", m.group("what").lower())])
    return None


def _apply_question_scale(fig: Figure, power: int) -> Figure:
    if not power or fig.scaled or fig.kind not in ("money", "plain"):
        return fig
    factor = Fraction(10) ** power
    return replace(fig, value=fig.value * factor, step=fig.step * factor, scaled=True)


# --------------------------------------------------------------------------------------------
# dates
_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?"
    r"|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DATE = re.compile(
    rf"\b(?:{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:day\s+)?(?:of\s+)?{_MONTH},?\s+\d{{4}}"
    rf"|{_MONTH},?\s+\d{{4}}"
    r"|\d{4}-\d{1,2}-\d{1,2}|\d{4}/\d{1,2}/\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}-\d{1,2}-\d{4})\b",
    re.IGNORECASE,
)


def parse_date(text: str) -> tuple[datetime, bool] | None:
    """(date, day given) of one date string; US order for slashed dates (month first)."""
    from dateutil import parser

    cleaned = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text, flags=re.I).replace("day of", "")
    try:
        first = parser.parse(cleaned, default=datetime(2000, 1, 1))
        second = parser.parse(cleaned, default=datetime(2000, 1, 2))
    except (ValueError, OverflowError):
        return None
    return first, first.day == second.day


def dates(text: str) -> list[tuple[datetime, bool]]:
    return [d for m in _DATE.finditer(text) if (d := parse_date(m.group(0))) is not None]


# --------------------------------------------------------------------------------------------
# yes / no
_POLARITY = re.compile(r"^\s*(yes|no)\b[\s,.;:!-]*(.*)$", re.IGNORECASE | re.DOTALL)
_YES_NO_QUESTION = re.compile(
    r"^\s*(?:[^.?]*[.:,]\s+)?(is|are|was|were|does|do|did|has|have|had|can|could|will|would|should|may|must)\b",
    re.IGNORECASE,
)
_MORE_THAN_YES_NO = re.compile(
    r"\b(if so|if yes|if not|and (?:what|which|how|who|name)|what|which|how much|how many|name)\b", re.I
)


def polarity(text: str) -> tuple[str, str] | None:
    """("yes"|"no", the explanation after it), when the answer opens with yes or no."""
    m = _POLARITY.match(text)
    return (m.group(1).lower(), m.group(2).strip()) if m else None


def _yes_no(pred: str, gold: tuple[str, str], question: str | None) -> Comparison:
    found = polarity(pred)
    if found is None:
        return Comparison(verdict="undecided", reason="gold is yes/no; the prediction does not open with yes or no")
    if found[0] != gold[0]:
        return Comparison(verdict="different", reason=f"prediction says {found[0]}, gold says {gold[0]}")
    if found[1] and gold[1] and normalize_text(found[1]) != normalize_text(gold[1]):
        return Comparison(verdict="undecided", reason=f"both say {gold[0]}; their explanations differ")
    if question and (not _YES_NO_QUESTION.search(question) or _MORE_THAN_YES_NO.search(question)):
        if not found[1] or not gold[1]:
            return Comparison(verdict="undecided", reason="both say " + gold[0] + "; the question asks for more")
    return Comparison(verdict="equal", reason=f"both say {gold[0]}")


# --------------------------------------------------------------------------------------------
# comparing figures
_WORDS = re.compile(r"[A-Za-z][A-Za-z&'-]+")
_FILLER = set(
    "the a an of in on for to and or is was were are be been its it their his her this that as at by from with "
    "approximately about around roughly total totals amount amounted fy fiscal year quarter value ratio rate "
    "answer final usd dollars dollar million millions billion billions thousand percent per cent basis points "
    "bps times increase decrease increased decreased up down net roughly nearly some".split()
)


def _extra_words(text: str, figs: list[Figure], question: str | None) -> list[str]:
    """Content words of `text` beyond its figures and the question's own words."""
    for f in figs:
        text = text.replace(f.text, " ")
    known = {w.lower() for w in _WORDS.findall(question or "")}
    return [w for w in _WORDS.findall(text) if w.lower() not in _FILLER and w.lower() not in known]


def _readings(pred: Figure, gold: Figure) -> list[Fraction] | None:
    """Values the prediction may mean in the gold's unit; None when the kinds cannot be compared."""
    if pred.kind == gold.kind:
        if pred.kind == "money" and pred.currency != gold.currency:
            return None
        if pred.kind == "count" and pred.unit != gold.unit:
            return None
        return [pred.value]
    if "plain" in (pred.kind, gold.kind):
        other = gold if pred.kind == "plain" else pred
        if other.kind == "percent":  # 65.4 or 0.654 for 65.4%
            return [pred.value, pred.value * 100] if pred.kind == "plain" else [pred.value, pred.value / 100]
        return [pred.value]
    return None


def _near(value: Fraction, target: Fraction, step: Fraction) -> bool:
    """`value` rounds to `target` at `step`, half away from zero (finance's convention: 1.25 -> 1.3, -1.25
    -> -1.3): within half a step, the half step itself on the side toward zero only. A program giving 0.025
    for a stated 2% computed another figure (half up it is 3%); 0.015 is a rounding of it."""
    off = (value - target) * 2 * (1 if target >= 0 else -1)
    return -step <= off < step


def compare_figures(pred: Figure, gold: Figure, question: str | None = None) -> Comparison:
    """Compare one predicted figure with one gold figure at the gold's (or question's) precision."""
    readings = _readings(pred, gold)
    if readings is None:
        if {pred.kind, gold.kind} == {"percent", "ratio"} or pred.kind == gold.kind == "count":
            return Comparison(verdict="undecided", reason=f"{pred.kind} {pred.text!r} vs {gold.kind} {gold.text!r}")
        what = f"{pred.currency or pred.unit or pred.kind} vs {gold.currency or gold.unit or gold.kind}"
        return Comparison(verdict="different", reason=f"different units: {what}")
    asked = question_step(question)
    for value in readings:
        if value == gold.value:
            return Comparison(verdict="equal", reason=f"{pred.text!r} = {gold.text!r}")
        if asked is not None:
            unit = Fraction(10) ** question_scale(question) if gold.kind in ("money", "plain") else 1
            if value * gold.value > 0 and _near(value, gold.value, max(asked * unit, gold.step)):
                return Comparison(verdict="equal", reason=f"{pred.text!r} rounds to {gold.text!r} as the question asks")
        if value * gold.value > 0 and pred.step <= gold.step and _near(value, gold.value, gold.step):
            return Comparison(verdict="equal", reason=f"{pred.text!r} rounds to {gold.text!r} at the gold's precision")
    for value in readings:
        # undecided, not equal: the judge reads it, so both conventions at the half step (1.2x for 1.25)
        if pred.step > gold.step and abs(gold.value - value) * 2 <= pred.step:
            return Comparison(verdict="undecided", reason=f"{pred.text!r} is a coarser rounding of {gold.text!r}")
        if value == -gold.value and (pred.paren or gold.paren):
            return Comparison(verdict="undecided", reason="same magnitude; parenthesized sign is ambiguous")
        if value and gold.value and (pred.scaled != gold.scaled) and _power_of_thousand(value / gold.value):
            return Comparison(verdict="undecided", reason="same digits at a different scale; one side states none")
    return Comparison(verdict="different", reason=f"{pred.text!r} != {gold.text!r}")


def _power_of_thousand(ratio: Fraction) -> bool:
    ratio = abs(ratio)
    return any(ratio == Fraction(1000) ** k or ratio == Fraction(1, 1000**k) for k in (1, 2, 3, 4))


# --------------------------------------------------------------------------------------------
# qualified figures: "not $35 million", "less than 2%", "at least $10 million", "approximately 5%"
_APPROXIMATE = {
    "approximately",
    "approx",
    "approx.",
    "about",
    "around",
    "roughly",
    "circa",
    "~",
    "some",
    "close to",
    "or so",
}
_BEFORE = (
    r"not(?:\s+(?:equal\s+to|exactly|quite))?|never|anything\s+but|other\s+than|except|excluding"
    r"|less\s+than|fewer\s+than|lower\s+than|more\s+than|greater\s+than|higher\s+than|in\s+excess\s+of"
    r"|at\s+(?:least|most)|up\s+to|as\s+(?:much|many|little|few)\s+as|no\s+(?:more|less|fewer)\s+than"
    r"|over|under|below|above|exceed(?:s|ing)?|nearly|almost|just\s+(?:over|under|below|above)|within|maximum(?:\s+of)?"
    r"|minimum(?:\s+of)?|approximately|approx\.?|about|around|roughly|circa|close\s+to|some|[<>≤≥~]=?"
)
_QUALIFIED_BEFORE = re.compile(rf"(?<![\w'])({_BEFORE})\s*(?:(?:is|was|were|of|by|be|at|the)\s+)?$", re.IGNORECASE)
_QUALIFIED_AFTER = re.compile(
    r"^\s*(\+(?![\d$])|or\s+(?:more|less|fewer|greater|higher|lower|above|below|so)\b|and\s+(?:above|up|over|below)\b"
    r"|at\s+(?:most|least)\b|or\s+thereabouts\b)",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"(?<!\w)(not|\w*n't|never|neither|nor|cannot|anything\s+but)(?!\w)", re.IGNORECASE)
_QUALIFIER_REACH = 60  # characters before a figure searched for a qualifier (linear in the answer's length)


def qualifier(text: str, figs: list[Figure]) -> str | None:
    """The word that qualifies or negates a figure of `text` ("less than", "not", "approximately"), if any."""
    start = 0
    for fig in figs:
        at = text.find(fig.text, start)
        if at < 0:
            continue
        start = at + len(fig.text)
        before = text[max(0, at - _QUALIFIER_REACH) : at]
        if m := _QUALIFIED_BEFORE.search(before) or _QUALIFIED_AFTER.match(text[start : start + _QUALIFIER_REACH]):
            return re.sub(r"\s+", " ", m.group(1).strip())
    m = _NEGATION.search(text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------
# entry point
def compare(predicted: str, gold: str, question: str | None = None) -> Comparison:
    """Equal / different / undecided for a predicted answer against the gold answer."""
    pred, ref = clean(predicted or ""), clean(gold or "")
    if not pred:
        return Comparison(verdict="different", reason="empty prediction")
    if not ref:
        return Comparison(verdict="undecided", reason="empty gold answer")
    if pred.lower() == ref.lower():
        return Comparison(verdict="equal", reason="identical answers")
    if gold_polarity := polarity(ref):
        return _yes_no(pred, gold_polarity, question)
    if polarity(pred):
        return Comparison(verdict="undecided", reason="prediction is yes/no, gold is not")
    gold_dates = dates(ref)
    if len(gold_dates) == 1 and not figures(ref):
        return _compare_dates(dates(pred), gold_dates[0])
    return _compare_text_figures(pred, ref, question)


def _compare_dates(pred_dates: list[tuple[datetime, bool]], gold: tuple[datetime, bool]) -> Comparison:
    if not pred_dates:
        return Comparison(verdict="undecided", reason="gold is a date; no date found in the prediction")
    if len({d for d, _ in pred_dates}) > 1:
        return Comparison(verdict="undecided", reason="several different dates in the prediction")
    (date, has_day), (gold_date, gold_day) = pred_dates[0], gold
    if has_day == gold_day:
        same = date.date() == gold_date.date()
        return Comparison(
            verdict="equal" if same else "different", reason=f"dates {date:%Y-%m-%d} vs {gold_date:%Y-%m-%d}"
        )
    if (date.year, date.month) != (gold_date.year, gold_date.month):
        return Comparison(verdict="different", reason="different month")
    return Comparison(verdict="undecided", reason="same month; only one side gives the day")


def _compare_text_figures(pred: str, ref: str, question: str | None) -> Comparison:
    power = question_scale(question)
    gold_figs = [_apply_question_scale(f, power) for f in figures(ref)]
    pred_figs = [_apply_question_scale(f, power) for f in figures(pred)]
    if not gold_figs:
        if normalize_text(pred) == normalize_text(ref):
            return Comparison(verdict="equal", reason="same words")
        return Comparison(verdict="undecided", reason="free-text gold answer")
    gold_fig = _one_figure(gold_figs)
    if gold_fig is None:
        if normalize_text(pred) == normalize_text(ref):
            return Comparison(verdict="equal", reason="same words and figures")
        return Comparison(verdict="undecided", reason="gold holds several figures")
    if not pred_figs:
        return Comparison(
            verdict="different" if not _has_number_words(pred) else "undecided", reason="no figure in the prediction"
        )
    if hedge := qualifier(pred, pred_figs):
        return _qualified(hedge, qualifier(ref, gold_figs))
    if "=" in pred and len(pred_figs) > 1:
        pred_figs = figures(pred.rsplit("=", 1)[1]) or pred_figs
        pred_figs = [_apply_question_scale(f, power) for f in pred_figs]
    results = [compare_figures(f, gold_fig, question) for f in pred_figs]
    verdicts = {r.verdict for r in results}
    if len(results) > 1 and verdicts != {"equal"}:
        return Comparison(verdict="undecided", reason="several figures in the prediction")
    result = results[0]
    if result.verdict == "equal" and _opposite_directions(pred, ref):
        return Comparison(verdict="undecided", reason="figure matches; the answers say opposite directions")
    if result.verdict == "equal" and len(_extra_words(ref, gold_figs, question)) > 2:
        return Comparison(verdict="undecided", reason="figure matches; the gold says more than the figure")
    if result.verdict == "different" and _sign_only(pred_figs[0], gold_fig, pred + " " + ref):
        return Comparison(verdict="undecided", reason="same magnitude; the sign is carried by words")
    return result


def _qualified(hedge: str, gold_hedge: str | None) -> Comparison:
    """A prediction that qualifies its figure is never equal: different, or undecided when the gold qualifies too."""
    if gold_hedge:
        return Comparison(verdict="undecided", reason=f"both answers qualify their figure ({hedge!r}, {gold_hedge!r})")
    verdict: Verdict = "undecided" if hedge.lower() in _APPROXIMATE else "different"
    return Comparison(verdict=verdict, reason=f"the prediction qualifies its figure ({hedge!r}); the gold states it")


def _one_figure(figs: list[Figure]) -> Figure | None:
    """The figure a gold answer states, also when it states it twice ("two percent (2%)")."""
    first = figs[0]
    if all(f.kind == first.kind and f.value == first.value for f in figs[1:]):
        return min(figs, key=lambda f: f.step)
    return None


def _sign_only(pred: Figure, gold: Figure, texts: str) -> bool:
    return pred.value == -gold.value and bool(_NEGATIVE_CUES.search(texts))


def _direction(text: str) -> set[str]:
    return {d for d, cue in (("up", _POSITIVE_CUES), ("down", _NEGATIVE_CUES)) if cue.search(text)}


def _opposite_directions(pred: str, ref: str) -> bool:
    mine, gold = _direction(pred), _direction(ref)
    return len(mine) == len(gold) == 1 and mine != gold


def _has_number_words(text: str) -> bool:
    return bool(re.search(rf"\b(?:{_WORDNUM}|none|nil|half|quarter|percent|million|billion)\b", text, re.I))
