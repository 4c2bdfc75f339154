"""The engine's program operators (`stages.program_operators`, finmbs's, not in the paper).

A small teacher asked to write a harder problem writes back its seed or the prompt's example. Here the
engine writes the new problem itself, from a verified problem (its question, its program, its answer):
it builds the new problem's program, and the sandbox runs that program to the new answer. The model
words at most one clause (`finmbs.mbs.engine_leaves`), which the number-slot and round-trip checks test.
Every function here is pure: it returns a `Built` (question text, program, what the text must state) or a
`Refusal` naming why the operator cannot apply; nothing is run here.

The problem's *givens* are the numbers its question states that its program holds as literals: a number
of the question written once (`$1,200`, `1.5`, `20%` for a program's 0.2 or 20), matched to exactly one
numeric literal of the program. Operators (after MetaMath's FOBAR, GSM-Symbolic and GSM-Plus):

- `resampled`: every given drawn again near its value, in its own kind (a whole number stays whole, a
  decimal keeps its decimals), the question's text changed number by number. It is never new in
  structure; it multiplies what the others make and gives the novelty guard new numbers. Whether the new
  numbers keep every intermediate value admissible is the sandbox's to say (`admissibility_program`); a
  question with a number its program does not compute with is not resampled at all (`unmodelled`).
- `backward`: one given masked as x, the original answer stated, x asked for with FOBAR's sentence. Its
  program searches the given's admissible values (positive multiples of its written resolution, around
  its value) for those that give the stated answer, and fails unless the forward program is strictly
  monotone over them and exactly one hits: the label is that one value.
- `added_step` (GSM-Symbolic's P1; two of them P2): one operation of `STEPS` applied to the answer, its
  new given chosen by the engine so that the answer stays clean (whole, or cents for money).
- `chained`: one problem's answer becomes a given of another (a composition on programs).
"""

from __future__ import annotations

import ast
import random
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from textwrap import indent

from finmbs.verify.program import parse_program
from finmbs.verify.skeleton import Flow, assigned

ANSWER = "answer"
STRAIGHT = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.Expr)
UNKNOWN = "x"
BODY = "    "  # a function body's indent in the programs the engine builds
SEARCH_POINTS = 4000  # the most values a backward program tries
FOBAR = "If we know the answer to the above question is {answer}, what is the value of unknown variable x?"

# a number as a question writes it: an optional $, digits (1,200 or 1200), decimals, then % or "percent"
_NUMBER = re.compile(
    r"(?P<money>\$\s?)?(?<![\w.,/])(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<decimals>\.\d+)?(?![\w/]|,\d|\.\d)"
    r"(?P<percent>\s?%|\s+percent\b)?"
)
_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "hundred": 100, "half": Fraction(1, 2), "twice": 2, "double": 2, "triple": 3, "third": Fraction(1, 3),
    "quarter": Fraction(1, 4), "dozen": 12,
}  # fmt: skip
_WORD = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z$\d])")


@dataclass(frozen=True)
class Number:
    """A figure as a question writes it: its span in the text (the whole `$1,200` or `20%`), its value
    as written (20 for `20%`), its decimals as written, and whether it is money or a percent."""

    start: int
    end: int
    value: Fraction
    decimals: int = 0
    money: bool = False
    percent: bool = False
    commas: bool = False


def numbers(text: str) -> list[Number]:
    """The figures written in digits in `text`, in order."""
    found = []
    for m in _NUMBER.finditer(text):
        digits, decimals = m["digits"], m["decimals"] or ""
        found.append(
            Number(
                start=m.start(),
                end=m.end(),
                value=Fraction(Decimal(digits.replace(",", "") + decimals)),
                decimals=max(len(decimals) - 1, 0),
                money=bool(m["money"]),
                percent=bool(m["percent"]),
                commas="," in digits,
            )
        )
    return found


def stated_values(text: str) -> Counter[Fraction]:
    """Every value `text` states, in digits or in the ordinary words for small numbers and fractions
    (`four`, `twice`, `a third`), as a multiset; a percent counts as its number (15 for `15%`)."""
    values = Counter(n.value for n in numbers(text))
    values.update(Fraction(_WORDS[m.group(1).lower()]) for m in _WORD.finditer(text))
    return values


def written(number: Number, value: Fraction) -> str:
    """`value` written the way `number` is: its $, decimals, thousands commas and % kept."""
    if number.decimals:
        body = f"{float(value):,.{number.decimals}f}" if number.commas else f"{float(value):.{number.decimals}f}"
    elif value.denominator == 1:
        body = f"{value.numerator:,}" if number.commas or value >= 10_000 else str(value.numerator)
    else:
        body = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
    return ("$" if number.money else "") + body + ("%" if number.percent else "")


def literal(value: Fraction) -> str:
    """`value` as a Python literal: an int when whole, else its finite decimal (or a Fraction call)."""
    if value.denominator == 1:
        return str(value.numerator)
    decimal = Decimal(value.numerator) / Decimal(value.denominator)
    if Fraction(decimal) == value:
        return format(decimal, "f")
    return f"Fraction({value.numerator}, {value.denominator})"


def answer_value(answer: str) -> Fraction | None:
    """A stated answer as an exact number (`784`, `$1,250.50`, `12.5%` as 12.5), else None."""
    text = answer.strip()
    found = numbers(text)
    if len(found) != 1 or found[0].start != 0 or found[0].end != len(text):
        return None
    return found[0].value


# ---------------------------------------------------------------- givens


@dataclass(frozen=True)
class Given:
    """A value the question states that the program holds as literals: its places in the text (`number`,
    the first; `also`, the others), the literals' places in the program (`at`, (line, column) each), and
    `scale` (each literal is the value times it: 1/100 for a percent the program writes as 0.2)."""

    number: Number
    at: tuple[tuple[int, int], ...]
    scale: Fraction = Fraction(1)
    also: tuple[Number, ...] = ()

    @property
    def places(self) -> tuple[Number, ...]:
        return (self.number, *self.also)


def _numeric(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def parsed(source: str) -> ast.Module:
    """`source`'s syntax tree through the sandbox's guarded parse (its size and nesting capped before
    `ast.parse`); ValueError when there is none."""
    tree = parse_program(source)
    if tree is None:
        raise ValueError("the program does not parse within the sandbox's limits")
    return tree


def program_literals(source: str) -> list[ast.Constant]:
    """The numeric literals of `source` that can be givens: not a round()'s digits, not inside quote()."""
    tree = parsed(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "round" and len(node.args) > 1:
                skip.add(id(node.args[1]))
            if node.func.id == "quote":
                skip.update(id(n) for n in ast.walk(node))
    return [n for n in ast.walk(tree) if _numeric(n) and id(n) not in skip]  # type: ignore[misc]


def givens(question: str, source: str) -> list[Given]:
    """The question's givens (module docstring), in the order the question first states them: a value the
    question writes k times (in one form: all percents, or none) and the program holds as exactly k
    literals, at one scale (itself, or a percent over 100). Any other value is no given: a number the
    program may use for something else cannot be changed in step with the text."""
    try:
        literals = program_literals(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    by_value: dict[Fraction, list[Number]] = {}
    for number in numbers(question):
        by_value.setdefault(number.value, []).append(number)
    out = []
    for value, places in by_value.items():
        if len({n.percent for n in places}) != 1:
            continue
        scales = [Fraction(1), *([Fraction(1, 100)] if places[0].percent else [])]
        matched = [(scale, [lit for lit in literals if Fraction(str(lit.value)) == value * scale]) for scale in scales]
        matched = [(scale, lits) for scale, lits in matched if lits]
        if len(matched) != 1 or len(matched[0][1]) != len(places):
            continue
        scale, lits = matched[0]
        out.append(
            Given(
                number=places[0],
                at=tuple((lit.lineno, lit.col_offset) for lit in lits),
                scale=scale,
                also=tuple(places[1:]),
            )
        )
    return sorted(out, key=lambda g: g.number.start)


class _Replace(ast.NodeTransformer):
    def __init__(self, at: dict[tuple[int, int], str]):
        self.at = at

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        where = (getattr(node, "lineno", -1), getattr(node, "col_offset", -1))
        if where in self.at and _numeric(node):
            return ast.parse(self.at[where], mode="eval").body
        return node


def substituted(source: str, at: dict[tuple[int, int], str]) -> str:
    """`source` with the literal at each position replaced by an expression's text."""
    return ast.unparse(ast.fix_missing_locations(_Replace(at).visit(parsed(source))))


def retexted(question: str, changes: list[tuple[Number, str]]) -> str:
    """`question` with each number's span replaced by its new text."""
    for number, text in sorted(changes, key=lambda c: -c[0].start):
        question = question[: number.start] + text + question[number.end :]
    return question


def _shows_only(statement: ast.stmt) -> bool:
    """A statement that only shows a value (`print(answer)`, a bare `answer`): an expression that binds no
    name (no `:=`)."""
    return isinstance(statement, ast.Expr) and not any(isinstance(n, ast.NamedExpr) for n in ast.walk(statement))


def answer_last(source: str) -> str | None:
    """`source` up to the top-level statement that binds `answer` last, when only statements that show a
    value follow it (a small model often ends with `print(answer)`); None when the program does not end by
    binding `answer`. The operators extend this text: what they add must come after the answer is bound,
    and the source's own print of its answer would show the wrong result in the new program."""
    tree = parse_program(source)
    body = list(tree.body) if tree else []
    while body and _shows_only(body[-1]):
        body.pop()
    if not body or ANSWER not in assigned(body[-1]):
        return None
    last = body[-1]
    lines = source.splitlines(keepends=True)
    end_line, end_col = last.end_lineno or len(lines), last.end_col_offset or 0
    kept = "".join(lines[: end_line - 1]) + lines[end_line - 1].encode()[:end_col].decode(errors="ignore")
    return kept.rstrip() + "\n"


# ---------------------------------------------------------------- what an operator builds


@dataclass(frozen=True)
class Source:
    """A verified problem an operator starts from: its question, its program, its answer."""

    question: str
    program: str
    answer: str


@dataclass(frozen=True)
class Refusal:
    """Why an operator cannot apply to a problem (one counted reason, never an exception)."""

    operator: str
    reason: str


@dataclass
class Built:
    """A new problem as the engine builds it: its question text (`question`: whole, or `body` plus a
    clause still to be worded when `clause` says what it must state), its program, and the values its text
    must state (`states`, a multiset) and must not (`withholds`: the answer and intermediate values).
    `answer` is filled once the sandbox ran the program."""

    operator: str
    question: str
    program: str
    states: Counter[Fraction]
    withholds: set[Fraction] = field(default_factory=set)
    clause: Clause | None = None
    answer: str | None = None
    expect: Fraction | None = None  # the answer the program must give, when the engine knows it already
    details: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Clause:
    """A clause for the model to word: the question's last sentence (`ask`) replaced by one that states
    `new_givens` and asks for `what`; `template` is the engine's own wording, used when the model's fails."""

    body: str
    ask: str
    what: str
    new_givens: tuple[Fraction, ...]
    template: str


def rng_for(key: str) -> random.Random:
    """A generator seeded from `key`: a rerun draws the same numbers."""
    return random.Random(zlib.crc32(key.encode("utf-8")))


def clean(value: Fraction, money: bool) -> bool:
    """Whole, or (money) whole cents; positive."""
    return value > 0 and (value.denominator == 1 or (money and 100 % value.denominator == 0))


def is_money(question: str) -> bool:
    return "$" in question or bool(re.search(r"\b(dollars?|cents?|euros?|pounds?)\b", question, re.I))


# ---------------------------------------------------------------- resampled


def resampled(source: Source, key: str, attempt: int = 0) -> Built | Refusal:
    """Every given drawn again (module docstring): the question with its new numbers, the program with its
    new literals. `key` and `attempt` seed the draw."""
    found = givens(source.question, source.program)
    if not found:
        return Refusal("resampled", "no given: no number of the question is a literal of its program")
    if why := unmodelled(source.question, source.program, found):
        return Refusal("resampled", why)
    rng = rng_for(f"{key}:{attempt}")
    at, changes = {}, []
    drawn = []
    for given in found:
        value = draw_near(given.number, rng, calendar_cap(source.question, given.number))
        drawn.append(value)
        at.update({where: literal(value * given.scale) for where in given.at})
        changes.extend((place, written(place, value)) for place in given.places)
    question = retexted(source.question, changes)
    try:
        program = substituted(source.program, at)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Refusal("resampled", f"the program does not parse: {exc}")
    return Built(
        operator="resampled",
        question=question,
        program=program,
        states=stated_values(question),
        details={"givens": {written(g.number, g.number.value): written(g.number, v) for g, v in zip(found, drawn)}},
    )


def unmodelled(question: str, source: str, found: list[Given]) -> str | None:
    """Why drawing `question`'s givens again could contradict the question, else None: a relation among
    its numbers that the program does not compute with, and so that no run of the program can check.
    Read in GSM8K variants: "15 customers" whose three groups of 3 make 9 (the count was bound and never
    used), "plays for 40 minutes; in the first 30 minutes ...; in the second 30 minutes ..." (the total
    was never in the program), "baked 5 apple pies ... set the five pies out" (drawn to 8 pies, the five
    left). Four cases, each refused:
    - a number the question writes in digits that no literal of the program holds (itself, or over 100
      for a percent): a total, a date, a value the teacher folded into another by hand;
    - a number the question writes in words whose value a given holds: the same quantity stated twice, the
      digits drawn again and the words left;
    - a given whose literals all sit in statements the answer does not depend on (`Flow`'s backward
      slice from the last statement binding `answer`);
    - a program whose top level is not straight-line (a loop, a branch, a function), whose data flow is
      not read statement by statement here."""
    try:
        body = parsed(source).body
        held = {Fraction(str(lit.value)) for lit in program_literals(source)}
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"the program does not parse: {exc}"
    for number in numbers(question):
        if number.value not in held and not (number.percent and number.value / 100 in held):
            return f"the question states {question[number.start : number.end]!r}, which its program never holds"
    given_values = {g.number.value for g in found}
    for word in _WORD.finditer(question):
        if Fraction(_WORDS[word.group(1).lower()]) in given_values:
            return f"the question states {word.group(0)!r} in words, the value of one of its givens"
    if not all(isinstance(s, STRAIGHT) for s in body):
        return "the program is not straight-line: which givens its answer uses is not read"
    last = [i for i, s in enumerate(body) if ANSWER in assigned(s)]
    if not last:
        return "the program binds no answer at its top level"
    live = Flow(body).closure(last[-1])
    used = {(n.lineno, n.col_offset) for i in live for n in ast.walk(body[i]) if _numeric(n)}
    for given in found:
        if not used & set(given.at):
            return f"the question's {written(given.number, given.number.value)} is a given its answer never uses"
    return None


# What a calendar holds: a count of these units per that one is never more (read in GSM8K variants: "she
# works 90 weeks a year" drawn from 50). (unit, per, most)
CALENDAR = (
    ("weeks?", "year", 52),
    ("months?", "year", 12),
    ("days?", "year", 366),
    ("days?", "month", 31),
    ("days?", "week", 7),
    ("hours?", "day", 24),
    ("hours?", "week", 168),
    ("minutes?", "hour", 60),
    ("seconds?", "minute", 60),
)


def calendar_cap(question: str, number: Number) -> Fraction | None:
    """The most `number` can be when the words after it count calendar units per a larger one ("35 hours a
    week": 168), else None."""
    after = question[number.end : number.end + 40].lower()
    for unit, per, most in CALENDAR:
        if re.match(rf"\s*(?:more\s+)?{unit}\s+(?:a|an|per|each|every)\s+{per}\b", after):
            return Fraction(most)
    return None


def draw_near(number: Number, rng: random.Random, cap: Fraction | None = None) -> Fraction:
    """A new value for a given, in its kind: within about half to twice its value (at most `cap`), on the
    grid of its written resolution (a whole number stays whole, $1.50 stays in cents, a percent under
    100), never the value itself where another exists."""
    step = Fraction(1, 10**number.decimals)
    units = int(number.value / step)
    if units <= 1:
        return number.value
    # a round number stays round: 1,200 draws among multiples of 100, 45 among whole numbers
    grain = 1
    while units % (grain * 10) == 0 and units // (grain * 10) >= 2:
        grain *= 10
    # never 1 for a count of 2 or more: "1 friends" is no longer the question's grammar
    low, high = max(1 if units < 2 else 2, units // 2 // grain), max(2, units * 2 // grain)
    if number.percent:
        high = min(high, 99 // grain)
    if cap is not None:
        high = min(high, int(cap / step) // grain)
    choices = [k * grain for k in range(low, high + 1) if k * grain != units]
    return Fraction(rng.choice(choices)) * step if choices else number.value


def admissibility_program(source: str, original: str) -> str:
    """A program that runs `original` and `source` (the same program with new literals) and fails unless
    every value a top-level statement of `source` binds is admissible the way it was in `original`: whole
    where it was whole, positive where it was positive, each value after each statement (a variable bound
    again, `stickers -= 13`, is checked at every step: 11 stickers less 13 is no count). Run in the
    sandbox; its answer is `source`'s. Only the top level is checked: loops and functions bind inside."""
    new, labels = _instrumented(source)
    old, _ = _instrumented(original)
    return (
        "from fractions import Fraction\n"
        f"def run_original():\n{indent(old, BODY)}\n    return seen\n"
        f"def run_new():\n{indent(new, BODY)}\n    return seen\n"
        "before = run_original()\n"
        "after = run_new()\n"
        f"labels = {labels!r}\n"
        "for i in range(len(before)):\n"
        "    a, b = before[i], after[i]\n"
        "    if not isinstance(b, (int, float, Fraction)) or isinstance(b, bool):\n"
        "        continue\n"
        "    if isinstance(a, (int, float, Fraction)) and not isinstance(a, bool):\n"
        "        if a > 0 and not b > 0:\n"
        "            raise ValueError('not admissible: ' + labels[i] + ' was positive, is now ' + str(b))\n"
        "        if abs(a - round(a)) <= 1e-9 * max(1, abs(a)) and abs(b - round(b)) > 1e-9 * max(1, abs(b)):\n"
        "            raise ValueError('not admissible: ' + labels[i] + ' was whole, is now ' + str(b))\n"
        "answer = after[-1]\n"
    )


def _instrumented(source: str) -> tuple[str, list[str]]:
    """`source` with each value a top-level statement binds appended to `seen` right after it (and the
    answer last), and a label for each ("stickers after statement 2")."""
    lines, labels = ["seen = []"], []
    for k, statement in enumerate(parsed(source).body, 1):
        lines.append(ast.unparse(statement))
        for name in assigned(statement):
            lines.append(f"seen.append({name})")
            labels.append(f"{name} after statement {k}")
    lines.append(f"seen.append({ANSWER})")
    return "\n".join(lines), [*labels, ANSWER]


# ---------------------------------------------------------------- backward


def backward(source: Source, given: Given) -> Built | Refusal:
    """FOBAR's backward question on `given` (module docstring). `source.answer` must be a number."""
    target = answer_value(source.answer)
    if target is None:
        return Refusal("backward", f"the answer {source.answer!r} is not one number")
    number = given.number
    step = Fraction(1, 10**number.decimals)
    units = int(number.value / step)
    if number.value <= 0 or units * step != number.value:
        return Refusal("backward", f"the given {written(number, number.value)} is not a positive value")
    high = max(3 * units, units + 30)
    if number.percent:
        high = min(high, 100 // 1 * (10**number.decimals))
    grain = 1
    while high // grain > SEARCH_POINTS and units % (grain * 10) == 0:
        grain *= 10
    if high // grain > SEARCH_POINTS:
        return Refusal("backward", f"the given {written(number, number.value)} has too many admissible values")
    forward = reading(source.program, given, UNKNOWN, "backward")
    if isinstance(forward, Refusal):
        return forward
    question = masked(source.question, given, UNKNOWN).rstrip() + " " + FOBAR.format(answer=source.answer.strip())
    return Built(
        operator="backward",
        question=question,
        program=search_program(forward, target, step * grain, high // grain),
        states=stated_values(question),
        withholds={number.value},
        expect=number.value,
        details={
            "given": written(number, number.value),
            "admissible": f"multiples of {step * grain} up to {high * step}",
        },
    )


def reading(program: str, given: Given, name: str, operator: str) -> str | Refusal:
    """`program` with the given's literals read from the variable `name` (over 100 for a percent)."""
    expr = f"({name} / 100)" if given.scale != 1 else name
    try:
        return substituted(program, dict.fromkeys(given.at, expr))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Refusal(operator, f"the program does not parse: {exc}")


def masked(question: str, given: Given, name: str) -> str:
    """`question` with the given written as `name` wherever it stands (`$x`, `x%` keep their signs)."""
    number = given.number
    mask = ("$" if number.money else "") + name + ("%" if number.percent else "")
    return retexted(question, [(place, mask) for place in given.places])


def search_program(forward: str, target: Fraction, step: Fraction, points: int) -> str:
    """A program whose answer is the one admissible x (step, 2*step, ..., points*step) at which `forward`
    (a program reading x) gives `target`; it fails when `forward` is not strictly monotone over them, or
    not exactly one gives the target."""
    return (
        "from fractions import Fraction\n"
        f"def forward({UNKNOWN}):\n{indent(forward, BODY)}\n    return {ANSWER}\n"
        f"target = {literal(target)}\n"
        f"step = {literal(step) if step.denominator == 1 else f'Fraction({step.numerator}, {step.denominator})'}\n"
        "hits = []\n"
        "values = []\n"
        f"for k in range(1, {points} + 1):\n"
        f"    {UNKNOWN} = k * step\n"
        "    try:\n"
        f"        y = forward({UNKNOWN})\n"
        "    except (ArithmeticError, ValueError, TypeError):\n"
        "        continue\n"
        "    values.append(y)\n"
        "    if abs(y - target) <= 1e-9 * max(1, abs(target)):\n"
        f"        hits.append({UNKNOWN})\n"
        "rises = [b > a for a, b in zip(values, values[1:])]\n"
        "falls = [b < a for a, b in zip(values, values[1:])]\n"
        "if not (all(rises) or all(falls)):\n"
        "    raise ValueError('the answer is not strictly monotone in x: x is not determined')\n"
        "if len(hits) != 1:\n"
        "    raise ValueError(str(len(hits)) + ' admissible values give the answer')\n"
        f"{ANSWER} = hits[0]\n"
    )


# ---------------------------------------------------------------- added step


@dataclass(frozen=True)
class Step:
    """One operation of the added-step catalogue: its new givens (given the answer's value) and what it
    computes; `what` and `template` word it (`{a}`, `{b}`: the new givens; `N`: the answer it applies to)."""

    name: str
    choices: Callable[[Fraction, bool], list[tuple[Fraction, ...]]]
    compute: Callable[[Fraction, tuple[Fraction, ...]], Fraction]
    code: str  # the program line, over `previous` and the new givens a, b
    what: str
    template: str
    states: Callable[[tuple[Fraction, ...]], tuple[Fraction, ...]] = lambda p: p


PERCENTS = (5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 80)


def _amounts(a: Fraction) -> list[Fraction]:
    """Round amounts below `a`, between a tenth and a half of it, and never 1 (a step of one adds nothing
    to think about: "What is N plus 1?")."""
    out = []
    for unit in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 5000, 10000):
        for k in range(1, 10):
            b = Fraction(unit * k)
            if max(a / 10, Fraction(2)) <= b <= a / 2 and b not in out:
                out.append(b)
    return out


STEPS = (
    Step(
        "percent_of",
        lambda a, money: [(Fraction(p),) for p in PERCENTS if clean(a * p / 100, money)],
        lambda a, p: a * p[0] / 100,
        "answer = previous * {a} / 100",
        "{a}% of that quantity",
        "What is {a}% of N?",
    ),
    Step(
        "percent_increase",
        lambda a, money: [(Fraction(p),) for p in PERCENTS if clean(a * (100 + p) / 100, money)],
        lambda a, p: a * (100 + p[0]) / 100,
        "answer = previous * (100 + {a}) / 100",
        "that quantity after it grows by {a}%",
        "What is N after an increase of {a}%?",
    ),
    Step(
        "percent_decrease",
        lambda a, money: [(Fraction(p),) for p in PERCENTS if p < 100 and clean(a * (100 - p) / 100, money)],
        lambda a, p: a * (100 - p[0]) / 100,
        "answer = previous * (100 - {a}) / 100",
        "that quantity after it falls by {a}%",
        "What is N after a decrease of {a}%?",
    ),
    Step(
        "split",
        lambda a, money: [(Fraction(n),) for n in range(2, 13) if clean(a / n, money)],
        lambda a, p: a / p[0],
        "answer = previous / {a}",
        "each share when that quantity is split equally into {a} parts",
        "If N is split equally into {a} parts, how much is each part?",
    ),
    Step(
        "added",
        lambda a, money: [(b,) for b in _amounts(a)],
        lambda a, p: a + p[0],
        "answer = previous + {a}",
        "that quantity plus {a} more",
        "What is N plus {a}?",
    ),
    Step(
        "taken_away",
        lambda a, money: [(b,) for b in _amounts(a)],
        lambda a, p: a - p[0],
        "answer = previous - {a}",
        "what is left of that quantity after {a} is taken away",
        "What is left of N after {a} is taken away?",
    ),
    Step(
        "repeated",
        lambda a, money: [(Fraction(t),) for t in range(2, 13)],
        lambda a, p: a * p[0],
        "answer = previous * {a}",
        "{a} times that quantity",
        "What is {a} times N?",
    ),
)
STEP_NAMES = tuple(s.name for s in STEPS)
MILD = frozenset({"added", "taken_away", "split", "repeated"})  # no percent: the milder change for a weak target


def split_ask(question: str) -> tuple[str, str] | None:
    """(the question's text before its last sentence, that last sentence) when it ends by asking."""
    text = question.strip()
    if not text.endswith("?"):
        return None
    parts = _SENTENCE_END.split(text)
    if len(parts) < 2:
        return None
    return " ".join(parts[:-1]), parts[-1]


def step_params(a: Fraction, step: Step, question: str, key: str) -> tuple[Fraction, ...] | None:
    """The new givens of `step` on an answer `a`, drawn by the engine among those that keep the result clean
    and state no value the question states (nor `a`, nor the result); None when there are none."""
    money = is_money(question)
    known = set(stated_values(question)) | {a}
    choices = [
        c
        for c in step.choices(a, money)
        if clean(step.compute(a, c), money) and not set(c) & known and step.compute(a, c) not in known
    ]
    return rng_for(f"{key}:{step.name}").choice(choices) if choices else None


def extended(program: str, step: Step, params: tuple[Fraction, ...]) -> str:
    """`program` with `step` applied to its answer: two more lines."""
    names = dict(a=literal(params[0]), b=literal(params[1]) if len(params) > 1 else "")
    return program.rstrip() + "\nprevious = answer\n" + step.code.format(**names) + "\n"


def added_step(source: Source, step: Step, key: str) -> Built | Refusal:
    """`step` applied to the answer (module docstring): the program extended by two lines; the question's
    last sentence to be reworded by the model (`Built.clause`), the engine's template as its fallback."""
    a = answer_value(source.answer)
    if a is None or a <= 0:
        return Refusal(step.name, f"the answer {source.answer!r} is not one positive number")
    program = answer_last(source.program)
    if program is None:
        return Refusal(step.name, "the program does not end by binding answer")
    asked = split_ask(source.question)
    if asked is None:
        return Refusal(step.name, "the question does not end with a question sentence to reword")
    params = step_params(a, step, source.question, key)
    if params is None:
        return Refusal(step.name, f"no new given keeps the answer clean (answer {source.answer})")
    body, ask = asked
    names = dict(a=literal(params[0]), b=literal(params[1]) if len(params) > 1 else "")
    new = step.compute(a, params)
    template = f"{source.question.strip()} Call that number N. " + step.template.format(**names)
    return Built(
        operator=f"added_step:{step.name}",
        question=template,
        program=extended(program, step, params),
        states=stated_values(source.question) + Counter(step.states(params)),
        withholds={a, new},
        expect=new,
        clause=Clause(
            body=body, ask=ask, what=step.what.format(**names), new_givens=tuple(step.states(params)), template=template
        ),
        details={"step": step.name, "new_givens": [literal(p) for p in params], "applies_to": source.answer},
    )


_STATEMENTS = {
    "percent_of": "Let M be {a}% of N.",
    "percent_increase": "Let M be N increased by {a}%.",
    "percent_decrease": "Let M be N decreased by {a}%.",
    "split": "Let M be one part when N is split equally into {a} parts.",
    "added": "Let M be N plus {a}.",
    "taken_away": "Let M be N minus {a}.",
    "repeated": "Let M be {a} times N.",
}


def two_steps(source: Source, first: Step, second: Step, key: str) -> Built | Refusal:
    """P2: `first` on the answer, then `second` on its result, worded by the engine's templates."""
    a = answer_value(source.answer)
    if a is None or a <= 0:
        return Refusal(f"{first.name}+{second.name}", f"the answer {source.answer!r} is not one positive number")
    program = answer_last(source.program)
    if program is None:
        return Refusal(f"{first.name}+{second.name}", "the program does not end by binding answer")
    if split_ask(source.question) is None:
        return Refusal(f"{first.name}+{second.name}", "the question does not end with a question sentence")
    one = step_params(a, first, source.question, key)
    mid = first.compute(a, one) if one else None
    two = step_params(mid, second, source.question + f" {literal(one[0])}", key + ":2") if one and mid else None
    if one is None or two is None or mid is None:
        return Refusal(f"{first.name}+{second.name}", f"no new givens keep the answer clean (answer {source.answer})")
    new = second.compute(mid, two)
    if new == a:  # the second step undoes the first (twice, then half): no step at all
        return Refusal(f"{first.name}+{second.name}", f"the two steps give back the answer {source.answer}")
    question = (
        f"{source.question.strip()} Call that number N. "
        + _STATEMENTS[first.name].format(a=literal(one[0]))
        + " "
        + second.template.format(a=literal(two[0]), b="").replace("N", "M")
    )
    return Built(
        operator=f"two_steps:{first.name}+{second.name}",
        question=question,
        program=extended(extended(program, first, one), second, two),
        states=stated_values(question),
        withholds={a, mid, new},
        expect=new,
        details={"steps": [first.name, second.name], "new_givens": [literal(one[0]), literal(two[0])]},
    )


# ---------------------------------------------------------------- chained


def chained(first: Source, second: Source, given: Given) -> Built | Refusal:
    """`first`'s answer becomes `given` of `second`: the new program runs `first`'s program, then
    `second`'s with that given read from it; the text asks `first` and then `second` with the given
    replaced by N, its answer."""
    a = answer_value(first.answer)
    if a is None or a <= 0:
        return Refusal("chained", f"the first answer {first.answer!r} is not one positive number")
    number = given.number
    if number.decimals == 0 and not number.percent and a.denominator != 1:
        return Refusal("chained", f"{first.answer} cannot stand for the whole number {written(number, number.value)}")
    second_program = reading(second.program, given, "first_answer", "chained")
    if isinstance(second_program, Refusal):
        return second_program
    program = (
        f"def first_problem():\n{indent(first.program, BODY)}\n    return {ANSWER}\n"
        f"first_answer = first_problem()\n{second_program}\n"
    )
    question = (
        f"Let N be the answer to this question: {first.question.strip()} "
        f"Now use N: {masked(second.question, given, 'N').strip()}"
    )
    return Built(
        operator="chained",
        question=question,
        program=program,
        states=stated_values(question),
        withholds={a},
        details={"given": written(number, number.value), "first_answer": first.answer},
    )
