"""Linear equations for sandboxed programs: what `from sympy import symbols, Eq, solve` gives a program.

A word problem that gives a quantity only by a relation ("three times as old ... in 12 years twice as
old") is solved by writing its equations; small teachers write them with sympy's names. Real sympy
cannot be handed to a program: its functions turn strings into code (`sympify`, `lambdify`), which
would undo the sandbox's language layer. This module is the part such programs use, written from
scratch: symbols, linear expressions over exact fractions, `Eq`, and `solve` by Gaussian elimination.
It answers as sympy does for a linear system with one solution (a list for one equation, a dict for a
list of equations, a list of dicts with dict=True), and otherwise raises: a product of unknowns, a
power of one, no solution, or more than one. A program is verified by the value it computes, so a
system that does not pin its unknowns down fails rather than give a value sympy would write in terms
of another unknown. Floats are taken at their decimal value (5.70 is 57/10), so results are exact.

The sandbox worker offers it under the name `sympy` (`stages`' prompts say so when
`verify.program_equations` is on); nothing else imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction
from typing import Any

from finmbs.errors import FinmbsError

__all__ = ["Eq", "N", "Rational", "Symbol", "simplify", "solve", "symbols"]

MAX_UNKNOWNS = 50  # a program's system is a word problem's few unknowns


class AlgebraError(FinmbsError, ValueError):
    """What a program asked of the equations that this linear subset cannot answer with one value."""


def _number(value: Any) -> Fraction | None:
    """An exact value for a plain number (a float at its shortest decimal), None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise AlgebraError(f"{value} is not a finite number")
        return Fraction(repr(value))
    if isinstance(value, Decimal):
        return Fraction(value)
    return None


def _plain(value: Fraction) -> int | Fraction:
    return value.numerator if value.denominator == 1 else value


class Linear:
    """c1*x1 + ... + cn*xn + k with exact coefficients; a symbol is the expression 1*x."""

    __slots__ = ("coefficients", "constant")

    def __init__(self, coefficients: dict[str, Fraction], constant: Fraction) -> None:
        self.coefficients = {name: c for name, c in coefficients.items() if c != 0}
        self.constant = constant

    @classmethod
    def of(cls, value: Any) -> Linear:
        if isinstance(value, Linear):
            return value
        number = _number(value)
        if number is None:
            raise AlgebraError(f"an equation holds numbers and symbols, not {type(value).__name__}")
        return cls({}, number)

    def constant_value(self) -> Fraction | None:
        return None if self.coefficients else self.constant

    def __add__(self, other: Any) -> Linear:
        o = Linear.of(other)
        names = self.coefficients.keys() | o.coefficients.keys()
        return Linear(
            {n: self.coefficients.get(n, Fraction(0)) + o.coefficients.get(n, Fraction(0)) for n in names},
            self.constant + o.constant,
        )

    __radd__ = __add__

    def __neg__(self) -> Linear:
        return Linear({n: -c for n, c in self.coefficients.items()}, -self.constant)

    def __pos__(self) -> Linear:
        return self

    def __sub__(self, other: Any) -> Linear:
        return self + (-Linear.of(other))

    def __rsub__(self, other: Any) -> Linear:
        return Linear.of(other) + (-self)

    def _scaled(self, factor: Fraction) -> Linear:
        return Linear({n: c * factor for n, c in self.coefficients.items()}, self.constant * factor)

    def __mul__(self, other: Any) -> Linear:
        o = Linear.of(other)
        if (k := o.constant_value()) is not None:
            return self._scaled(k)
        if (k := self.constant_value()) is not None:
            return o._scaled(k)
        raise AlgebraError("a product of unknowns: only linear equations can be solved")

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> Linear:
        k = Linear.of(other).constant_value()
        if k is None:
            raise AlgebraError("a division by an unknown: only linear equations can be solved")
        if k == 0:
            raise ZeroDivisionError("division by zero")
        return self._scaled(1 / k)

    def __rtruediv__(self, other: Any) -> Linear:
        return Linear.of(other) / self

    def __pow__(self, exponent: Any) -> Linear:
        k, e = self.constant_value(), _number(exponent)
        if e == 1:
            return self
        if k is not None and e is not None and e.denominator == 1:
            return Linear({}, k ** int(e))
        raise AlgebraError("a power of an unknown: only linear equations can be solved")

    def __eq__(self, other: object) -> bool:  # structural, as sympy's == (an equation is Eq(a, b))
        try:
            o = Linear.of(other)
        except AlgebraError:
            return False
        return self.coefficients == o.coefficients and self.constant == o.constant

    def __hash__(self) -> int:
        return hash((frozenset(self.coefficients.items()), self.constant))

    def __float__(self) -> float:
        return float(self._value())

    def __int__(self) -> int:
        return int(self._value())

    def _value(self) -> Fraction:
        if (k := self.constant_value()) is None:
            raise AlgebraError(f"{self} still holds unknowns")
        return k

    def __repr__(self) -> str:
        terms = [f"{c}*{n}" if c != 1 else n for n, c in sorted(self.coefficients.items())]
        if self.constant or not terms:
            terms.append(str(self.constant))
        return " + ".join(terms)


class Equation:
    """lhs = rhs, kept as the expression lhs - rhs that must be zero."""

    __slots__ = ("zero",)

    def __init__(self, zero: Linear) -> None:
        self.zero = zero

    def __repr__(self) -> str:
        return f"Eq({self.zero}, 0)"


def Symbol(name: Any) -> Linear:  # noqa: N802  (sympy's name)
    """One unknown named `name`."""
    if not isinstance(name, str) or not name.isidentifier():
        raise AlgebraError(f"a symbol's name is an identifier, not {name!r}")
    return Linear({name: Fraction(1)}, Fraction(0))


def symbols(names: Any) -> Linear | tuple[Linear, ...]:
    """'x' -> x; 'x y' or 'x, y' -> (x, y), as sympy's."""
    if not isinstance(names, str):
        raise AlgebraError("symbols() takes the names as one string, 'x y'")
    parts = [p for p in names.replace(",", " ").split() if p]
    if not parts:
        raise AlgebraError("symbols() was given no name")
    made = tuple(Symbol(p) for p in parts)
    return made[0] if len(made) == 1 and "," not in names else made


def Eq(lhs: Any, rhs: Any = 0) -> Equation:  # noqa: N802  (sympy's name)
    """The equation lhs = rhs."""
    return Equation(Linear.of(lhs) - Linear.of(rhs))


def Rational(numerator: Any, denominator: Any = 1) -> int | Fraction:  # noqa: N802  (sympy's name)
    n, d = _number(numerator), _number(denominator)
    if n is None or d is None:
        raise AlgebraError("Rational() takes numbers")
    return _plain(n / d)


def N(value: Any, digits: int = 15) -> float:  # noqa: N802  (sympy's name)
    """A value as a float."""
    return float(value)


def simplify(value: Any) -> Any:
    """A value as it is (a linear expression is already in its simplest form here)."""
    return value


def _zeros(items: Any) -> list[Linear]:
    if isinstance(items, Equation):
        return [items.zero]
    if isinstance(items, Linear) or _number(items) is not None:
        return [Linear.of(items)]
    if isinstance(items, (list, tuple, set, frozenset)):
        return [z for item in items for z in _zeros(item)]
    raise AlgebraError(f"solve() takes equations, not {type(items).__name__}")


def _unknowns(given: Iterable[Any]) -> list[Linear]:
    found = []
    for item in given:
        if isinstance(item, (list, tuple, set, frozenset)):
            found.extend(_unknowns(item))
        elif isinstance(item, Linear) and len(item.coefficients) == 1 and item.constant == 0:
            [(_, c)] = item.coefficients.items()
            if c != 1:
                raise AlgebraError(f"solve() solves for symbols, not {item}")
            found.append(item)
        else:
            raise AlgebraError(f"solve() solves for symbols, not {item!r}")
    return found


def _name(symbol: Linear) -> str:
    return next(iter(symbol.coefficients))


def _eliminate(zeros: list[Linear]) -> dict[str, Fraction]:
    """The one solution of `zeros` = 0 in every unknown they hold; raises when there is none or many."""
    names = sorted({n for z in zeros for n in z.coefficients})
    if len(names) > MAX_UNKNOWNS:
        raise AlgebraError(f"more than {MAX_UNKNOWNS} unknowns")
    rows = [[z.coefficients.get(n, Fraction(0)) for n in names] + [-z.constant] for z in zeros]
    pivot_row = 0
    pivots: list[int] = []
    for col in range(len(names)):
        found = next((r for r in range(pivot_row, len(rows)) if rows[r][col] != 0), None)
        if found is None:
            continue
        rows[pivot_row], rows[found] = rows[found], rows[pivot_row]
        lead = rows[pivot_row][col]
        rows[pivot_row] = [v / lead for v in rows[pivot_row]]
        for r in range(len(rows)):
            if r != pivot_row and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[pivot_row])]
        pivots.append(col)
        pivot_row += 1
    if any(all(v == 0 for v in row[:-1]) and row[-1] != 0 for row in rows):
        raise AlgebraError("the equations have no solution")
    if len(pivots) < len(names):
        free = [names[c] for c in range(len(names)) if c not in pivots]
        raise AlgebraError(f"the equations do not fix {', '.join(free)}: more than one solution")
    return {names[col]: rows[i][-1] for i, col in enumerate(pivots)}


def solve(equations: Any, *unknowns: Any, dict: bool = False) -> Any:  # noqa: A002  (sympy's keyword)
    """Solve linear equations (Eq(a, b), or expressions equal to zero) as sympy's solve answers: one
    equation -> [value] of its one unknown; a list of equations -> {symbol: value}; dict=True -> [{...}]."""
    zeros = _zeros(equations)
    wanted = _unknowns(unknowns)
    solution = _eliminate(zeros)
    if not wanted:
        wanted = [Symbol(n) for n in sorted(solution)]
    missing = [s for s in wanted if _name(s) not in solution]
    if missing:
        raise AlgebraError(f"{', '.join(map(_name, missing))} is not in the equations")
    values = {s: _plain(solution[_name(s)]) for s in wanted}
    if dict:
        return [values]
    listed = isinstance(equations, (list, tuple, set, frozenset))
    if listed or len(wanted) > 1:
        return values
    return [values[wanted[0]]]
