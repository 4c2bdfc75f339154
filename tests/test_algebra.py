"""The sandbox's `sympy` (finmbs.verify.algebra): linear systems answered as real sympy answers them, and
everything else a failure, never a value. Real sympy (installed with math-verify) is the reference."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy

from finmbs.verify import algebra
from finmbs.verify.program import printed_answer, run_program


def both(build):
    """build(module) -> a solve() result, for real sympy and for the subset."""
    return build(sympy), build(algebra)


def plain(value):
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return Fraction(str(value)) if not isinstance(value, Fraction) else value


SYSTEMS = {
    "one equation": lambda m: m.solve(m.Eq(2 * m.symbols("L") - 6, m.symbols("L") + 6), m.symbols("L")),
    "an expression equal to zero": lambda m: m.solve(m.symbols("x") * 3 - 12),
    "two equations, a tuple of unknowns": lambda m: (
        lambda t, d: m.solve((m.Eq(t, 3 * d), m.Eq(t + 12, 2 * (d + 12))), (t, d))
    )(*m.symbols("T D")),
    "two expressions, a list of unknowns": lambda m: (lambda a, c: m.solve([a + c - 14, 9 * a + 5 * c - 98], [a, c]))(
        *m.symbols("A, C")
    ),
    "no unknowns named": lambda m: (lambda x, y: m.solve([x + y - 3, x - y - 1]))(*m.symbols("x y")),
    "a list of one equation": lambda m: m.solve([m.symbols("x") - 1], m.symbols("x")),
    "one equation, a list of one unknown": lambda m: m.solve(m.symbols("x") - 1, [m.symbols("x")]),
    "a fraction": lambda m: m.solve(m.Eq(3 * m.symbols("x"), 1), m.symbols("x")),
    "division by a number": lambda m: m.solve(m.Eq(m.symbols("x") / 4 + 2, 5), m.symbols("x")),
    "dict=True": lambda m: m.solve(m.symbols("x") - 7, m.symbols("x"), dict=True),
    "three unknowns": lambda m: (lambda a, b, c: m.solve([a + b + c - 6, a - b, b - 2 * c + 2], [a, b, c]))(
        *m.symbols("a b c")
    ),
}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_linear_systems_are_answered_as_sympy_answers_them(name: str) -> None:
    reference, subset = both(SYSTEMS[name])
    assert plain(subset) == plain(reference), (subset, reference)
    assert type(subset) is type(reference) or (isinstance(subset, list) and isinstance(reference, list))


def test_decimal_coefficients_are_exact() -> None:
    q, d = algebra.symbols("q d")
    solution = algebra.solve([algebra.Eq(q + d, 30), algebra.Eq(0.25 * q + 0.10 * d, 5.70)], [q, d])
    assert solution == {q: 18, d: 12} and isinstance(solution[q], int)  # sympy: 18.0000000000000 (a Float)


@pytest.mark.parametrize(
    "build, why",
    [
        (lambda x, y: algebra.solve(x * (x + 5) - 126, x), "product of unknowns"),
        (lambda x, y: algebra.solve(x**2 - 4, x), "power of an unknown"),
        (lambda x, y: algebra.solve(1 / x - 4, x), "division by an unknown"),
        (lambda x, y: algebra.solve(x + y - 3, x), "do not fix y"),  # sympy: [3 - y]
        (lambda x, y: algebra.solve([x - 1, x - 2], [x]), "no solution"),  # sympy: []
        (lambda x, y: algebra.solve(x - 1, y), "not in the equations"),
        (lambda x, y: algebra.solve("x - 1", x), "not str"),
        (lambda x, y: algebra.solve(x - 1, 2 * x), "solves for symbols"),
    ],
)
def test_what_is_not_one_linear_solution_raises(build, why: str) -> None:
    with pytest.raises(algebra.AlgebraError, match=why):
        build(*algebra.symbols("x y"))


def test_a_program_solves_its_equations_in_the_sandbox() -> None:
    # the 1.5B's program for "Tom is three times as old as his daughter ..." (qs-age), as written
    source = (
        "from sympy import symbols, Eq, solve\n"
        "T, D = symbols('T D')\n"
        "eq1 = Eq(T, 3*D)\n"
        "eq2 = Eq(T + 12, 2*(D + 12))\n"
        "solution = solve((eq1, eq2), (T, D))\n"
        "print(solution[T])"
    )
    assert run_program(source).error == "the program did not bind answer"
    result = run_program(printed_answer(source))
    assert result.ok and result.answer == "36"
    underdetermined = "from sympy import symbols, solve\nx, y = symbols('x y')\nanswer = solve(x + y - 3, x)[0]"
    assert "more than one solution" in run_program(underdetermined).error


def test_a_final_print_is_taken_as_the_answer_only_when_it_says_which_value() -> None:
    assert printed_answer("x = 3\ny = x * 2\nprint(y)") == "x = 3\ny = x * 2\nanswer = y"
    assert printed_answer("x = 3\nprint(x + 1)\n# done\n") == "x = 3\nanswer = x + 1"
    for left_alone in (
        "x = 3\nprint('Total:', x)",  # a label and a value
        "x = 3\nprint(f'{x} dollars')",  # text
        "x = 3\nprint('3')",
        "answer = 3\nprint(answer)",  # binds answer already
        "x = 3\nprint(x)\ny = 2",  # the print is not the last statement
        "x = 1; print(x)",  # shares its line
        "def f():\n    print(3)\nf()",
        "x = (",  # does not parse
    ):
        assert printed_answer(left_alone) is None, left_alone
