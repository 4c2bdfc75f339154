"""Seeds from facts (`mine.from_facts`, finmbs's, not the paper's): the engine, not the teacher, chooses what
a mined question computes.

A passage's facts are its extracted figures (`finmbs.verify.spans`: the verbatim text stating each one,
its parsed value and the words around it) or, for a filing in inline XBRL, its tagged facts (concept,
period, unit and value: exact by construction; `ixbrl_facts`). The engine picks a fact set that supports
one computation and the operation over it:

    interest    a rate of the passage, a principal and a number of days the engine gives:
                principal * rate * days / 360 (a margin: over a benchmark rate the engine gives)
    all_in_rate a margin of the passage over a benchmark rate the engine gives: (benchmark + margin) * 100,
                the rate per annum in percent (one step, where interest is three)
    fee         a fee rate on unused commitments: (commitment - used) * rate * days / 360
    headroom    a maximum (minimum) ratio level: level * denominator - numerator (numerator - level * ...)
    change      one XBRL concept over two fiscal years: (current - prior) / prior * 100
    ratio       two XBRL concepts of one fiscal year: part / whole * 100

Each fact and each given becomes a named variable the engine binds (a document figure by `quote()` of
its own text, so no invented quote is possible); the teacher writes the question over them and a
program over those names only. The engine's own value of the operation checks the program.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction
from pathlib import Path

from finmbs.ingest.verbatim import find_verbatim
from finmbs.mbs import finance_operators as fo
from finmbs.mbs.finance_terms import BENCHMARKS, DAYS, FEE, OVER, OVER_AFTER, PRINCIPALS, flat_decimals, pick
from finmbs.mine.questions import home_chunk
from finmbs.records import Chunk, Document, Snippet, shown_path
from finmbs.verify.spans import candidate_spans

MAX_RATE = Fraction(15, 100)  # a rate of interest or fees; "50% of the Commitments" is no rate
RATE = re.compile(r"\b(rate|margin|spread|interest|per annum|sofr|base rate|applicable|libor|euribor)\b", re.I)
RATIO = re.compile(r"\b(ratio|leverage|coverage)\b", re.I)
# a covenant's level, not a pricing grid's threshold ("Greater than 0.75 to 1.00") nor an election ("may exceed")
COVENANT = re.compile(
    r"(?:shall not permit|shall maintain|shall cause"
    r"|(?<!may )(?:not )?(?:to )?(?:exceed|be (?:less|greater|more) than))[^;]{0,120}$",
    re.I,
)
MAXIMUM = re.compile(r"\b(exceed|greater than|more than|maximum)\b", re.I)
MINIMUM = re.compile(r"\b(less than|at least|minimum|not below)\b", re.I)
OF_SOMETHING = re.compile(r"^\s*\)?\s*(?:\([^)]{0,20}\)\s*)?of\b", re.I)  # "25% of Consolidated Assets": a share
PRECISION = re.compile(r"\b(nearest|multiple|rounded|round)\b[^.;]{0,40}$", re.I)  # "to the nearest 1/100 of 1%"
CONTEXT_CHARS = 160  # of the passage before a figure, shown as its context

BENCHMARK_MEANING = (
    "the rate the passage adds this figure to (Term SOFR, the Federal Funds rate, the rate otherwise applicable: "
    "as the passage says)"
)
COMMITMENTS = (150_000_000, 250_000_000, 400_000_000)
DENOMINATORS = (120_000_000, 180_000_000, 250_000_000)


@dataclass
class Fact:
    """One document figure a program binds: its variable name, the verbatim text stating it (for an XBRL
    fact, its displayed text), the value bound, and what it is (context, or concept and period)."""

    name: str
    text: str
    value: Fraction
    kind: str  # percent (bound as a rate), money, ratio, count, plain
    context: str
    concept: str | None = None  # XBRL: us-gaap:Revenues ...
    period: str | None = None  # XBRL: 2023-10-01..2024-09-28
    unit: str | None = None  # XBRL: usd (scaled as displayed: the scale says by what)
    scale: int = 0  # XBRL: the displayed value times 10**scale is the fact's value
    char_start: int | None = None  # in the document text, where the engine located it

    def literal(self) -> str:
        v = self.value
        return str(v.numerator) if v.denominator == 1 else repr(float(v))

    def binding(self) -> str:
        return f"{self.name} = quote({self.text!r}, {self.literal()})"


@dataclass
class Given:
    """A hypothetical input the question must state (a principal, a number of days, a benchmark rate)."""

    name: str
    value: Fraction
    kind: str  # money, percent (bound as a rate), count
    meaning: str

    def literal(self) -> str:
        v = self.value
        return str(v.numerator) if v.denominator == 1 else repr(float(v))

    def stated(self) -> str:
        """How the question states it: "$25,000,000", "4.8%", "90 days"."""
        if self.kind == "money":
            return f"${int(self.value):,}" if self.value.denominator == 1 else f"${float(self.value):,.2f}"
        if self.kind == "percent":
            return f"{float(self.value * 100):g}%"
        return f"{self.value} days" if self.name == "days" else f"{self.value}"


@dataclass
class FactSet:
    """One computation the engine chose: the facts, the givens, the operation and its exact value."""

    operation: str
    facts: list[Fact]
    givens: list[Given]
    formula: str  # the operation over the names, as Python ("principal * rate * days / 360")
    description: str  # what the answer is, for the teacher
    unit: str  # money, percent (points: the answer 2.5 means 2.5%), ratio
    kind: str  # the question type it counts as (one_step, multi_step)
    value: Fraction = field(default=Fraction(0))

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.facts] + [g.name for g in self.givens]

    def prelude(self) -> str:
        """The program lines the engine writes: every fact quoted, every given bound."""
        lines = [f.binding() for f in self.facts]
        lines += [f"{g.name} = {g.literal()}" for g in self.givens]
        return "\n".join(lines)

    def compute(self) -> Fraction:
        """The operation's exact value (the formula over exact fractions)."""
        scope = {f.name: f.value for f in self.facts} | {g.name: g.value for g in self.givens}
        return Fraction(eval(self.formula, {"__builtins__": {}}, scope))  # noqa: S307 (the engine's own formula)


def rounding(unit: str) -> str:
    """The sentence the engine ends a question with, so that it has one answer."""
    return {
        "money": "Give the answer in dollars, rounded to the nearest cent.",
        "percent": "Give the answer as a percentage rounded to two decimal places.",
    }.get(unit, "Give the answer rounded to two decimal places.")


# --------------------------------------------------------------------------------------------- spans
def passage_facts(passage: str) -> list[Fact]:
    """The passage's figures a computation can use, from the extracted spans (verbatim text, value and
    context; their `quote()` holds on the passage by construction), each with the passage text before it."""
    found, cursor = [], 0
    for span in candidate_spans(passage):
        # a span's text joins the whitespace runs of the passage ("two and one-half percent\n(2.5%)"): found
        # up to them, and the fact keeps the passage's own characters, so it sits where char_start says
        at = find_verbatim(span.text, passage[cursor:])
        at = (at[0] + cursor, at[1] + cursor) if at else find_verbatim(span.text, passage)
        if at is None:
            continue  # not located: no context and no role to read, so not a fact to plan with
        start, end = at
        cursor = max(cursor, start + 1)
        before = passage[max(0, start - CONTEXT_CHARS) : start]
        line = before.rsplit("\n", 1)[-1]
        before = line if len(line) >= 40 else before  # a figure alone on its line: the lines before it too
        text = passage[start:end]
        context = " ".join(f"{before} [{text}] {passage[end : end + 60]}".split())
        found.append(Fact(name="", text=text, value=span.value, kind=span.kind, context=context, char_start=start))
    return found


def _after(passage: str, fact: Fact) -> str:
    start = fact.char_start or 0
    return passage[start + len(fact.text) : start + len(fact.text) + 40]


def _before(passage: str, fact: Fact) -> str:
    start = fact.char_start or 0
    return passage[max(0, start - CONTEXT_CHARS) : start]


def otherwise_add_on(passage: str, fact: Fact) -> bool:
    """Whether the passage adds `fact` to the rate otherwise applicable (a default rate's "2% above the
    rate otherwise applicable"), not to a benchmark: a question that adds it to a benchmark rate the engine
    states would be wrong in meaning (`from_facts.figure_name_error` refuses such a name too)."""
    if fact.char_start is None:
        return False
    _, base = fo.role_of(passage, fact.char_start, fact.text, fact.value, fact.kind)
    return base == fo.OTHERWISE


def span_fact_sets(passage: str, key: str) -> list[FactSet]:
    """Every computation the passage's figures support, best first: a fee on unused commitments, a ratio
    level's headroom, interest at a rate (over a benchmark for a margin). `key` seeds the givens."""
    sets: list[FactSet] = []
    seen: set[str] = set()
    for fact in passage_facts(passage):
        before, after = _before(passage, fact), _after(passage, fact)
        if fact.text in seen:
            continue
        rate = fact.kind == "percent" and 0 < fact.value <= MAX_RATE
        if rate and not OF_SOMETHING.match(after) and not PRECISION.search(before):
            if FEE.search(before):
                sets.append(fee_set(fact, key))
            elif RATE.search(before):
                over = OVER.search(flat_decimals(before)) or OVER_AFTER.match(after)  # 0.50% no end
                if over and otherwise_add_on(passage, fact):
                    continue  # a default rate's increase: no benchmark of the engine's to add it to
                sets.append(interest_set(fact, key, margin=bool(over)))
                if over:
                    sets.append(all_in_set(fact, key))
            else:
                continue
        elif fact.kind == "ratio" and RATIO.search(before) and COVENANT.search(before) and 0 < fact.value < 20:
            sets.append(headroom_set(fact, key, minimum=bool(MINIMUM.search(before[-80:]))))
        else:
            continue
        seen.add(fact.text)
    order = {"fee": 0, "headroom": 1, "interest": 2, "all_in_rate": 3}
    return sorted(sets, key=lambda s: order.get(s.operation, 9))


def interest_set(fact: Fact, key: str, margin: bool) -> FactSet:
    rate = Fact(**{**fact.__dict__, "name": "margin" if margin else "rate"})
    principal = Given("principal", Fraction(pick(PRINCIPALS, key, "principal")), "money", "the loan's principal")
    days = Given("days", Fraction(pick(DAYS, key, "days")), "count", "days of interest, on a 360-day year")
    if margin:
        benchmark = Given("benchmark", pick(BENCHMARKS, key, "benchmark"), "percent", BENCHMARK_MEANING)
        return _valued(
            FactSet(
                "interest",
                [rate],
                [principal, benchmark, days],
                "principal * (benchmark + margin) * days / 360",
                "the interest on the principal for the days, at the benchmark rate plus the passage's margin, on a "
                "360-day year",
                "money",
                "multi_step",
            )
        )
    return _valued(
        FactSet(
            "interest",
            [rate],
            [principal, days],
            "principal * rate * days / 360",
            "the interest (or charge) on the principal for the days at the passage's rate, on a 360-day year",
            "money",
            "multi_step",
        )
    )


def all_in_set(fact: Fact, key: str) -> FactSet:
    """The rate per annum a margin of the passage gives over a benchmark rate the engine states."""
    margin = Fact(**{**fact.__dict__, "name": "margin"})
    return _valued(
        FactSet(
            "all_in_rate",
            [margin],
            [Given("benchmark", pick(BENCHMARKS, key, "benchmark"), "percent", BENCHMARK_MEANING)],
            "(benchmark + margin) * 100",
            "the rate per annum, as a percent, at the benchmark rate plus the passage's margin",
            "percent",
            "one_step",
        )
    )


def fee_set(fact: Fact, key: str) -> FactSet:
    rate = Fact(**{**fact.__dict__, "name": "fee_rate"})
    commitment = Fraction(pick(COMMITMENTS, key, "commitment"))
    used = commitment * Fraction(pick((2, 3, 5), key, "used"), 10)
    return _valued(
        FactSet(
            "fee",
            [rate],
            [
                Given("commitment", commitment, "money", "the total commitments"),
                Given("used", used, "money", "the amount drawn (outstanding) throughout"),
                Given("days", Fraction(pick(DAYS, key, "days")), "count", "days, on a 360-day year"),
            ],
            "(commitment - used) * fee_rate * days / 360",
            "the fee on the unused commitments for the days at the passage's fee rate, on a 360-day year",
            "money",
            "multi_step",
        )
    )


def headroom_set(fact: Fact, key: str, minimum: bool) -> FactSet:
    level = Fact(**{**fact.__dict__, "name": "level"})
    denominator = Fraction(pick(DENOMINATORS, key, "denominator"))
    shares = (115, 130) if minimum else (70, 80, 90)  # the numerator the givens put inside the level
    share = Fraction(pick(shares, key, "share"), 100)
    numerator = Fraction(round(fact.value * denominator * share / 1_000_000) * 1_000_000)
    givens = [
        Given("numerator", numerator, "money", "the ratio's numerator (e.g. the debt)"),
        Given("denominator", denominator, "money", "the ratio's denominator (e.g. EBITDA)"),
    ]
    if minimum:
        return _valued(
            FactSet(
                "headroom",
                [level],
                givens,
                "numerator - level * denominator",
                "how far the numerator can fall before the ratio breaks the passage's minimum level",
                "money",
                "multi_step",
            )
        )
    return _valued(
        FactSet(
            "headroom",
            [level],
            givens,
            "level * denominator - numerator",
            "how much the numerator can grow before the ratio exceeds the passage's maximum level",
            "money",
            "multi_step",
        )
    )


def _valued(fact_set: FactSet) -> FactSet:
    fact_set.value = fact_set.compute()
    return fact_set


# --------------------------------------------------------------------------------------------- iXBRL
_CONTEXT = re.compile(r"<xbrli:context\b[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</xbrli:context>", re.S | re.I)
_NON_FRACTION = re.compile(r"<ix:nonFraction\b([^>]*)>(.*?)</ix:nonFraction>", re.S | re.I)
_ATTR = re.compile(r"([\w:-]+)=\"([^\"]*)\"")
_TAG = re.compile(r"<[^>]+>")
# the statement lines a change or a ratio is asked about (us-gaap concepts, without the prefix)
CONCEPTS = {
    "Revenues": "revenue",
    "RevenueFromContractWithCustomerExcludingAssessedTax": "revenue",
    "NetIncomeLoss": "net_income",
    "OperatingIncomeLoss": "operating_income",
    "GrossProfit": "gross_profit",
    "CostOfRevenue": "cost_of_revenue",
    "CostOfGoodsAndServicesSold": "cost_of_sales",
    "ResearchAndDevelopmentExpense": "research_and_development",
    "SellingGeneralAndAdministrativeExpense": "selling_general_administrative",
    "OperatingExpenses": "operating_expenses",
    "IncomeTaxExpenseBenefit": "income_taxes",
}
PARTS = (("net_income", "revenue"), ("operating_income", "revenue"), ("gross_profit", "revenue"))


def is_ixbrl(raw: str) -> bool:
    return "<ix:nonfraction" in raw[:5_000_000].lower()


def _text(fragment: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", fragment)).split())


def _periods(raw: str) -> dict[str, str]:
    """context id -> "start..end" (or the instant) for every context without dimensions."""
    periods = {}
    for cid, body in _CONTEXT.findall(raw):
        if "segment" in body.lower() or "scenario" in body.lower():
            continue
        start = re.search(r"<xbrli:startDate>\s*([\d-]+)", body)
        end = re.search(r"<xbrli:endDate>\s*([\d-]+)", body)
        instant = re.search(r"<xbrli:instant>\s*([\d-]+)", body)
        if start and end:
            periods[cid] = f"{start.group(1)}..{end.group(1)}"
        elif instant:
            periods[cid] = instant.group(1)
    return periods


def _row_label(raw: str, at: int) -> str:
    """The first cell's text of the table row holding position `at` (the statement line's label)."""
    row = raw.rfind("<tr", 0, at)
    if row < 0:
        return ""
    cell = re.search(r"<td\b[^>]*>(.*?)</td>", raw[row:at], re.S | re.I)
    return _text(cell.group(1)) if cell else ""


def ixbrl_facts(raw: str) -> list[Fact]:
    """The numeric facts of an inline-XBRL document for the statement lines of CONCEPTS, without
    dimensions, in order: the displayed text and value, its scale, concept, period, unit and row label
    (first occurrence of each concept and period). A document without them gives []."""
    periods = _periods(raw)
    facts: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    for match in _NON_FRACTION.finditer(raw):
        attrs = dict(_ATTR.findall(match.group(1)))
        concept = attrs.get("name", "")
        prefix, _, local = concept.partition(":")
        period = periods.get(attrs.get("contextRef", ""))
        if prefix != "us-gaap" or local not in CONCEPTS or period is None or ".." not in period:
            continue
        shown = _text(match.group(2))
        if (concept, period) in seen or not re.fullmatch(r"[\d,]+(?:\.\d+)?", shown):
            continue
        seen.add((concept, period))
        value = Fraction(shown.replace(",", ""))
        if attrs.get("sign") == "-":
            value = -value
        facts.append(
            Fact(
                name=CONCEPTS[local],
                text=shown,
                value=value,
                kind="plain",
                context=_row_label(raw, match.start()),
                concept=concept,
                period=period,
                unit=attrs.get("unitRef"),
                scale=int(attrs.get("scale", "0") or 0),
            )
        )
    return facts


def _year_days(period: str) -> int:
    start, end = (date.fromisoformat(p) for p in period.split(".."))
    return (end - start).days


def fiscal_year(period: str) -> str:
    return f"fiscal year ended {date.fromisoformat(period.split('..')[1]):%B %-d, %Y}"


def ixbrl_fact_sets(facts: list[Fact]) -> list[FactSet]:
    """Computations over a filing's facts, changes and margins in turn: each concept's change over its two
    latest fiscal years (annual periods only), the margins (net, operating, gross income over revenue) of
    the latest year."""
    annual = [f for f in facts if f.period and 350 <= _year_days(f.period) <= 380 and f.value > 0]
    by_name: dict[str, list[Fact]] = {}
    for fact in annual:
        by_name.setdefault(fact.name, []).append(fact)
    sets: list[FactSet] = []
    ratios: list[FactSet] = []
    for name, found in by_name.items():
        years = sorted({f.period: f for f in found}.values(), key=lambda f: f.period or "", reverse=True)
        if len(years) < 2 or years[0].scale != years[1].scale:
            continue
        current = Fact(**{**years[0].__dict__, "name": f"{name}_current"})
        prior = Fact(**{**years[1].__dict__, "name": f"{name}_prior"})
        sets.append(
            _valued(
                FactSet(
                    "change",
                    [current, prior],
                    [],
                    f"({current.name} - {prior.name}) / {prior.name} * 100",
                    f"the percentage change of {current.context or name} from the {fiscal_year(prior.period or '')} "
                    f"to the {fiscal_year(current.period or '')}",
                    "percent",
                    "one_step",
                )
            )
        )
    for part, whole in PARTS:
        if part in by_name and whole in by_name:
            latest = max(by_name[whole], key=lambda f: f.period or "")
            top = next((f for f in by_name[part] if f.period == latest.period and f.scale == latest.scale), None)
            if top is None:
                continue
            ratios.append(
                _valued(
                    FactSet(
                        "ratio",
                        [top, latest],
                        [],
                        f"{part} / {whole} * 100",
                        f"{top.context or part} as a percentage of {latest.context or whole} for the "
                        f"{fiscal_year(latest.period or '')}",
                        "percent",
                        "one_step",
                    )
                )
            )
    turns = [s for pair in zip(sets, ratios, strict=False) for s in pair]
    return turns + sets[len(turns) // 2 :] + ratios[len(turns) // 2 :]


def _row_of(text: str, label: str, figure: str) -> tuple[int, int] | None:
    """Start and end of the first line holding `label` and, after it, `figure` as a whole figure (no digit,
    comma or point before it, no digit or comma after it); a scan line by line, linear in the text (one
    pattern spanning the line backtracked quadratically on a long one)."""
    shown = re.compile(rf"(?<![\d,.]){re.escape(figure)}(?![\d,])")
    offset = 0
    for line in text.split("\n"):
        at = line.find(label)
        if at >= 0 and shown.search(line, at + len(label)):
            return offset, offset + len(line)
        offset += len(line) + 1
    return None


def locate_facts(fact_set: FactSet, doc: Document, text: str, chunks: list[Chunk], most: int) -> Snippet | None:
    """The passage of the document text showing every fact of an XBRL fact set: from the table's first
    line (its column headings name the years) through the rows holding the facts, at most `most`
    characters; None when a fact's row (its label and displayed value on one line) is not in the text."""
    rows = []
    for fact in fact_set.facts:
        found = _row_of(text, fact.context.split(" ")[0] if fact.context else "", fact.text)
        if not found:
            return None
        line_start, line_end = found
        rows.append((line_start, line_end, fact, line_start + text[line_start:line_end].find(fact.text)))
    start, end = min(r[0] for r in rows), max(r[1] for r in rows)
    top = start
    while top > 0 and text[text.rfind("\n", 0, top - 1) + 1 : top].lstrip().startswith("|") and start - top < most:
        top = text.rfind("\n", 0, top - 1) + 1  # up to the table's first line
    if end - top > most:
        top = start
    if end - top > most:
        return None
    for _, _, fact, at in rows:
        fact.char_start = at - top  # in the passage, as a span fact's
    home = home_chunk(chunks, start)
    return Snippet(
        text=text[top:end],
        doc_id=doc.doc_id,
        source_path=shown_path(doc.source_path),
        section_path=home.section_path if home else "",
        page=home.page if home else None,
        char_start=top,
        char_end=end,
    )


def raw_filing(doc: Document) -> str | None:
    """The document's source file as text when it is still there and is inline-XBRL HTML, else None."""
    path = Path(doc.source_path)
    if path.suffix.lower() not in (".htm", ".html", ".xhtml", ".xml") or not path.is_file():
        return None
    raw = path.read_text(encoding="utf-8", errors="replace")
    return raw if is_ixbrl(raw) else None


def scaled_meaning(fact: Fact) -> str:
    """How an XBRL fact's displayed value reads ("in millions of usd")."""
    words = {3: "thousands", 6: "millions", 9: "billions"}
    return f"in {words[fact.scale]} of {fact.unit or 'units'}" if fact.scale in words else f"in {fact.unit or 'units'}"
