"""The engine's program operators (finmbs/mbs/program_operators.py) on hand-written programs: givens,
resampling with the admissibility check, the backward question (one admissible value, or a refusal),
added steps with clean answers, two steps, chaining, and number slots; every built program is run in
the real sandbox and its answer compared with one computed here by hand."""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import replace
from fractions import Fraction

import pytest

from finmbs.mbs import program_operators as ops
from finmbs.mbs.engine_leaves import operator_funnel, reached, slots
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Problem
from finmbs.report.view import metric_tables
from finmbs.verify.program import run_program

PAY = ops.Source(
    question="Ana earns $18 an hour. Last week she worked 35 hours, and 20% of her pay was withheld for taxes. "
    "What was her take-home pay in dollars?",
    program="rate = 18\nhours = 35\ngross = rate * hours\nanswer = gross * (1 - 0.2)\n",
    answer="504",
)
PACKS = ops.Source(
    question="A class has 30 students. Each needs 3 notebooks, and notebooks come in packs of 8. "
    "How many packs must the teacher buy?",
    program="import math\nstudents = 30\nneeded = students * 3\nanswer = math.ceil(needed / 8)\n",
    answer="12",
)


def ran(program: str) -> Fraction:
    result = run_program(program)
    assert result.ok, result.error
    value = ops.answer_value(result.answer or "")
    assert value is not None
    return value


def test_numbers_read_money_commas_decimals_and_percents():
    found = ops.numbers("It costs $1,200.50, or 15% off 3 items at 2.5 kg each; call 555-0199 on 3/4.")
    assert [(n.value, n.money, n.percent, n.commas, n.decimals) for n in found[:4]] == [
        (Fraction("1200.50"), True, False, True, 2),
        (Fraction(15), False, True, False, 0),
        (Fraction(3), False, False, False, 0),
        (Fraction("2.5"), False, False, False, 1),
    ]
    assert ops.stated_values("She gives half to her four friends and twice as many to 3 others.") == Counter(
        {Fraction(1, 2): 1, Fraction(4): 1, Fraction(2): 1, Fraction(3): 1}
    )
    assert ops.written(found[0], Fraction("950.25")) == "$950.25"
    assert ops.written(found[1], Fraction(30)) == "30%"


def test_givens_match_question_numbers_to_single_literals():
    found = ops.givens(PAY.question, PAY.program)
    assert [(g.number.value, g.scale) for g in found] == [
        (Fraction(18), Fraction(1)),
        (Fraction(35), Fraction(1)),
        (Fraction(20), Fraction(1, 100)),
    ]
    # a value the question states twice while the program holds it once is no given
    assert ops.givens("He has 4 bags of 4 apples. How many apples?", "answer = 4 * 5") == []
    # a value stated twice that the program holds twice is one given, changed in both places
    [given] = ops.givens("First 40 hours, then hours over 40. How many?", "a = 40 * 2\nanswer = a + 40")
    assert len(given.at) == 2 and len(given.places) == 2
    assert ops.givens("What is 2 + 2?", "answer = (") == []  # a program that does not parse has none


def test_resampled_changes_text_and_program_together_and_the_sandbox_checks_admissibility():
    built = ops.resampled(PAY, "pay", 0)
    assert isinstance(built, ops.Built)
    new = dict(built.details["givens"])  # type: ignore[arg-type]
    assert set(new) == {"$18", "35", "20%"} and all(new[k] != k for k in new)
    for text in new.values():
        assert text in built.question
    rate, hours, percent = (ops.answer_value(new[k]) for k in ("$18", "35", "20%"))
    assert rate and hours and percent
    expected = rate * hours * (100 - percent) / 100
    checked = run_program(ops.admissibility_program(built.program, PAY.program))
    if expected.denominator == 1:
        assert checked.ok and ops.answer_value(checked.answer or "") == expected
    else:  # the answer was whole, a draw that makes it a fraction is not admissible
        assert not checked.ok and "was whole, is now" in (checked.error or "")
    # a draw is stable for a key and an attempt, and differs between attempts
    assert ops.resampled(PAY, "pay", 0).question == built.question  # type: ignore[union-attr]
    assert ops.resampled(PAY, "pay", 1).question != built.question  # type: ignore[union-attr]


def refusal(source: ops.Source) -> str:
    """Why `resampled` refuses `source` (the test fails when it builds a variant)."""
    refused = ops.resampled(source, "key", 0)
    assert isinstance(refused, ops.Refusal), refused
    return refused.reason


def test_a_question_with_a_number_its_program_does_not_compute_with_is_not_resampled():
    # read in GSM8K variants: a total the program never holds stayed 40 while its two halves were drawn
    # again to 30 each, and a count bound and never used was drawn to 15 while its groups made 9
    total = ops.Source(
        "Mia plays chess for 40 minutes. In the first 20 minutes she wins 4 games. In the last 20 minutes "
        "she wins 3 more games than that. How many games does she win?",
        "games_first = 4\ngames_last = games_first + 3\nanswer = games_first + games_last",
        "11",
    )
    assert "'40', which its program never holds" in refusal(total)
    dead = ops.Source(
        "A tutor has 8 students on Monday. His first 3 students buy 1 book each, his next 2 students buy 4 "
        "books each, and his last 3 students buy none. How many books do they buy?",
        "students = 8\nfirst = 3 * 1\nnext_two = 2 * 4\nlast = 3 * 0\nanswer = first + next_two + last",
        "11",
    )
    assert "the question's 8 is a given its answer never uses" in refusal(dead)
    # the same count, once the answer computes with it, is an ordinary given
    used = replace(dead, program=dead.program.replace("answer = first", "answer = students * 0 + first"))
    assert isinstance(ops.resampled(used, "tutor", 0), ops.Built)
    # a variable bound again: only its last binding before the answer is live
    rebound = ops.Source(
        "Ana has 12 pens and buys 5 more. How many pens does she have?", "pens = 12\npens = 7\nanswer = pens + 5", "12"
    )
    assert "the question's 12 is a given its answer never uses" in refusal(rebound)
    looped = ops.Source(
        "Ben saves $3 a day for 5 days. How much does he save?",
        "total = 0\nfor day in range(5):\n    total += 3\nanswer = total",
        "15",
    )
    assert "not straight-line" in refusal(looped)
    # read in GSM8K variants: "baked 5 apple pies ... set the five pies out" was drawn to 8 pies, the
    # words left at five (the program's one literal 5 matched the digits only)
    pies = ops.Source(
        "Grandma Jones baked 5 apple pies. She cut each pie into 8 pieces and set the five pies out. There were "
        "14 pieces left. How many pieces were taken?",
        "pies = 5\npieces = 8\nleft = 14\nanswer = pies * pieces - left",
        "26",
    )
    assert "states 'five' in words, the value of one of its givens" in refusal(pies)
    # PAY states nothing its program does not compute with: it is drawn again
    assert ops.unmodelled(PAY.question, PAY.program, ops.givens(PAY.question, PAY.program)) is None


def test_admissibility_checks_a_variable_at_every_step_it_is_bound():
    # read in the quickstart: a chained question gave Maya 11 stickers and had her give away 13
    original = "stickers = 45\nstickers -= 12\nstickers += 20\nanswer = stickers"
    short = run_program(ops.admissibility_program(original.replace("45", "11").replace("12", "13"), original))
    assert not short.ok and "stickers after statement 2 was positive, is now -2" in (short.error or "")
    fine = run_program(ops.admissibility_program(original.replace("45", "40"), original))
    assert fine.ok and fine.answer == "48"


def test_a_drawn_count_keeps_its_grammar_and_its_kind():
    [friends] = ops.numbers("3 friends")
    [price] = ops.numbers("$1.50")
    [big] = ops.numbers("1,200 liters")
    for attempt in range(30):
        rng = ops.rng_for(f"k:{attempt}")
        assert ops.draw_near(friends, rng) >= 2  # never "1 friends"
        cents = ops.draw_near(price, rng) * 100
        assert cents.denominator == 1 and cents != 150
        assert ops.draw_near(big, rng) % 100 == 0  # a round number stays round


def test_backward_finds_the_one_admissible_value():
    rate, hours, percent = ops.givens(PAY.question, PAY.program)
    built = ops.backward(PAY, hours)
    assert isinstance(built, ops.Built)
    assert "worked x hours" in built.question and built.question.endswith(
        "If we know the answer to the above question is 504, what is the value of unknown variable x?"
    )
    assert ran(built.program) == 35 == built.expect
    built = ops.backward(PAY, percent)  # the program holds 0.2; x is the percent
    assert isinstance(built, ops.Built) and "x% of her pay" in built.question
    assert ran(built.program) == 20
    built = ops.backward(PAY, rate)
    assert isinstance(built, ops.Built) and "$x an hour" in built.question
    assert ran(built.program) == 18
    assert slots(built.question, built) is None


def test_backward_fails_where_the_answer_does_not_determine_the_given():
    # ceil(students * 3 / 8) = 12 for 30, 31 and 32 students: not one admissible value
    [students, _, _] = ops.givens(PACKS.question, PACKS.program)
    built = ops.backward(PACKS, students)
    assert isinstance(built, ops.Built)
    result = run_program(built.program)
    assert not result.ok and "not strictly monotone" in (result.error or "")
    # an answer that is not a number cannot be stated
    hours = ops.givens(PAY.question, PAY.program)[1]
    assert isinstance(ops.backward(ops.Source(PAY.question, PAY.program, "about 500"), hours), ops.Refusal)


@pytest.mark.parametrize("step", ops.STEPS, ids=ops.STEP_NAMES)
def test_added_step_keeps_the_answer_clean_and_extends_the_program(step):
    built = ops.added_step(PAY, step, "pay")
    assert isinstance(built, ops.Built), built
    value = ran(built.program)
    assert value == built.expect and ops.clean(value, money=True)
    a = Fraction(built.details["new_givens"][0])  # type: ignore[index]
    assert value == step.compute(Fraction(504), (a,))
    assert Fraction(504) in built.withholds and value in built.withholds
    assert built.clause is not None and built.clause.ask == "What was her take-home pay in dollars?"
    assert built.clause.body.startswith("Ana earns $18") and not built.clause.body.endswith("?")
    # the template states the givens and the new one, nothing else
    assert slots(built.question, built) is None


def test_added_step_refuses_what_it_cannot_keep_clean():
    odd = ops.Source("Tom has 7 marbles and finds 6 more. How many marbles does he have?", "answer = 7 + 6", "13")
    assert isinstance(ops.added_step(odd, ops.STEPS[3], "k"), ops.Refusal)  # 13 splits into no whole parts
    statement = ops.Source("Tom has 7 marbles and finds 6 more.", "answer = 7 + 6", "13")
    refusal = ops.added_step(statement, ops.STEPS[0], "k")
    assert isinstance(refusal, ops.Refusal) and "question sentence" in refusal.reason


def test_a_program_that_prints_its_answer_last_is_extended_after_the_answer_is_bound():
    # the 1.5B's programs often end `answer = x` then `print(answer)`: the steps go after the binding
    printed = ops.Source(
        "A party orders 48 slices of pizza. 4 friends each eat 3 slices. How many slices are left?",
        "total = 48\neaten = 4 * 3\nanswer = total - eaten  # left\nprint(answer)\nanswer\n",
        "36",
    )
    added = ops.STEPS[4]
    built = ops.added_step(printed, added, "pizza")
    assert isinstance(built, ops.Built), built
    assert "print" not in built.program and ran(built.program) == built.expect == 36 + Fraction(
        built.details["new_givens"][0]
    )
    two = ops.two_steps(printed, ops.STEPS[6], added, "pizza")
    assert isinstance(two, ops.Built), two
    assert "print" not in two.program and ran(two.program) == two.expect
    # on one line with the binding, the print goes too; a print before the binding stays
    assert ops.answer_last("answer = 2; print(answer)") == "answer = 2\n"
    assert ops.answer_last("print(1)\nanswer = 2\n") == "print(1)\nanswer = 2\n"
    # what shows a value may not bind one, and a program whose last binding is not the answer is refused
    assert ops.answer_last("answer = 2\n(answer := 3)\n") is None
    assert ops.answer_last("answer = 2\nx = 3\nprint(x)\n") is None
    refused = ops.added_step(ops.Source(printed.question, "answer = 48 - 12\nanswer2 = 1\n", "36"), added, "k")
    assert isinstance(refused, ops.Refusal) and "binding answer" in refused.reason


def test_two_steps_and_chained_compute_what_their_text_says():
    percent_of, split = ops.STEPS[0], ops.STEPS[3]
    built = ops.two_steps(PAY, percent_of, split, "pay")
    assert isinstance(built, ops.Built), built
    p, n = (Fraction(v) for v in built.details["new_givens"])  # type: ignore[union-attr]
    assert ran(built.program) == Fraction(504) * p / 100 / n == built.expect
    assert "Let M be" in built.question and slots(built.question, built) is None

    # two steps that undo each other are no step: refused
    double = replace(ops.STEPS[6], choices=lambda a, money: [(Fraction(2),)])
    halve = replace(ops.STEPS[2], choices=lambda a, money: [(Fraction(50),)])
    undone = ops.two_steps(PAY, double, halve, "pay")
    assert isinstance(undone, ops.Refusal) and "give back the answer 504" in undone.reason

    first = ops.Source("A box holds 6 eggs. How many eggs are in 2 boxes?", "answer = 6 * 2", "12")
    [_, hours, _] = ops.givens(PAY.question, PAY.program)
    chain = ops.chained(first, PAY, hours)
    assert isinstance(chain, ops.Built)
    assert "worked N hours" in chain.question and chain.question.startswith("Let N be the answer")
    assert ran(chain.program) == Fraction(18 * 12) * Fraction(8, 10)
    half = ops.Source("What is 5 divided by 2?", "answer = 5 / 2", "2.5")
    assert isinstance(ops.chained(half, PAY, hours), ops.Refusal)  # 2.5 cannot stand for a count of hours


def test_number_slots_name_what_is_missing_or_extra():
    built = ops.added_step(PAY, ops.STEPS[0], "pay")
    assert isinstance(built, ops.Built) and built.clause is not None
    p = built.clause.new_givens[0]
    good = f"{built.clause.body} She saves {ops.literal(p)}% of her take-home pay. How many dollars does she save?"
    assert slots(good, built) is None
    spelled = good.replace(f"{ops.literal(p)}%", f"{ops.literal(p)} percent")
    assert slots(spelled, built) is None
    leaked = good.replace("her take-home pay.", "her take-home pay of $504.")
    assert "states 504 (withheld: 504)" in (slots(leaked, built) or "")
    dropped = good.replace(f"{ops.literal(p)}%", "some")
    assert f"does not state {ops.literal(p)}" in (slots(dropped, built) or "")


def test_the_funnel_counts_each_variant_once_at_the_last_check_it_passed():
    def variant(i: int, op: str) -> Problem:
        meta = {"operator": op, "authored_by": "engine", "source_accuracy": 0.75}
        return Problem(id=f"s.e{i}", question="q", answer="1", domain="math", meta=meta)

    rows = [
        (variant(0, "backward"), Stage.LEAF, {"check": Check.OPERATOR}),
        (variant(1, "added_step:split"), Stage.LEAF, {"check": Check.ROUND_TRIP}),
        (variant(2, "backward"), Stage.LEAF, {}),  # too easy at the leaf screen
        (variant(3, "backward"), Stage.CALIBRATE, {"difficulty": {"band": "hard", "k": 0, "n": 8}}),
    ]
    assert reached(Stage.LEAF, {"check": Check.SLOTS}) == 1
    kept = variant(4, "backward")
    kept.meta["difficulty"] = {"band": "goldilocks", "k": 2, "n": 8}
    funnel = operator_funnel([kept], rows)
    assert funnel["backward"] == {
        "attempted": 4,
        "built": 3,
        "worded": 3,
        "round_trip": 3,
        "screened": 2,
        "goldilocks": 1,
        "qualified": 1,
        "target_before": 0.75,
        "target_after": 0.125,
    }
    assert funnel["added_step"]["worded"] == 1 and funnel["added_step"]["round_trip"] == 0
    # the report draws it as one row per operator
    [table] = [t for t in metric_tables({"engine_funnel": funnel}) if t.key == "engine_funnel"]
    assert table.columns[:3] == ["attempted", "built", "worded"] and [r[0] for r in table.rows] == list(funnel)


def test_assigned_names_only_what_a_simple_step_binds():
    from finmbs.verify.skeleton import assigned

    cases = {
        "x = 3": ["x"],
        "a = b = 2": ["a", "b"],
        "x += 1": ["x"],
        "x: float = 2.0": ["x"],
        "x: float": [],  # a bare annotation binds nothing: instrumenting it would read an unbound name
        "a, b = 1, 2": [],
        "d['k'] = 1": [],
        "print(3)": [],
    }
    for source, names in cases.items():
        assert assigned(ast.parse(source).body[0]) == names, source


def test_an_added_or_taken_amount_is_round_and_never_one():
    assert ops._amounts(Fraction(6)) == [Fraction(2), Fraction(3)]  # a tenth to a half of 6, and not 1
    assert ops._amounts(Fraction(3)) == []  # nothing between 2 and 1.5: the step does not apply
    assert all(b >= 2 and b <= 60 for b in ops._amounts(Fraction(120)))


def test_a_calendar_count_is_never_drawn_past_what_the_calendar_holds():
    import random

    question = "She works 50 weeks a year, 35 hours a week, and 6 days per week; 45 apples a day."
    caps = {question[n.start : n.end]: ops.calendar_cap(question, n) for n in ops.numbers(question)}
    assert caps == {"50": 52, "35": 168, "6": 7, "45": None}
    for n in ops.numbers(question):
        cap = caps[question[n.start : n.end]]
        drawn = {ops.draw_near(n, random.Random(i), cap) for i in range(100)}
        assert cap is None or max(drawn) <= cap
