"""The engine's leaf hardening end to end (stages.program_operators, finmbs/mbs/engine_leaves.py) through
a real HTTP server speaking the OpenAI API: a scripted teacher that reads one family of pay problems by
hand-written rules (it writes the round trip's programs from the text alone, and words an added step's
clause), students that miss everything. Checked: the variants the engine keeps (labels computed by its
programs, round-trip tallies, operators and wording recorded), a teacher whose clause leaks the old
answer falling back to the template, a teacher whose programs miss making the round trip reject, an
operator that cannot apply counted, the funnel rows, and the switch off (the paper profile)."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from finmbs.config import PAPER_VALUES, RunConfig, StageParams
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.engine_leaves import engine_composed, operator_funnel
from finmbs.mbs.leaves import harder_leaves, screen_at_calibration
from finmbs.mbs.outcome import calibrate_nodes, seed_root
from finmbs.records import Decision, Problem, Trace, TreeNode
from finmbs.testing.server import Reply, Request

QUESTION = (
    "Ana earns $18 an hour. Last week she worked 35 hours, and 20% of her pay was withheld for taxes. "
    "What was her take-home pay in dollars?"
)
PROGRAM = "rate = 18\nhours = 35\ngross = rate * hours\nanswer = gross * (1 - 0.2)\n"
_N = r"([\d,]+(?:\.\d+)?)"
STEP_RULES = [  # how the scripted teacher reads a new last step, in the template's or its own clause's words
    (rf"{_N}% of", lambda a, p: a * p / 100),
    (rf"(?:increase of|grows by) {_N}%", lambda a, p: a * (100 + p) / 100),
    (rf"(?:decrease of|falls by) {_N}%", lambda a, p: a * (100 - p) / 100),
    (rf"split equally into {_N} parts", lambda a, p: a / p),
    (rf"plus {_N}", lambda a, p: a + p),
    (rf"after {_N} is taken away", lambda a, p: a - p),
    (rf"{_N} times", lambda a, p: a * p),
]


def number(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def base_pay(question: str) -> Fraction | None:
    """Take-home pay as the question's first sentences state it, or None (not of the pay family)."""
    rate = re.search(r"\$(\S+) an hour", question)
    hours = re.search(r"worked (\S+) hours", question)
    percent = re.search(r"(\S+)% of her pay", question)
    if not (rate and hours and percent) or "x" in (rate[1], hours[1], percent[1]):
        return None
    return number(rate[1]) * number(hours[1]) * (100 - number(percent[1])) / 100


def solving_program(question: str) -> str:
    """The scripted teacher's program for a question of the pay family, read by rules (not by the engine);
    a question of no family it knows gets a program that gives 0."""
    eggs = re.fullmatch(r"A box holds (\d+) eggs\. How many eggs are in (\d+) boxes\?", question.strip())
    if eggs:
        return f"per_box = {eggs[1]}\nboxes = {eggs[2]}\nanswer = per_box * boxes"
    chain = re.match(r"Let N be the answer to this question: A box holds (\d+) eggs\. How many eggs are in (\d+) "
                     r"boxes\? Now use N: (.+)", question, re.S)  # fmt: skip
    if chain:
        return solving_program(chain[3].replace("N", str(int(chain[1]) * int(chain[2]))))
    if "unknown variable x" in question:
        rate = re.search(r"\$(\S+) an hour", question)
        hours = re.search(r"worked (\S+) hours", question)
        percent = re.search(r"(\S+)% of her pay", question)
        stated = re.search(r"is ([\d.,]+), what is the value", question)
        if not (rate and hours and percent and stated):
            return "answer = 0"
        lines = ["from sympy import symbols, Eq, solve", "x = symbols('x')"]
        lines += [f"{k} = {m[1].replace(',', '')}" for k, m in (("rate", rate), ("hours", hours), ("percent", percent))]
        lines.append(f"answer = solve(Eq(rate * hours * (1 - percent / 100), {stated[1].replace(',', '')}), x)[0]")
        return "\n".join(lines)
    base = base_pay(question)
    if base is None:
        return "answer = 0"
    tail = question.split("taxes.", 1)[1]
    while found := [(m.start(), m, step) for pattern, step in STEP_RULES if (m := re.search(pattern, tail))]:
        _, m, step = min(found, key=lambda f: f[0])  # the steps in the order the text states them
        base = step(base, number(m[1]))
        tail = tail[m.end() :]
    return f"from fractions import Fraction\nanswer = Fraction({base.numerator}, {base.denominator})"


class PayTeacher:
    """The scripted server's handler. `clause`: how the teacher words an added step ("good", or "leak":
    it states the old answer); `programs_miss`: its round-trip programs all add 1 ("unchained": all but those
    for a chained question)."""

    def __init__(self, clause: str = "good", programs_miss: bool | str = False, clause_split: bool = False):
        self.clause, self.programs_miss, self.clause_split = clause, programs_miss, clause_split
        self.asked: list[str] = []

    def __call__(self, request: Request) -> Reply:
        text = request.text
        if "Write a new final question to replace the old one" in text:
            self.asked.append("clause")
            what = re.search(r"that ask for (.+?), where", text)
            assert what
            ask = f"What is {what[1].replace('that quantity', 'her take-home pay')}?"
            if self.clause == "leak":
                body = re.search(r"<problem>\n(.+?)\n</problem>", text, re.S)
                old = base_pay(body[1]) if body else None
                assert old is not None and old.denominator == 1
                ask = f"Her take-home pay was ${old}. {ask}"
            return Reply(texts=[json.dumps({"ask": ask})])
        if "Write a short Python program that solves" in text:
            self.asked.append("program")
            problem = re.search(r"<problem>\n(.+?)\n</problem>", text, re.S)
            assert problem
            eggs = "eggs" in problem[1]  # the peer seed, alone or as a chained question's first part
            miss = self.programs_miss is True or (self.programs_miss == "unchained" and not eggs)
            program = solving_program(problem[1]) + (" + 1" if miss else "")
            tail = problem[1].split("taxes.", 1)[-1]
            if self.clause_split and "What is" in tail and "Call that number" not in tail:
                # the teacher's own clause: one program reads it as the engine does, the others misread it
                return Reply(texts=[f"```python\n{program}{' + 1' * bool(i)}\n```" for i in range(request.n)])
            return Reply(texts=[f"```python\n{program}\n```"] * request.n)
        self.asked.append("solve")  # prose traces and students: always wrong
        return Reply(texts=["I think it is \\boxed{7}."] * request.n)


def config(base_url: str, cache: Path, **stages: object) -> RunConfig:
    endpoint = dict(model="openai/t", api_base=base_url, timeout_s=10.0, max_retries=1, supports_n=True)
    return RunConfig.model_validate(
        {
            "domain": "math",
            "roles": {
                "teachers": [{"name": "teacher", **endpoint}],
                "students": [{"name": "student", **endpoint}],
                "target": {"name": "target", **endpoint},
                "judge": {"name": "judge", **endpoint},
            },
            "stages": {"N": 2, "Nt": 1, "leaf_operators": False, **stages},
            "verify": {"programs": True},
            "novelty": {"structure": True},
            "cache_path": str(cache),
        }
    )


def leaf(accuracy: float) -> TreeNode:
    problem = Problem(id="pay", question=QUESTION, answer="504", domain="math", meta={"program": PROGRAM})
    trace = Trace(text="18 * 35 * 0.8 = 504", answer="504", model="teacher", verified=True)
    node = TreeNode(problem=problem, trace=trace, path="0", decisions=[Decision(stage="traces", outcome="accepted")])
    node.student_accuracy["student"] = accuracy
    return node


async def hardened(
    server,
    tmp_path: Path,
    teacher: PayTeacher,
    accuracy: float = 1.0,
    peers: tuple[Problem, ...] = (),
    **stages: object,
):
    server.handler = teacher
    cfg = config(server.base_url, tmp_path / "c.sqlite", **stages)
    ctx = Context(config=cfg, gateway=Gateway(cache_path=None), peers=peers)
    node, ledger = leaf(accuracy), Ledger("pay")
    return await harder_leaves(ctx, node, ledger), node, ledger


async def test_the_engine_builds_words_and_checks_each_variant(tmp_path, openai_server):
    kept, node, ledger = await hardened(openai_server, tmp_path, PayTeacher())
    by_op = {n.problem.meta["operator"].split(":")[0]: n.problem for n in kept}
    assert set(by_op) == {"backward", "added_step", "two_steps"}, [r.reason for r in ledger.rejected]
    plan = next(d for d in node.decisions if "engine operators in order" in d.reason)
    # the student solves it: backward first; an added step twice, by two operations, the milder first
    assert plan.data["operators"] == ["backward", "added_step", "added_step", "two_steps"]
    steps = [n.problem.meta["operator"] for n in kept if n.problem.meta["operator"].startswith("added_step")]
    assert len(steps) == 2 and len(set(steps)) == 2
    assert steps[0].split(":")[1] in ("added", "taken_away", "split", "repeated")
    instance = plan.data["instance_question"]
    assert plan.data["instance"]["resampled"] and instance != QUESTION
    for problem in by_op.values():
        meta = problem.meta
        assert meta["authored_by"] == "engine" and meta["round_trip"] == "3 of 3"
        assert "prose_traces" not in meta  # drawn at final calibration, for those that qualify
        assert meta["structure"] == "new" and meta["resampled"]
        assert meta["source_accuracy"] == 1.0
        assert Fraction(problem.answer) == Fraction(meta["program_answer"])
    backward = by_op["backward"]
    assert "unknown variable x" in backward.question and backward.meta["worded_by"] == "engine"
    # its label is the given the engine masked, in the resampled instance's numbers
    masked = backward.meta["operator_details"]["given"]
    assert Fraction(backward.answer) == Fraction(masked.strip("$%").replace(",", ""))
    assert masked in instance and masked not in backward.question
    added = by_op["added_step"]
    assert added.meta["worded_by"] == "teacher" and added.question.endswith("?")
    assert "Call that number N" not in added.question  # the teacher's clause, not the template
    assert "Let M be" in by_op["two_steps"].question  # two steps are worded by the template
    assert ledger.rejected == []


async def test_prose_traces_are_tallied_at_calibration_for_the_engine_variants_that_qualify(tmp_path, openai_server):
    kept, _, _ = await hardened(openai_server, tmp_path, PayTeacher())
    answers = {n.problem.question: n.problem.answer for n in kept}
    chosen = kept[0].problem.question  # the one the target solves once in N: Goldilocks
    tallied: list[str] = []

    def handler(request: Request) -> Reply:
        found = re.search(r"<problem>\n(.+?)\n</problem>", request.text, re.S)
        assert found and found[1] in answers
        if request.body.get("model") == "target":
            right = [f"\\boxed{{{answers[chosen]}}}"] if found[1] == chosen else []
            return Reply(texts=right + ["\\boxed{7}"] * (request.n - len(right)))
        tallied.append(found[1])  # the teacher's prose traces
        return Reply(texts=["I think it is \\boxed{7}."] * request.n)

    openai_server.handler = handler
    cfg = config(openai_server.base_url, tmp_path / "c2.sqlite")
    cfg.roles.target = cfg.roles.target.model_copy(update={"model": "openai/target"})
    ctx = Context(config=cfg, gateway=Gateway(cache_path=None))
    ledger = Ledger("pay")
    roots, others = await calibrate_nodes(ctx, kept, ledger)
    [qualified] = roots + others
    assert qualified.question == chosen and qualified.meta["prose_traces"].startswith("no verified trace")
    assert set(tallied) == {chosen}  # none drawn for the variants calibration rejected
    assert len(ledger.rejected) == len(kept) - 1
    assert all("prose_traces" not in r.problem.meta for r in ledger.rejected)
    # with stages.prose_tally off nothing is drawn for it: it qualifies all the same
    tallied.clear()
    for node in kept:
        node.problem.meta.pop("prose_traces", None)
    off = config(openai_server.base_url, tmp_path / "c3.sqlite", prose_tally=False)
    off.roles.target = cfg.roles.target
    roots, others = await calibrate_nodes(Context(config=off, gateway=Gateway(cache_path=None)), kept, Ledger("pay"))
    [qualified] = roots + others
    assert qualified.question == chosen and "prose_traces" not in qualified.meta and tallied == []


async def test_hardening_a_leaf_reports_the_leaf_stage_before_any_model_call(tmp_path, openai_server):
    # read in a quickstart's progress: a too-easy seed whose variants all had template wordings stayed at
    # "traces" for 15 minutes of leaf work, and the time-left estimate grew from 9 to 42 minutes
    openai_server.handler = PayTeacher()
    ctx = Context(config=config(openai_server.base_url, tmp_path / "c.sqlite"), gateway=Gateway(cache_path=None))
    seen: list[int] = []  # how many requests the server had seen at each tick of the leaf stage
    ctx.tick = lambda stage: seen.append(len(openai_server.requests)) if str(stage) == "leaf" else None
    await harder_leaves(ctx, leaf(1.0), Ledger("pay"))
    assert seen and seen[0] == 0  # the first tick of the leaf stage comes before the first request


async def test_a_clause_that_states_the_old_answer_falls_back_to_the_template(tmp_path, openai_server):
    kept, _, _ = await hardened(openai_server, tmp_path, PayTeacher(clause="leak"), accuracy=0.0)
    added = next(n.problem for n in kept if n.problem.meta["operator"].startswith("added_step"))
    assert added.meta["worded_by"] == "engine" and "Call that number N." in added.question
    [why] = added.meta["wording_failed"]
    assert why.startswith("the model's clause: number slots: the text states") and "(withheld:" in why


async def test_without_clause_wording_the_template_words_every_added_step_and_no_clause_is_asked(
    tmp_path, openai_server
):
    teacher = PayTeacher()
    kept, _, ledger = await hardened(openai_server, tmp_path, teacher, clause_wording=False)
    added = [n.problem for n in kept if n.problem.meta["operator"].startswith("added_step")]
    assert len(added) == 2, [r.reason for r in ledger.rejected]
    for problem in added:
        assert problem.meta["worded_by"] == "engine" and "Call that number N." in problem.question
        assert "wording_failed" not in problem.meta and problem.meta["round_trip"] == "3 of 3"
    assert "clause" not in teacher.asked and "program" in teacher.asked
    # the same leaf with the switch on asks the teacher for each added step's clause
    on = PayTeacher()
    await hardened(openai_server, tmp_path / "on", on)
    assert on.asked.count("clause") == 2


async def test_a_root_leaf_is_not_screened_when_its_weakest_student_is_the_target(tmp_path, openai_server):
    # the weakest student samples as the target does (max_tokens = L): calibration's stale band is its screen
    same = {"L": 4096, "alpha_leaf": 0.5}  # N = 2: alpha 0.5 rejects only 2 of 2
    teacher = PayTeacher()
    kept, _, ledger = await hardened(openai_server, tmp_path, teacher, **same)
    assert len(kept) == 4 and ledger.rejected == [], [r.reason for r in ledger.rejected]
    assert "solve" not in teacher.asked  # no student rollout drawn for any variant
    assert all("screen left to final calibration" in n.decisions[-1].reason for n in kept)
    assert all(not n.student_accuracy for n in kept)
    # screened as always with the switch off
    screened = PayTeacher()
    kept, _, _ = await hardened(openai_server, tmp_path / "off", screened, **same, screen_at_calibration=False)
    assert screened.asked.count("solve") == len(kept) == 4
    assert all(n.student_accuracy == {"student": 0.0} for n in kept)
    # and below a root, with another budget, a stricter alpha, another temperature or a finance leaf
    base = config(openai_server.base_url, tmp_path / "p.sqlite", **same)

    def screened_at_calibration(node: TreeNode | None = None, **stages: object) -> bool:
        cfg = base.model_copy(update={"stages": base.stages.model_copy(update=stages)})
        return screen_at_calibration(Context(config=cfg, gateway=Gateway(cache_path=None)), node or leaf(1.0))

    assert screened_at_calibration()
    below = leaf(1.0)
    below.path = "0.1"
    finance = leaf(1.0)
    finance.problem = finance.problem.model_copy(update={"domain": "finance"})
    assert not screened_at_calibration(below) and not screened_at_calibration(finance)
    assert not screened_at_calibration(L=384) and not screened_at_calibration(alpha_leaf=0.4)
    hotter = base.roles.students[-1].model_copy(update={"temperature": 0.5})
    base.roles.students[-1] = hotter
    assert not screened_at_calibration()


def program_draws(server) -> list[int]:
    """How many programs each round-trip request the server saw asked for."""
    return [r.n for r in server.requests if "Write a short Python program that solves" in r.text]


async def test_round_trip_stop_draws_programs_one_at_a_time_until_one_computes_the_answer(tmp_path, openai_server):
    kept, _, ledger = await hardened(openai_server, tmp_path, PayTeacher(), clause_wording=False, round_trip_stop=True)
    assert len(kept) == 4 and ledger.rejected == []
    assert all(n.problem.meta["round_trip"] == "1 of 1" for n in kept)  # the first program computed it
    assert program_draws(openai_server) == [1] * 4
    # programs that all miss: each text drawn for one at a time up to k, and rejected as before
    openai_server.requests.clear()
    _, _, ledger = await hardened(
        openai_server, tmp_path / "miss", PayTeacher(programs_miss=True), accuracy=0.0, round_trip_stop=True
    )
    engine = [r for r in ledger.rejected if r.problem.meta.get("authored_by") == "engine"]
    assert len(engine) == 4 and all(r.problem.meta["round_trip"] == "0 of 3" for r in engine)
    assert all(r.reason.startswith("wording not solvable: none of 3 programs") for r in engine)
    # the model's clauses (asked first, then the template) got all k at once; the other texts one at a time
    draws = program_draws(openai_server)
    assert draws.count(3) == 2 and draws.count(1) == 3 * 4
    # batched as before with the switch off: one call of k per text
    openai_server.requests.clear()
    kept, _, _ = await hardened(openai_server, tmp_path / "off", PayTeacher(), clause_wording=False)
    assert program_draws(openai_server) == [3] * 4 and all(n.problem.meta["round_trip"] == "3 of 3" for n in kept)


async def test_a_clause_not_every_round_trip_program_solves_gives_way_to_the_template(tmp_path, openai_server):
    kept, _, _ = await hardened(openai_server, tmp_path, PayTeacher(clause_split=True), accuracy=0.0)
    added = [n.problem for n in kept if n.problem.meta["operator"].startswith("added_step")]
    assert added and all(p.meta["worded_by"] == "engine" and "Call that number N." in p.question for p in added)
    assert all(p.meta["round_trip"] == "3 of 3" for p in added)
    [why] = added[0].meta["wording_failed"]
    assert why.startswith("the model's clause: round trip 1 of 3, not all")


async def test_a_wording_no_teacher_program_solves_is_rejected_then_the_prompt_path_runs(tmp_path, openai_server):
    teacher = PayTeacher(programs_miss=True)
    kept, node, ledger = await hardened(openai_server, tmp_path, teacher, accuracy=0.0)
    engine = [r for r in ledger.rejected if r.problem.meta.get("authored_by") == "engine"]
    assert len(engine) == 4 and all(r.data["check"] == "round_trip" for r in engine)
    assert all(r.reason.startswith("wording not solvable: none of 3 programs") for r in engine)
    assert all(r.problem.meta["round_trip"] == "0 of 3" for r in engine)
    assert not any(p.meta.get("authored_by") == "engine" for p in (n.problem for n in kept))
    assert any("engine operators: kept 0 of 0" in d.reason for d in node.decisions)
    funnel = operator_funnel([], [(r.problem, r.stage, r.data) for r in engine])
    assert {op: row["round_trip"] for op, row in funnel.items()} == {"backward": 0, "added_step": 0, "two_steps": 0}
    assert funnel["added_step"]["worded"] == 2 and funnel["backward"]["worded"] == funnel["two_steps"]["worded"] == 1


async def test_an_operator_that_cannot_apply_is_one_counted_reason(tmp_path, openai_server):
    teacher = PayTeacher()
    openai_server.handler = teacher
    cfg = config(openai_server.base_url, tmp_path / "c.sqlite")
    ctx = Context(config=cfg, gateway=Gateway(cache_path=None))
    statement = Problem(
        id="st", question="Tom has 7 marbles and finds 6 more. He counts them.", answer="13", domain="math",
        meta={"program": "answer = 7 + 6"},
    )  # fmt: skip
    node, ledger = TreeNode(problem=statement, path="0"), Ledger("st")
    node.student_accuracy["student"] = 0.0
    await harder_leaves(ctx, node, ledger)
    refusals = [r for r in ledger.rejected if r.data.get("check") == "operator"]
    assert {r.problem.meta["operator"] for r in refusals} >= {"added_step", "two_steps"}
    assert all("question sentence" in r.reason for r in refusals if r.problem.meta["operator"] != "backward")


async def test_chained_takes_the_next_seed_of_the_run_as_its_first_question(tmp_path, openai_server):
    eggs = Problem(id="eggs", question="A box holds 6 eggs. How many eggs are in 2 boxes?", answer="12", domain="math")
    pay = leaf(0.0).problem
    beside = {"chained_fallback": False}  # built beside the leaf's own operators, not held back
    kept, node, ledger = await hardened(
        openai_server, tmp_path, PayTeacher(), accuracy=0.0, peers=(pay, eggs), **beside
    )
    plan = next(d for d in node.decisions if "engine operators in order" in d.reason)
    assert plan.data["operators"] == ["added_step", "added_step", "backward", "two_steps", "chained"]
    chained = [n.problem for n in kept if n.problem.meta["operator"] == "chained"]
    assert chained, [r.reason for r in ledger.rejected]
    [problem] = chained
    assert problem.question.startswith("Let N be the answer to this question: A box holds")
    assert "A box holds 6 eggs" not in problem.question  # the first seed's givens are drawn again too
    assert problem.meta["operator_details"]["first"] == "eggs" and problem.meta["round_trip"] == "3 of 3"
    # a run of one seed has no other to chain with: the operator is not planned
    _, alone, _ = await hardened(openai_server, tmp_path / "alone", PayTeacher(), accuracy=0.0, peers=(pay,), **beside)
    assert "chained" not in next(d for d in alone.decisions if "engine operators" in d.reason).data["operators"]


async def test_chained_is_held_back_until_the_leafs_own_operators_keep_none(tmp_path, openai_server):
    eggs = Problem(id="eggs", question="A box holds 6 eggs. How many eggs are in 2 boxes?", answer="12", domain="math")
    pay = leaf(0.0).problem
    # the leaf's own operators keep variants: chained is never built
    kept, node, ledger = await hardened(openai_server, tmp_path, PayTeacher(), accuracy=0.0, peers=(pay, eggs))
    plan = next(d for d in node.decisions if "engine operators in order" in d.reason)
    assert plan.data["operators"] == ["added_step", "added_step", "backward", "two_steps"]
    assert kept and all(n.problem.meta["operator"] != "chained" for n in kept)
    assert not any("held back" in d.reason for d in node.decisions)
    assert "chained" not in {r.problem.meta.get("operator") for r in ledger.rejected}
    # they keep none (the teacher's programs miss every question but a chained one): chained is built then
    teacher = PayTeacher(programs_miss="unchained")
    kept, node, ledger = await hardened(openai_server, tmp_path / "fb", teacher, accuracy=0.0, peers=(pay, eggs))
    assert {r.data["check"] for r in ledger.rejected} == {"round_trip"} and len(ledger.rejected) == 4
    held = next(d for d in node.decisions if "engine operators held back" in d.reason)
    assert held.data["operators"] == ["chained"]
    [problem] = [n.problem for n in kept]
    assert problem.meta["operator"] == "chained" and problem.id == "pay.e4"  # apart from the plan's e0..e3
    assert problem.meta["authored_by"] == "engine" and problem.meta["round_trip"] == "3 of 3"
    assert any("engine operators: kept 1 of 1" in d.reason for d in node.decisions)


async def test_a_seed_no_prose_trace_verifies_enters_with_a_program_that_computes_its_answer(tmp_path, openai_server):
    openai_server.handler = PayTeacher()  # its prose always answers 7; its programs read the question
    ctx = Context(config=config(openai_server.base_url, tmp_path / "c.sqlite"), gateway=Gateway(cache_path=None))
    seed = Problem(id="pay", question=QUESTION, answer="504", domain="math")
    root = await seed_root(ctx, seed, Ledger("pay"))
    assert root is not None and root.trace is not None and root.trace.model.endswith("(program)")
    assert root.problem.meta["verified_by"] == "program" and "answer = Fraction(504, 1)" in root.trace.text
    assert "the prose traces missed: no verified trace" in root.decisions[0].reason
    # a stated answer the program does not compute: dropped, both reasons named
    ledger = Ledger("wrong")
    wrong = seed.model_copy(update={"id": "wrong", "answer": "505"})
    assert await seed_root(ctx, wrong, ledger) is None
    [rejection] = ledger.rejected
    assert "no verified trace" in rejection.reason and "its program gives 504" in rejection.reason
    # switched off (the paper profile): the prose rule alone
    off = config(openai_server.base_url, tmp_path / "c.sqlite", program_roots=False)
    ctx_off = Context(config=off, gateway=Gateway(cache_path=None))
    assert await seed_root(ctx_off, seed, Ledger("pay")) is None


async def test_a_decomposed_parent_is_composed_by_the_engine_over_a_child_version(tmp_path, openai_server):
    openai_server.handler = PayTeacher()
    ctx = Context(config=config(openai_server.base_url, tmp_path / "c.sqlite"), gateway=Gateway(cache_path=None))
    # the parent after decomposition: its program calls its child, its own program kept as own_program
    parent = Problem(
        id="pay", question=QUESTION, answer="504", domain="math",
        meta={"program": "gross = child_1()\nanswer = gross * (1 - 0.2)", "program_functions": {"child_1": "answer = 18 * 35"},
              "own_program": PROGRAM},
    )  # fmt: skip
    node, ledger = TreeNode(problem=parent, path="0"), Ledger("pay")
    eggs = Problem(
        id="pay.0.h0", question="A box holds 6 eggs. How many eggs are in 2 boxes?", answer="12", domain="math",
        meta={"program": "per_box = 6\nboxes = 2\nanswer = per_box * boxes", "operator": "added_step:repeated",
              "authored_by": "engine"},
    )  # fmt: skip
    version = TreeNode(problem=eggs, path="0.0")
    [composed] = await engine_composed(ctx, node, [[version]], ledger)
    problem = composed.problem
    # 12 stands for the first given the parent's program holds ($18 an hour): 12 * 35 * 0.8
    assert problem.question.startswith("Let N be the answer to this question: A box holds 6 eggs.")
    assert "Ana earns $N an hour" in problem.question and "$18" not in problem.question
    assert Fraction(problem.answer) == 336 and problem.meta["operator"] == "composed"
    assert problem.meta["round_trip"] == "3 of 3" and problem.meta["authored_by"] == "engine"
    assert problem.meta["operator_details"]["first"] == "pay.0.h0"
    assert problem.meta["operator_details"]["child_operator"] == "added_step:repeated"
    assert problem.provenance.stage == "compose" and composed.children == [version]
    assert composed.mirrors == "pay" and ledger.rejected == []
    # a child answer no given can take (a fraction for whole-number givens that stay whole) is one reason
    half = TreeNode(problem=eggs.model_copy(update={"id": "pay.0.h1", "answer": "12.5",
                                                    "meta": {**eggs.meta, "program": "answer = 25 / 2"}}), path="0.0")  # fmt: skip
    ledger = Ledger("pay")
    node = TreeNode(problem=parent, path="0")
    assert await engine_composed(ctx, node, [[half]], ledger) == []
    [refusal] = ledger.rejected
    assert refusal.data["check"] == "operator" and refusal.reason.startswith("composed: pay.0.h1 into the parent")
    assert refusal.problem.provenance.stage == "compose"  # the stage it was refused at, not leaf hardening's
    # a parent with no program of its own: not applied, said on the node
    bare = TreeNode(
        problem=parent.model_copy(update={"meta": {"program_functions": {"child_1": "answer = 1"}}}), path="0"
    )
    assert await engine_composed(ctx, bare, [[version]], Ledger("pay")) == []
    assert "no program of its own" in bare.decisions[-1].reason


@pytest.mark.parametrize("key", ["stages.program_operators", "stages.program_roots", "stages.engine_compose"])
def test_the_engine_is_finmbs_s_and_off_in_the_paper_profile(key):
    assert PAPER_VALUES[key] is False
    stage = key.split(".")[1]
    assert getattr(StageParams(), stage) is True
