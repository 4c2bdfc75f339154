"""The program slicer (finmbs/mbs/slices.py) on program shapes the embedded teacher writes: several
steps, unused variables, one expression, a loop, augmented assignments, imports; a slice that is the
whole computation or gives the parent's answer is never offered."""

from __future__ import annotations

from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.slices import parent_over_children, program_slices, usable_slices
from finmbs.records import Problem
from finmbs.testing.world import world_config
from finmbs.verify.program import run_program

TICKETS = """total_tickets = 14
total_cost = 98
adult_price = 9
child_price = 5
cost_if_all_children = total_tickets * child_price
extra = total_cost - cost_if_all_children
adult_tickets = extra / (adult_price - child_price)
answer = adult_tickets"""

ORCHARD = """rows = 5
trees_per_row = 8
apples_per_tree = 30
bag_size = 20
doubled_rows = rows * 2
trees = rows * trees_per_row
apples = trees * apples_per_tree
print(apples)
answer = apples // bag_size"""


def context(tmp_path, K: int = 3) -> Context:
    config = world_config("http://127.0.0.1:9/v1", ["t"], ["s"], "t", str(tmp_path / "cache.sqlite"), K=K)
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite")))


def values(slices) -> dict[str, str]:
    return {s.name: run_program(s.source).answer for s in slices}


def test_multi_step_program_slices_nearest_the_answer_first():
    slices = program_slices(TICKETS)
    # adult_tickets is the whole computation (`answer = adult_tickets` only copies it): never offered
    assert [s.name for s in slices] == ["extra", "cost_if_all_children"]
    assert slices[1].source == (
        "total_tickets = 14\nchild_price = 5\ncost_if_all_children = total_tickets * child_price\n"
        "answer = cost_if_all_children"
    )
    assert values(slices) == {"extra": "28", "cost_if_all_children": "70"}
    # the slice's inputs only: the prices it does not use are not in it
    assert "adult_price" not in slices[0].source and "total_cost = 98" in slices[0].source


def test_unused_variables_and_prints_are_not_sliced():
    slices = program_slices(ORCHARD)
    assert [s.name for s in slices] == ["apples", "trees"]
    assert all("doubled_rows" not in s.source and "print" not in s.source for s in slices)
    assert values(slices) == {"apples": "1200", "trees": "40"}


def test_programs_without_an_intermediate_step_yield_no_slice():
    for source in (
        "answer = (98 - 14 * 5) / (9 - 5)",  # one expression
        "total = 8\nleft = 3\nanswer = total - left",  # inputs, then the one step
        "half = 46 / 2\nanswer = half",  # the one step, copied
        "rate = quote('2.0%', 0.02)\nanswer = rate * 100",  # a quoted figure is a given
        "total = 0\nweekly = 5\nfor week in range(8):\n    total += weekly\n    weekly += 2\nanswer = total",
        "answer = 8 - 3 +",  # does not parse
        "x = 2 * 3\ny = x + 1",  # binds no answer
    ):
        assert program_slices(source) == [], source


def test_a_step_that_is_the_whole_computation_is_not_offered():
    # the area is all the work; the answer only rounds it
    source = "p = 46\nwidth = (p / 2 - 5) / 2\nlength = width + 5\narea = width * length\nanswer = round(area)"
    assert [s.name for s in program_slices(source)] == ["width", "length"]
    # a step the teacher worked out over literals is a step; the import it needs goes with it
    by_hand = "import math\nbags = math.ceil(1470 / 25)\nanswer = bags * 2"
    [bags] = program_slices(by_hand)
    assert bags.source == "import math\nbags = math.ceil(1470 / 25)\nanswer = bags"
    assert run_program(bags.source).answer == "59"


def test_augmented_assignments_slice_by_definition():
    source = "price = 80\nprice *= 1.25\nprice *= 0.8\nanswer = price"
    [first] = program_slices(source)
    assert first.source == "price = 80\nprice *= 1.25\nanswer = price" and run_program(first.source).answer == "100"
    # the parent's program over its child: the slice's definition replaced by the child's function
    over = parent_over_children(source, [first])
    assert over == "price = 80\nprice = child_1()\nprice *= 0.8\nanswer = price"
    assert run_program(over, functions={"child_1": "answer = 100"}).answer == "80"


async def test_usable_slices_leave_out_the_answer_repeats_and_failures(tmp_path):
    ctx = context(tmp_path)
    # b's slice is not the whole computation (the answer multiplies it by 1) but its value is the answer's
    source = "a = 3\nb = a * 4\nc = b - 2\nanswer = b * 1 + c * 0"
    parent = Problem(id="p", question="q", answer="12", meta={"program": source})
    kept, why = await usable_slices(ctx, parent)
    assert why is None and [(s.name, s.value) for s in kept] == [("c", "10")]
    # the same value twice: the second is left out; a slice that fails to run is left out
    twice = "a = 6\nb = a * 2\nc = a + a\nanswer = b + c + a * 7"
    kept, why = await usable_slices(ctx, Problem(id="t", question="q", answer="66", meta={"program": twice}))
    assert [(s.name, s.value) for s in kept] == [("b", "12")]
    text = "n = 3\nlabel = 'x' * n\nanswer = len(label) * 2"  # the slice binds a string: not a number
    none, why = await usable_slices(ctx, Problem(id="s", question="q", answer="6", meta={"program": text}))
    assert none == [] and why.startswith("no slice of its program is usable: label: ")
    none, why = await usable_slices(ctx, Problem(id="n", question="q", answer="5", meta={"program": "answer = 8 - 3"}))
    assert none == [] and why == "its program has no intermediate step to slice"
    # at most K
    kept, _ = await usable_slices(
        context(tmp_path / "k1", K=1), Problem(id="o", question="q", answer="60", meta={"program": ORCHARD})
    )
    assert [s.name for s in kept] == ["apples"]


AGE = """from sympy import symbols, Eq, solve
T, D = symbols('T D')
eq1 = Eq(T, 3 * D)
eq2 = Eq(T + 12, 2 * (D + 12))
solution = solve((eq1, eq2), (T, D))
answer = solution[T]"""


async def test_each_unknown_a_solve_gives_is_a_slice(tmp_path):
    # the 1.5B's program for "Tom is three times as old as his daughter ..." (qs-age): the solve gives a dict,
    # each unknown in it is a step; the daughter's age (12) is offered, Tom's (the answer) is not
    slices = program_slices(AGE)
    assert [s.name for s in slices][:2] == ["solution[T]", "solution[D]"]
    assert values(slices)["solution[D]"] == "12"
    parent = Problem(id="age", question="q", answer="36", meta={"program": AGE})
    kept, why = await usable_slices(context(tmp_path), parent)
    assert why is None and [(s.name, s.value) for s in kept] == [("solution[D]", "12")]
    # the parent over its child: the unknown set from the child's function after the solve, which stays
    over = parent_over_children(AGE, kept)
    assert over.splitlines()[-2:] == ["solution[D] = child_1()", "answer = solution[T]"]
    assert run_program(over, functions={"child_1": "answer = 12"}).answer == "36"
