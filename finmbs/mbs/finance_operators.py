"""The engine's finance operators (`stages.finance_operators`, finmbs's, not in the paper).

The finance counterpart of `finmbs.mbs.program_operators`: from a verified finance problem whose program
quotes a figure of its passage (`name = quote("verbatim text", value)`), the engine builds harder problems
itself, as programs over that quoted figure and inputs the engine states:

- `all_in_rate`: the mildest step over a lookup: the rate a loan bears once a quoted add-on applies over
  a base rate the engine states (4.8% plus the Default Rate's two percent: 6.8%), asked as a percent.
- `applied`: the quoted rate applied to a principal over a number of days under the day count (the
  passage's own, quoted, when it states one; else a 360-day year the question states). A figure added to
  another rate (a margin, spread or default-rate increase: `role` ADD_ON) is applied over a base the engine
  states (a benchmark rate, or the rate that otherwise applies); a rate of its own (RATE) alone.
- `backward`: the interest amount stated, the principal or the number of days asked for (FOBAR on the
  applied problem). Its program is `program_operators.search_program`: it fails unless exactly one
  admissible value (whole days; multiples of $100,000) gives the stated amount.
- `second_period`: an added step: the base rate resets for a second period, the interest over both asked.
- `two_figures`: a chain of two figures of one passage (FinQA's subtract): how much more interest accrues
  at one quoted rate than at the other.

Every function here is pure: it returns a `FinanceBuilt` (a question template with the company and each
figure's provision name still to fill, the program's body after the quote bindings, the values the text
must state) or a `program_operators.Refusal`. The model only names the provision a quoted figure comes from
(`finmbs.mbs.finance_leaves`), and the name is checked here (`role_error`): it holds no figure and fits the
figure's role (a margin, spread or fee added to a benchmark is never named as a benchmark itself).
Because the program's figures enter only by quotes and the question by slots, the same `FinanceBuilt`
re-grounds onto another agreement by rebinding each quote to that agreement's analogous figure
(`finmbs.mbs.rebind`).
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from finmbs.ingest.verbatim import find_verbatim
from finmbs.mbs import program_operators as ops
from finmbs.mbs.finance_terms import (
    BENCHMARKS,
    DAYS,
    FEE,
    OVER,
    OVER_AFTER,
    PRINCIPALS,
    answer_text,
    flat_decimals,
    naming_error,
    pick,
)
from finmbs.verify.program import bindings, called_names
from finmbs.verify.spans import Span, candidate_spans

ADD_ON, RATE, DAY_COUNT = "add_on", "rate", "day_count"
BENCHMARK, OTHERWISE = "benchmark", "otherwise"  # what an add-on is added to, as the question states it
# a figure's plausible range by role (a rebinding outside it is rejected, both values named)
RANGES: dict[str, tuple[Fraction, Fraction]] = {
    ADD_ON: (Fraction(0), Fraction(10, 100)),  # above 0, at most 10 percentage points
    RATE: (Fraction(0), Fraction(25, 100)),
    DAY_COUNT: (Fraction(360), Fraction(366)),
}
# the names the engine's programs bind themselves (`_givens_lines`, the operators' bodies, the backward
# search's, `ops.search_program`): a quoted figure never takes one of them
PRINCIPAL_STEP = 100_000  # a backward principal: the admissible principals are its multiples
SEARCH_DAYS = 366  # a backward number of days: 1 .. this
ROUNDING = "Give the answer in dollars, rounded to the nearest cent."
CONTEXT_CHARS = 160
_BENCHMARK_WORDS = re.compile(
    r"\b(sofr|libor|euribor|sonia|benchmark|base rate|prime rate|federal funds|fed funds|eurodollar|"
    r"alternate base|reference rate|floor|cap)\b",
    re.I,
)
_ADD_ON_WORDS = re.compile(
    r"\b(margin|spread|premium|fee|increase|increment|additional|default|post-default|above|in excess)\b", re.I
)
# over a benchmark, the name must say the figure is added to it; a default rate already holds its benchmark
_OVER_BENCHMARK_WORDS = re.compile(r"\b(margin|spread|premium|fee|increment)\b", re.I)
_OTHERWISE = re.compile(r"otherwise (?:applicable|payable|in effect)|default|overdue|past due", re.I)
_DAYS_AFTER = re.compile(r"^\s*\)?\s*days?\b", re.I)
_YEAR_BEFORE = re.compile(r"\byear\s+of\s*$", re.I)
TERM = re.compile(r"[“\"]\s*([A-Z][^”\"]{1,60}?)\s*[”\"]")


# ---------------------------------------------------------------- a passage's figures and their roles


@dataclass(frozen=True)
class QuotedFigure:
    """A figure a program takes from its passage: its variable, the verbatim text, the value bound, where the
    passage states it (`start`, -1 when the text is not found) and its role there (None: none the operators use)."""

    name: str
    text: str
    value: Fraction
    start: int
    role: str | None
    base: str | None = None  # an add-on's base: BENCHMARK or OTHERWISE
    context: str = ""


def context_of(passage: str, start: int, end: int) -> tuple[str, str]:
    """(the passage's text before a figure, after it) within CONTEXT_CHARS."""
    return passage[max(0, start - CONTEXT_CHARS) : start], passage[end : end + CONTEXT_CHARS]


def role_of(passage: str, start: int, text: str, value: Fraction, kind: str) -> tuple[str | None, str | None]:
    """(role, base) of a figure at `start` of `passage`: a day count (360 or 365 days of a year), a rate added
    to another (an add-on: over a benchmark, or over the rate otherwise applicable), a rate of its own, or
    (None, None) for any other figure."""
    before, after = context_of(passage, start, start + len(text))
    if kind != "percent":
        if value in (360, 365, 366) and _DAYS_AFTER.match(after) and _YEAR_BEFORE.search(before[-40:] + " "):
            return DAY_COUNT, None
        if value in (360, 365, 366) and _DAYS_AFTER.match(after) and re.search(r"\byear\b", before[-60:], re.I):
            return DAY_COUNT, None
        return None, None
    if not 0 < value <= RANGES[RATE][1]:
        return None, None
    flat = flat_decimals(before)  # "0.50%" is no sentence end
    if OVER_AFTER.match(after) or re.match(
        r"^\s*(?:\([^)]{0,20}\)\s*)?(?:per annum\s*)?(?:plus|in excess)", after, re.I
    ):
        near = before + " " + after[:120]
        return ADD_ON, OTHERWISE if _OTHERWISE.search(near) else BENCHMARK
    if OVER.search(flat) and not FEE.search(before):
        return ADD_ON, OTHERWISE if _OTHERWISE.search(before) else BENCHMARK
    if re.search(r"\b(rate|interest|fee|per annum)\b", before + " " + after[:40], re.I):
        return RATE, None
    return None, None


def quoted_figures(program: str, passage: str) -> list[QuotedFigure]:
    """The figures `program` binds by `name = quote("text", value)` at its top level, each located in the
    passage and given its role there, under the program's name for it (`build` renames one whose name the
    operator's own program uses)."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "quote"):
            continue
        if len(call.args) != 2 or not all(isinstance(a, ast.Constant) for a in call.args):
            continue
        text, value = call.args[0].value, call.args[1].value  # type: ignore[attr-defined]
        if not isinstance(text, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        span = next((s for s in candidate_spans(passage) if s.text == " ".join(text.split())), None)
        start = passage.find(span.text) if span else -1
        kind = span.kind if span else ("percent" if "%" in text or "percent" in text.lower() else "plain")
        exact = Fraction(str(value))
        role, base = role_of(passage, start, span.text, span.value, kind) if span and start >= 0 else (None, None)
        before, after = context_of(passage, start, start + len(text)) if start >= 0 else ("", "")
        name = node.targets[0].id
        found.append(QuotedFigure(name, text, exact, start, role, base, " ".join(f"{before} [{text}] {after}".split())))
    return found


def span_figure(passage: str, span: Span, name: str) -> QuotedFigure:
    """A candidate span of `passage` as a figure the engine may quote, with its role."""
    start = passage.find(span.text)
    if start < 0:  # the span's text joins whitespace runs: find it across them
        at = find_verbatim(span.text, passage)
        start = at[0] if at else -1
    role, base = role_of(passage, start, span.text, span.value, span.kind) if start >= 0 else (None, None)
    before, after = context_of(passage, max(start, 0), max(start, 0) + len(span.text))
    return QuotedFigure(
        name, span.text, span.value, start, role, base, " ".join(f"{before} [{span.text}] {after}".split())
    )


def day_count(passage: str) -> QuotedFigure | None:
    """The passage's day count (`a year of 360 days`) as a figure to quote, or None."""
    for span in candidate_spans(passage):
        if span.kind != "percent" and span.value in (360, 365, 366):
            figure = span_figure(passage, span, "basis")
            if figure.role == DAY_COUNT:
                return figure
    return None


# ---------------------------------------------------------------- names of provisions


def role_error(name: str, role: str, base: str | None = None) -> str | None:
    """Why `name` cannot name a figure of `role`: it holds a figure, or names another role. An add-on (a
    margin, spread, fee or default-rate increase added to another rate) is never named as a benchmark or a
    floor ("the Adjusted Term SOFR Rate", "Floor"); over a benchmark its name must say it is added
    ("margin", "spread", "fee", "premium", "default"...)."""
    if why := naming_error(name):
        return why
    if role in (ADD_ON, RATE) and _BENCHMARK_WORDS.search(name) and not _ADD_ON_WORDS.search(name):
        return f"the words {name.strip()!r} name a benchmark or floor, not the {role_words(role)} the passage states"
    if role == ADD_ON and base == BENCHMARK and not _OVER_BENCHMARK_WORDS.search(name):
        return f"the words {name.strip()!r} do not name a margin, spread or fee added to the benchmark"
    return None


def role_words(role: str) -> str:
    return {ADD_ON: "margin added to another rate", RATE: "rate", DAY_COUNT: "day count"}.get(role, role)


# a defined term's definition opens ("“Default Rate” means", "shall have the meaning") and ends (a period or
# semicolon before the next quoted term, or a paragraph's end); an inline definition follows its phrase
_MEANS = re.compile(r"^\s*(?:shall\s+)?(?:means?|have\s+the\s+meaning|has\s+the\s+meaning)\b", re.I)
_DEFINITION_END = re.compile(r"[.;]\s*\n|[.;]\s+(?=[“\"])|\.\s+(?=[A-Z][a-z]+\s)")
_INLINE_TERM = re.compile(r"^[^.;“\"]{0,240}?\(\s*(?:the|such|a|an)?\s*[“\"]\s*([A-Z][^”\"]{1,60}?)\s*[”\"]\s*\)")
DEFINITION_CHARS = 1500  # a definition the figure sits in starts at most this far before it


def defining_term(passage: str, figure: QuotedFigure) -> str | None:
    """The defined term whose definition holds the figure: a term defined before it (“Default Rate” means ...
    two percent (2%) ...) with no definition's end between, or a phrase holding it defined inline after it
    in the same sentence (... plus 2% (the “Default Rate”)); None when the passage shows neither."""
    if figure.start < 0:
        return None
    after = passage[figure.start + len(figure.text) :]
    if inline := _INLINE_TERM.match(after):
        return " ".join(inline.group(1).split())
    before = passage[max(0, figure.start - DEFINITION_CHARS) : figure.start]
    terms = list(TERM.finditer(before))
    if not terms:
        return None
    last = terms[-1]
    between = before[last.end() :]
    if not _MEANS.match(between) or _DEFINITION_END.search(flat_decimals(between)):
        return None
    return " ".join(last.group(1).split())


def passage_name_error(name: str, passage: str, figure: QuotedFigure) -> str | None:
    """Why `name` is not what the passage calls the figure: where the passage defines the term whose
    definition holds the figure (`defining_term`), the name must use that term (or be a shorter form of it:
    "the Default Rate" for “Post-Default Rate”); a model naming the 2% of the Default Rate's definition "the
    Applicable Margin for Term SOFR Loans" points the solver at another provision."""
    term = defining_term(passage, figure)
    if term is None:
        return None
    own = " ".join(name.lower().split())
    key = " ".join(term.lower().split())
    short = re.sub(r"^the\s+", "", own)
    if key in own or (len(short.split()) >= 2 and short in key):
        return None
    return f"the passage defines the figure's provision as “{term}”, not {name.strip()!r}"


def engine_name(passage: str, figure: QuotedFigure) -> str | None:
    """The engine's own name for a figure: the defined term whose definition holds it (`defining_term`), else
    the defined term (“Default Rate”) nearest before it in the passage, or a section heading's words
    (`Section 10.5 Default Rate of Interest`), or for an unnamed default-rate clause what it provides for
    (interest on overdue amounts); None when there is none."""
    if figure.start < 0:
        return None
    if term := defining_term(passage, figure):
        return "the " + term
    before = passage[: figure.start]
    terms = list(TERM.finditer(before))
    if terms:
        return "the " + " ".join(terms[-1].group(1).split())
    heading = re.findall(r"Section\s+[\d.()a-z]+\s+([A-Z][A-Za-z\- ]{3,60}?)\s*\.", before)
    if heading:
        return "the " + heading[-1].strip()
    if figure.role == ADD_ON and figure.base == OTHERWISE:  # an unnamed clause: what it provides for
        if re.search(r"overdue|past due", figure.context, re.I):
            return "the provision on interest on overdue amounts"
        if re.search(r"event of default", figure.context, re.I):
            return "the provision on interest after an Event of Default"
    return None


# ---------------------------------------------------------------- what an operator builds


@dataclass
class FinanceBuilt:
    """A new finance problem as the engine builds it: its question as a template (`{company}`, and `{name0}`,
    `{name1}` for the provision names of its figures), the quoted figures, the program's body after their
    bindings, the engine's givens (shown: the values the text states, in its units: 7.25 for 7.25%), the exact
    answer the engine expects, and its unit."""

    operator: str
    template: str
    figures: list[QuotedFigure]
    body: str
    states: list[Fraction]
    expect: Fraction
    unit: str = "money"
    details: dict[str, Any] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)  # filled once the provisions are named
    answer: str | None = None  # filled once the sandbox ran the program
    prelude: bool = True  # the quote bindings precede the body (a backward body quotes inside its search)
    terms: Terms | None = None
    named: int = 1  # how many figures the question names ({name0}, {name1})

    def program(self) -> str:
        """The program: each figure quoted, then the body."""
        if not self.prelude:
            return self.body
        return "\n".join([binding(f) for f in self.figures] + [self.body])

    def question(self, company: str, names: list[str] | None = None) -> str:
        names = names if names is not None else self.names
        return self.template.format(company=company, **{f"name{i}": n for i, n in enumerate(names)})

    def spec(self) -> dict[str, Any]:
        """What re-grounding by rebinding needs (stored as meta.finance_op): the operator, the engine's terms
        and each figure with its role and provision name; `rebuild` builds the same problem over other figures."""
        terms = self.terms
        return {
            "operator": self.operator,
            "terms": {
                "principal": ops.literal(terms.principal), "base": literal_of(terms.base), "days": terms.days,
                "basis": terms.basis, "key": terms.key,
            } if terms else None,
            "figures": [
                {"name": f.name, "text": f.text, "value": literal_of(f.value), "role": f.role, "base": f.base,
                 "context": f.context, "provision": n}
                for f, n in zip(self.figures, self.names + [""] * len(self.figures))
            ],
        }  # fmt: skip


def binding(figure: QuotedFigure) -> str:
    return f"{figure.name} = quote({figure.text!r}, {literal_of(figure.value)})"


def literal_of(value: Fraction) -> str:
    """A figure's value as the program binds it (an int when whole, else the nearest float)."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


def percent_text(rate: Fraction) -> str:
    """A rate as the question states it: 0.0725 -> 7.25%."""
    return f"{float(rate * 100):g}%"


def money_text(value: Fraction) -> str:
    return f"${int(value):,}" if value.denominator == 1 else f"${float(round(value, 2)):,.2f}"


def cents(value: Fraction) -> Fraction:
    """`value` rounded half up to whole cents (the engine's exact value of round(x, 2) away from ties)."""
    return Fraction(round(value * 100), 100)


@dataclass(frozen=True)
class Terms:
    """The engine's inputs to an interest computation: principal, base rate (for an add-on), days, and the day
    count basis (quoted from the passage when `quoted_basis`, else stated as a 360-day year)."""

    principal: Fraction
    base: Fraction
    days: int
    basis: int = 360
    quoted_basis: QuotedFigure | None = None
    key: str = ""  # what seeded the draws (an added step draws its own from it)


def terms_for(key: str, figure_value: Fraction, basis: QuotedFigure | None, exact: bool = True) -> Terms:
    """Seeded inputs (a rerun draws the same): a principal and days among the engine's lists, a benchmark;
    with `exact`, the first combination whose interest is whole cents (so a backward question states it
    exactly), else the seeded one."""
    days_basis = int(basis.value) if basis else 360
    base = Fraction(pick(BENCHMARKS, key, "benchmark"))
    first = (Fraction(pick(PRINCIPALS, key, "principal")), int(pick(DAYS, key, "days")))
    order = [first] + [(Fraction(p), d) for d in (90, 180, 30, 60) for p in PRINCIPALS]
    if exact:
        for p, d in order:
            if (p * (base + figure_value) * d / days_basis * 100).denominator == 1:
                return Terms(p, base, d, days_basis, basis, key)
    return Terms(first[0], base, first[1], days_basis, basis, key)


def _givens_lines(terms: Terms, add_on: bool) -> list[str]:
    lines = [f"principal = {ops.literal(terms.principal)}"]
    if add_on:
        lines.append(f"base_rate = {literal_of(terms.base)}")
    lines.append(f"days = {terms.days}")
    if terms.quoted_basis is None:
        lines.append(f"basis = {terms.basis}")
    return lines


def _rate_expr(figure: QuotedFigure, base: str = "base_rate") -> str:
    return f"({base} + {figure.name})" if figure.role == ADD_ON else figure.name


def _year(terms: Terms) -> tuple[str, list[Fraction]]:
    """The day count clause and what it states: the passage's own (quoted: it states nothing), or 360 days."""
    if terms.quoted_basis is not None:
        return "with interest computed on the day count the agreement states", []
    return f"on a {terms.basis}-day year", [Fraction(terms.basis)]


def _loan(figure: QuotedFigure, terms: Terms, slot: str = "{name0}") -> tuple[str, list[Fraction]]:
    """The sentence stating the loan and its rate, and the values it states."""
    p = money_text(terms.principal)
    if figure.role == ADD_ON and figure.base == OTHERWISE:
        return (
            f"a loan of {p} would otherwise bear interest at {percent_text(terms.base)} per annum, and, "
            f"{occasion(figure)}, interest on it accrues as {slot} provides",
            [terms.principal, terms.base * 100],
        )
    if figure.role == ADD_ON:
        return (
            f"a loan of {p} bears interest at a benchmark rate of {percent_text(terms.base)} plus {slot}",
            [terms.principal, terms.base * 100],
        )
    return f"a loan of {p} bears interest at {slot}", [terms.principal]


def occasion(figure: QuotedFigure) -> str:
    """When a default-rate increase applies, as its clause says: principal overdue, or an Event of Default."""
    if re.search(r"overdue|past due", figure.context, re.I):
        return "its principal being overdue"
    return "an Event of Default having occurred and continuing"


def _figures(program_figures: list[QuotedFigure], terms: Terms) -> list[QuotedFigure]:
    return program_figures + ([terms.quoted_basis] if terms.quoted_basis else [])


def interest(figure: QuotedFigure, terms: Terms, days: int | None = None, base: Fraction | None = None) -> Fraction:
    """The exact interest the engine expects (before rounding)."""
    rate = (terms.base if base is None else base) + figure.value if figure.role == ADD_ON else figure.value
    return terms.principal * rate * (terms.days if days is None else days) / terms.basis


def usable(figure: QuotedFigure) -> ops.Refusal | None:
    if figure.role not in (ADD_ON, RATE):
        return ops.Refusal("applied", f"the quoted figure {figure.text!r} is no rate the operators apply")
    low, high = RANGES[figure.role]
    if not low < figure.value <= high:
        return ops.Refusal("applied", f"the quoted figure {figure.text!r} = {figure.value} is outside {low}..{high}")
    return None


def all_in_rate(figure: QuotedFigure, terms: Terms) -> FinanceBuilt | ops.Refusal:
    """The rate per annum a loan bears once the quoted add-on applies over the engine's base rate: one
    addition over the lookup, for a leaf the target solves (module docstring). A rate of its own is refused:
    asking for it is the lookup again."""
    if refusal := usable(figure):
        return refusal
    if figure.role != ADD_ON:
        return ops.Refusal("all_in_rate", f"the quoted figure {figure.text!r} is a rate of its own: nothing to add")
    loan, states = _loan(figure, terms)
    loan = loan.replace(f"a loan of {money_text(terms.principal)}", "a loan")
    states = [s for s in states if s != terms.principal]
    ask = (
        "At what rate per annum does interest on it then accrue?"
        if figure.base == OTHERWISE
        else "At what rate per annum does it bear interest?"
    )
    return FinanceBuilt(
        operator="finance:all_in_rate",
        template=(f"Under {{company}}'s credit agreement, {loan}. {ask} Give the answer as a percent."),
        figures=[figure],
        body=f"base_rate = {literal_of(terms.base)}\nanswer = round({_rate_expr(figure)} * 100, 6)",
        states=states,
        expect=(terms.base + figure.value) * 100,
        unit="percent",
        details={"base": literal_of(terms.base)},
        terms=terms,
    )


def applied(figure: QuotedFigure, terms: Terms) -> FinanceBuilt | ops.Refusal:
    """The quoted rate applied to the engine's principal over its days (module docstring)."""
    if refusal := usable(figure):
        return refusal
    loan, states = _loan(figure, terms)
    year, year_states = _year(terms)
    template = (
        f"Under {{company}}'s credit agreement, {loan}. How much interest accrues on it over {terms.days} days, "
        f"{year}? {ROUNDING}"
    )
    body = "\n".join(
        _givens_lines(terms, figure.role == ADD_ON)
        + [f"answer = round(principal * {_rate_expr(figure)} * days / basis, 2)"]
    )
    return FinanceBuilt(
        operator="finance:applied",
        template=template,
        figures=_figures([figure], terms),
        body=body,
        states=states + [Fraction(terms.days)] + year_states,
        expect=cents(interest(figure, terms)),
        details={"principal": ops.literal(terms.principal), "days": terms.days, "base": literal_of(terms.base)},
        terms=terms,
    )


def backward(figure: QuotedFigure, terms: Terms, unknown: str) -> FinanceBuilt | ops.Refusal:
    """FOBAR on the applied problem: the interest amount stated (whole cents), `unknown` ("principal" or
    "days") asked for; the program searches its admissible values for the one that gives the amount."""
    if refusal := usable(figure):
        return refusal
    amount = interest(figure, terms)
    if amount.denominator != 1 and (amount * 100).denominator != 1:
        return ops.Refusal("backward", f"the interest {float(amount)} is not whole cents: it cannot be stated exactly")
    year, year_states = _year(terms)
    given_lines = _givens_lines(terms, figure.role == ADD_ON)
    if unknown == "principal":
        if terms.principal % PRINCIPAL_STEP:
            return ops.Refusal("backward", f"the principal {terms.principal} is no multiple of {PRINCIPAL_STEP}")
        loan, states = _loan(figure, terms)
        loan = loan.replace(f"a loan of {money_text(terms.principal)}", "a loan")
        states = [s for s in states if s != terms.principal]
        ask = (
            f"Over {terms.days} days, {year}, {money_text(amount)} of interest accrues on it. What is the loan's "
            f"principal (a whole multiple of {money_text(Fraction(PRINCIPAL_STEP))})? Give the answer in dollars."
        )
        forward_lines = [ln for ln in given_lines if not ln.startswith("principal =")] + ["principal = x"]
        step, points, expect = Fraction(PRINCIPAL_STEP), int(3 * terms.principal // PRINCIPAL_STEP), terms.principal
        states = states + [Fraction(terms.days), amount, Fraction(PRINCIPAL_STEP)] + year_states
        unit = "money"
    elif unknown == "days":
        loan, states = _loan(figure, terms)
        ask = (
            f"{year[0].upper()}{year[1:]}, {money_text(amount)} of interest has accrued on it. For how many days "
            "has it accrued? Give the answer as a whole number of days."
        )
        forward_lines = [ln for ln in given_lines if not ln.startswith("days =")] + ["days = x"]
        step, points, expect = Fraction(1), SEARCH_DAYS, Fraction(terms.days)
        states = states + [amount] + year_states
        unit = "days"
    else:
        return ops.Refusal("backward", f"no backward question for {unknown!r}")
    forward = "\n".join(
        [f"{f.name} = quote({f.text!r}, {literal_of(f.value)})" for f in _figures([figure], terms)]
        + forward_lines
        + [f"answer = principal * {_rate_expr(figure)} * days / basis"]
    )
    search = ops.search_program(forward, amount, step, points)
    return FinanceBuilt(
        operator=f"finance:backward:{unknown}",
        template=f"Under {{company}}'s credit agreement, {loan}. {ask}",
        figures=_figures([figure], terms),
        body=search,
        prelude=False,  # the quotes live inside the search's forward program
        terms=terms,
        states=states,
        expect=expect,
        unit=unit,
        details={
            "unknown": unknown,
            "amount": money_text(amount),
            "admissible": f"multiples of {step} up to {step * points}",
            "forward_figures": [f.name for f in _figures([figure], terms)],
        },
    )


def second_period(figure: QuotedFigure, terms: Terms) -> FinanceBuilt | ops.Refusal:
    """An added step: the base rate (or, for a rate of its own, nothing) resets after the first period and a
    second period of the engine's days follows; the interest over both asked."""
    if refusal := usable(figure):
        return refusal
    if figure.role != ADD_ON:
        return ops.Refusal("second_period", "the quoted figure is not added to a base rate that could reset")
    second_days = int(pick(tuple(d for d in DAYS if d != terms.days), terms.key, "second_days"))
    second_base = Fraction(pick(tuple(b for b in BENCHMARKS if b != terms.base), terms.key, "second_base"))
    loan, states = _loan(figure, terms)
    year, year_states = _year(terms)
    reset = "the rate it would otherwise bear" if figure.base == OTHERWISE else "the benchmark rate"
    template = (
        f"Under {{company}}'s credit agreement, {loan}, for a first period of {terms.days} days. For the next "
        f"{second_days} days {reset} is {percent_text(second_base)} instead, {{name0}} still applying. How "
        f"much interest accrues on it over both periods together, {year}? {ROUNDING}"
    )
    body = "\n".join(
        _givens_lines(terms, True)
        + [f"second_rate = {literal_of(second_base)}", f"second_days = {second_days}"]
        + [
            f"first = principal * {_rate_expr(figure)} * days / basis",
            f"second = principal * {_rate_expr(figure, 'second_rate')} * second_days / basis",
            "answer = round(first + second, 2)",
        ]
    )
    expect = interest(figure, terms) + interest(figure, terms, second_days, second_base)
    return FinanceBuilt(
        operator="finance:second_period",
        template=template,
        figures=_figures([figure], terms),
        body=body,
        states=states + [Fraction(terms.days), Fraction(second_days), second_base * 100] + year_states,
        expect=cents(expect),
        details={"second_days": second_days, "second_base": literal_of(second_base)},
        terms=terms,
    )


def two_figures(first: QuotedFigure, second: QuotedFigure, terms: Terms) -> FinanceBuilt | ops.Refusal:
    """A chain of two rates of one passage (FinQA's subtract over two figures): how much more interest the
    engine's loan accrues at the higher than at the lower; both rates of their own or both add-ons over one base."""
    for figure in (first, second):
        if refusal := usable(figure):
            return ops.Refusal("two_figures", refusal.reason)
    if first.role != second.role or first.base != second.base:
        return ops.Refusal("two_figures", f"{first.text!r} and {second.text!r} play different roles")
    if first.value == second.value:
        return ops.Refusal("two_figures", f"{first.text!r} and {second.text!r} are the same rate")
    high, low = (first, second) if first.value > second.value else (second, first)
    high = QuotedFigure(**{**high.__dict__, "name": "higher"})
    low = QuotedFigure(**{**low.__dict__, "name": "lower"})
    loan, states = _loan(high, terms, "{name0}")
    year, year_states = _year(terms)
    template = (
        f"Under {{company}}'s credit agreement, {loan}. How much more interest accrues on it over {terms.days} days "
        f"at {{name0}} than it would at {{name1}}, {year}? {ROUNDING}"
    )
    body = "\n".join(
        _givens_lines(terms, high.role == ADD_ON) + ["answer = round(principal * (higher - lower) * days / basis, 2)"]
    )
    return FinanceBuilt(
        operator="finance:two_figures",
        template=template,
        figures=_figures([high, low], terms),
        body=body,
        states=states + [Fraction(terms.days)] + year_states,
        expect=cents(terms.principal * (high.value - low.value) * terms.days / terms.basis),
        details={"higher": high.text, "lower": low.text},
        terms=terms,
        named=2,
    )


def build(operator: str, figures: list[QuotedFigure], terms: Terms) -> FinanceBuilt | ops.Refusal:
    """Operator `operator` (a FinanceBuilt's name) over `figures` (the rates it names, in order) and `terms`:
    what the leaf's operators build, and what rebinding builds again over another agreement's figures. A
    figure whose name the built program binds again, or a builtin's, is renamed `figure_k` and the program
    built again: the 1.5B named Brown-Forman's 2% `principal` in a run, and the engine's own `principal = ...`
    line overwrote it."""
    built = operator_built(operator, figures, terms)
    if isinstance(built, ops.Refusal) or not (taken := clashing(built.program(), figures)):
        return built
    renamed = [replace(f, name=f"figure_{i + 1}") if f.name in taken else f for i, f in enumerate(figures)]
    return operator_built(operator, renamed, terms)


def clashing(program: str, figures: list[QuotedFigure]) -> set[str]:
    """The figures' names that `program` binds more than once (an assignment, a loop or comprehension
    variable, an argument, a function, an import), calls (`quote`) or that name a builtin."""
    tree = ast.parse(program)
    bound, called = bindings(tree), called_names(tree)  # a function the program calls is never a figure's name
    return {f.name for f in figures if bound[f.name] > 1 or f.name in called or hasattr(builtins, f.name)}


def operator_built(operator: str, figures: list[QuotedFigure], terms: Terms) -> FinanceBuilt | ops.Refusal:
    """`build` before the names are checked."""
    if not figures:
        return ops.Refusal(operator, "no figure to build on")
    if operator == "finance:all_in_rate":
        return all_in_rate(figures[0], terms)
    if operator == "finance:applied":
        return applied(figures[0], terms)
    if operator.startswith("finance:backward:"):
        return backward(figures[0], terms, operator.rsplit(":", 1)[1])
    if operator == "finance:second_period":
        return second_period(figures[0], terms)
    if operator == "finance:two_figures" and len(figures) > 1:
        return two_figures(figures[0], figures[1], terms)
    return ops.Refusal(operator, f"no operator {operator!r} over {len(figures)} figure(s)")


def terms_of(spec: dict[str, Any], basis: QuotedFigure | None) -> Terms:
    """The engine's terms stored in a spec, with the day count of the new passage (`basis`, or 360 stated)."""
    t = spec["terms"]
    return Terms(
        principal=Fraction(t["principal"]),
        base=Fraction(t["base"]),
        days=int(t["days"]),
        basis=int(basis.value) if basis else 360,
        quoted_basis=basis,
        key=t.get("key", ""),
    )


def plain(value: Fraction) -> str:
    """A value written out in full (commas, up to six decimals, no trailing zeros)."""
    return f"{float(value):,.6f}".rstrip("0").rstrip(".")


def steps(principal: Fraction, rate: Fraction, days: int, basis: int) -> tuple[str, Fraction]:
    """Interest worked one operation at a time (a year's interest, times the days, over the year's days),
    each result written, so each follows from what came before; and its exact value."""
    year = principal * rate
    total = year * days
    return (
        f"a year's interest is {money_text(principal)} x {percent_text(rate)} = ${plain(year)}; "
        f"times {days} days it is {plain(total)}; divided by {basis} it is ${plain(total / basis)}",
        total / basis,
    )


def worked(built: FinanceBuilt) -> str:
    """The engine's worked solution of `built`, one operation a step with each result written (what the
    leakage rules read to see the answer derived from the passage's figure and the question's givens)."""
    t = built.terms
    if t is None or not built.figures:
        return ""
    f = built.figures[0]
    rate = (t.base + f.value) if f.role == ADD_ON else f.value
    stated = f"The passage's figure {f.text!r} is {percent_text(f.value)}"
    if f.role == ADD_ON:
        stated += f"; the rate is {percent_text(t.base)} + {percent_text(f.value)} = {percent_text(rate)} per annum"
    if built.operator == "finance:all_in_rate":
        return f"{stated}."
    if built.operator == "finance:applied":
        text, value = steps(t.principal, rate, t.days, t.basis)
        return f"{stated}. Interest: {text}, or {money_text(cents(value))}."
    amount = t.principal * rate * t.days / t.basis
    if built.operator == "finance:backward:principal":
        per = rate * t.days
        return (
            f"{stated}. {money_text(amount)} x {t.basis} = ${plain(amount * t.basis)}; {percent_text(rate)} x "
            f"{t.days} = {plain(per)}; the principal is ${plain(amount * t.basis)} / {plain(per)} = "
            f"{money_text(t.principal)}."
        )
    if built.operator == "finance:backward:days":
        year = t.principal * rate
        return (
            f"{stated}. A year's interest is {money_text(t.principal)} x {percent_text(rate)} = ${plain(year)}; "
            f"{money_text(amount)} x {t.basis} = ${plain(amount * t.basis)}; the days are ${plain(amount * t.basis)} / "
            f"${plain(year)} = {t.days}."
        )
    if built.operator == "finance:second_period":
        d2, b2 = int(built.details["second_days"]), Fraction(built.details["second_base"])
        one, first = steps(t.principal, rate, t.days, t.basis)
        two, second = steps(t.principal, b2 + f.value, d2, t.basis)
        return (
            f"{stated}. First period: {one}. Second period: the rate is {percent_text(b2)} + "
            f"{percent_text(f.value)} = {percent_text(b2 + f.value)}; {two}. Together: ${plain(first)} + "
            f"${plain(second)} = {money_text(cents(first + second))}."
        )
    if built.operator == "finance:two_figures" and len(built.figures) > 1:
        g = built.figures[1]
        text, value = steps(t.principal, f.value - g.value, t.days, t.basis)
        return (
            f"The passage's figures are {percent_text(f.value)} and {percent_text(g.value)}, "
            f"{percent_text(f.value - g.value)} apart. The difference in interest: {text}, or "
            f"{money_text(cents(value))}."
        )
    return ""


def answer_of(built: FinanceBuilt, value: float | Fraction) -> str:
    """The answer's text: money to the cent (a principal in whole dollars), days as a whole number."""
    if built.unit == "days":
        return str(int(round(float(value))))
    if built.unit == "percent":  # the value in percent units: 6.8 for 6.80%
        return answer_text(value, "percent")
    if built.operator == "finance:backward:principal":
        return f"${int(round(float(value))):,}"
    return answer_text(value, "money")


def as_built(built: FinanceBuilt, question: str = "") -> ops.Built:
    """`built` as the math operators' record: what `engine_leaves.slots` and `engine_leaves.variant` read
    (its text must state the engine's givens and withhold the answer)."""
    return ops.Built(
        operator=built.operator,
        question=question,
        program=built.program(),
        states=Counter(built.states),
        withholds={built.expect},
        answer=built.answer,
        expect=built.expect,
        details=built.details,
    )
