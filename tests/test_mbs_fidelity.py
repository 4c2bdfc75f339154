"""The paper's rules that the engine once bent (issue 12) and the novelty guard, each in the scripted
arithmetic world on the real OpenAI-compatible server, expectations worked out by hand from the
world's rules (finmbs/testing/world.py). The package's import graph: tests/test_imports.py."""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import NoveltySettings
from finmbs.llm import Gateway
from finmbs.mbs.candidates import ANSWER_CHARS, WorkedProblem, verified_node
from finmbs.mbs.compose import synthesize, trials
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import ANSWER_LEAK, decompose
from finmbs.mbs.leaves import harder_leaves, leaf_prompt
from finmbs.mbs.novelty import gives_own_answer, restated, reveals, similarity, unworkable
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Problem, SeedCounts, Snippet, TreeNode
from finmbs.runs import read_jsonl
from finmbs.runs.folder import RunDir
from finmbs.runs.grow import run_grow
from finmbs.runs.metrics import collect_metrics
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config

SEED = Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25")


def context(server, tmp_path, agents, *, world=None, students=("s",), **stages):
    world = world or World(agents={})
    world.agents = {"teacher": Agent(), "target": Agent(capacity=6, partial=0.5), **agents}
    server.handler = world
    config = world_config(
        server.base_url, ["teacher"], list(students), "target", str(tmp_path / "cache.sqlite"), **stages
    )
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite"))), config


# appendix B.3: a subproblem must not reveal its parent's answer --------------------------------------
async def test_child_revealing_the_parents_answer_is_rejected(tmp_path, openai_server):
    # the world's third child is the parent's last step, 5 * 5 = 25: its answer is the parent's. Without
    # it the children (2+3, 4+1: only "+") do not cover "*", so the student gains nothing.
    world = World(agents={}, reveal_answer=True)
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4)
    root, ledger = TreeNode(problem=SEED), Ledger("a")
    assert await decompose(ctx, root, ledger) is False
    [leak] = [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    assert leak.problem.question == "Compute 5 * 5." and leak.stage == "decompose"
    assert leak.reason == "reveals the parent's answer: its answer '25' is the parent's ('25')"
    assert root.decisions[0].reason == "ineffective: s 0.000 -> 0.000 when conditioned"
    # the leaking child was never sent for verification
    assert not any("Compute 5 * 5." in r.text and "<problem>" in r.text for r in openai_server.requests)


async def test_k_children_are_taken_after_the_leaks_are_skipped(tmp_path, openai_server):
    # the teacher restates the parent as its first subproblem, then writes 2 + 3, 4 + 1, 5 * 6: with K = 2
    # the leak is skipped and the next two are the children (the paper's "up to K" easier subproblems)
    world = World(agents={}, restate_parent=True)
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4, K=2)
    root, ledger = TreeNode(problem=SEED), Ledger("a")
    await decompose(ctx, root, ledger)
    [leak] = ledger.rejected[:1]
    assert leak.problem.id == "a.d0c0" and leak.data["check"] == ANSWER_LEAK
    children = root.children or [r.problem for r in ledger.rejected if r.stage == "effectivity"]
    ids = [c.problem.id if isinstance(c, TreeNode) else c.id for c in children]
    assert ids == ["a.d0c1", "a.d0c2"]


def test_a_stated_answer_is_short():
    # the bound is in the JSON schema, so a constrained teacher closes the answer
    assert WorkedProblem.model_json_schema()["properties"]["answer"]["maxLength"] == ANSWER_CHARS == 200
    assert WorkedProblem(question="Compute 2 + 3.", solution="2 + 3 = 5.", answer="5" * 200).answer
    with pytest.raises(ValidationError):
        WorkedProblem(question="Compute 2 + 3.", solution="2 + 3 = 5.", answer="5 because " * 30)


async def test_a_child_relabeled_to_its_parents_answer_is_a_leak(tmp_path, openai_server):
    # the teacher states 26 for the parent's last step 5 * 5 (so it passes the leak check as written); its
    # traces agree on 25, the parent's answer: relabeled, the child would hand the student the answer
    world = World(agents={}, reveal_answer=True, wrong_child_answers=True)
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4, relabel=True)
    root, ledger = TreeNode(problem=SEED), Ledger("a")
    assert await decompose(ctx, root, ledger) is False
    [leak] = [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    assert leak.problem.question == "Compute 5 * 5." and leak.problem.meta["relabeled_from"] == "26"
    assert leak.reason == "reveals the parent's answer: its answer '25' is the parent's ('25')"
    conditioned = [r.text for r in openai_server.requests if TASK_MARKERS["conditioned"] in r.text]
    assert conditioned and not any("Compute 5 * 5." in text for text in conditioned)


async def test_with_relabel_a_child_is_checked_for_leaks_by_its_verified_answer(tmp_path, openai_server):
    # the first child, (2 + 3) * (4 + 1), is stated as 26 (one too high), the parent's answer; its traces agree on 25
    parent = Problem(id="p", question="Compute (2 + 3) * (4 + 1) + 1.", answer="26")
    world = World(agents={}, wrong_child_answers=True)
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4, relabel=True)
    ledger = Ledger("p")
    await decompose(ctx, TreeNode(problem=parent), ledger)
    assert not [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    [first] = [r.problem for r in ledger.rejected if r.problem.id == "p.d0c0"]  # kept, then ineffective
    assert (first.answer, first.meta["relabeled_from"]) == ("25", "26")
    # without relabel the stated answer is the label: a leak, before any trace
    ctx, _ = context(openai_server, tmp_path / "b", {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4)
    ledger = Ledger("p")
    await decompose(ctx, TreeNode(problem=parent), ledger)
    [leak] = [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    assert leak.problem.id == "p.d0c0" and leak.reason.endswith("its answer '26' is the parent's ('26')")


async def test_a_retry_is_told_what_became_of_each_failed_subproblem(tmp_path, openai_server):
    # section 3.3: re-prompt with the failed attempts as negative context; each subproblem says why it failed
    world = World(agents={}, reveal_answer=True)
    ctx, _ = context(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=1, N=4)
    assert await decompose(ctx, TreeNode(problem=SEED), Ledger("a")) is False
    asks = [r.text for r in openai_server.requests if TASK_MARKERS["decompose"] in r.text]
    assert len(asks) == 2 and "outcome:" not in asks[0]
    failed = asks[1].split("<failed>", 1)[1]
    assert (
        "- question: Compute 5 * 5.\n  answer: 25\n  outcome: rejected: reveals the parent's answer: "
        "its answer '25' is the parent's ('25')"
    ) in failed
    assert "- question: Compute 2 + 3.\n  answer: 5\n  outcome: verified" in failed
    assert "Why it failed: ineffective: s 0.000 -> 0.000 when conditioned" in failed


async def test_answer_leaks_counted_in_metrics(tmp_path, openai_server):
    agents = {"s": Agent(capacity=1, boost=2)}
    _, config = context(openai_server, tmp_path, agents, world=World(agents={}, reveal_answer=True), Nd=1, N=4)
    metrics = await run_grow(config, [SEED], tmp_path / "run")
    # 2 attempts (Nd=1), each with one leaking child; both ineffective: the seed is dropped
    assert (metrics.answer_leaks, metrics.decompositions_effective, metrics.decompositions_attempted) == (2, 0, 2)
    assert (metrics.leaks_by_answer, metrics.leaks_by_question, metrics.leaks_by_solution) == (2, 0, 0)
    assert metrics.descendants == 0


@pytest.mark.parametrize(
    ("forms", "form"),
    [
        (["answer", "question", "solution"], "answer"),
        (["question", "solution"], "solution"),
        (["question"], None),
        ([], None),
    ],
)
async def test_each_leak_form_is_its_own_switch(tmp_path, openai_server, forms, form):
    # the third child, 5 * 5 = 25, reveals the parent's answer by its answer, and its worked solution states
    # it: rejected by the first form on, counted under it; with neither form on (the paper profile has none)
    # it is verified and shown to the student, and covering "*" it makes the decomposition effective
    world = World(agents={}, reveal_answer=True)
    agents = {"s": Agent(capacity=1, boost=2)}
    ctx, _ = context(openai_server, tmp_path, agents, world=world, Nd=0, N=4, answer_leaks=forms)
    root, ledger = TreeNode(problem=SEED), Ledger("a")
    effective = await decompose(ctx, root, ledger)
    leaks = [r for r in ledger.rejected if r.data.get("check") == ANSWER_LEAK]
    assert [r.data["form"] for r in leaks] == ([form] if form else [])
    counts = ledger.counts
    assert (counts.leaks_by_answer, counts.leaks_by_question, counts.leaks_by_solution) == tuple(
        int(form == f) for f in ("answer", "question", "solution")
    )
    assert effective is (form is None)
    assert ("Compute 5 * 5." in [c.problem.question for c in root.children]) is (form is None)


def test_reveals_by_answer_or_by_stating_it():
    parent = Problem(
        id="p",
        domain="finance",
        answer="0.625%",
        question="Which margin applies to term loans when the borrower's ratings fall in Level II?",
    )
    same = Problem(
        id="c1",
        domain="finance",
        answer="0.625 percent",
        question="What is the term loan margin in the pricing grid for the borrower's ratings?",
    )
    stated = Problem(
        id="c2",
        domain="finance",
        answer="5.625%",
        question="With a margin of 0.625% over a 5% base rate, what is the all-in rate?",
    )
    fine = Problem(id="c3", domain="finance", answer="Level II", question="Which pricing level do the ratings fall in?")
    assert reveals(same, parent) == "reveals the parent's answer: its answer '0.625 percent' is the parent's ('0.625%')"
    assert reveals(stated, parent) == "reveals the parent's answer: its question states '0.625%'"
    assert reveals(fine, parent) is None
    math_parent = Problem(id="m", question="Compute (2 + 3) * (4 + 1).", answer="25")
    assert reveals(Problem(id="x", question="Compute 25 - 5.", answer="20"), math_parent).endswith("states '25'")
    assert reveals(Problem(id="y", question="Compute 5 * 6.", answer="30"), math_parent) is None
    assert (
        reveals(
            Problem(id="z", question="Compute 2 + 3.", answer="5"),
            Problem(id="q", question="Compute 1 + 4.", answer="5"),
        )
        is not None
    )
    # the parent's answer is also one of its givens: a child that restates the given reveals nothing
    tank = Problem(
        id="t",
        question="A tank holds 25 liters. It loses 5 liters and then gains 5 liters. How many liters does it hold now?",
        answer="25",
    )
    assert (
        reveals(
            Problem(id="t1", question="A tank holds 25 liters and loses 5 liters. How many are left?", answer="20"),
            tank,
        )
        is None
    )
    assert (
        reveals(Problem(id="t2", question="A tank holds 20 liters and gains 5. How many liters?", answer="25"), tank)
        is not None
    )  # by its answer, still
    floor = Problem(
        id="f",
        domain="finance",
        answer="5.00%",
        question="Term SOFR is 5.00% and the Floor is 3.00%; the rate is the greater of the two. What is it?",
    )
    assert (
        reveals(
            Problem(
                id="f1",
                domain="finance",
                answer="2.00%",
                question="By how much does a Term SOFR of 5.00% exceed a Floor of 3.00%?",
            ),
            floor,
        )
        is None
    )
    # measured: a decomposition child positing a 2.5% SOFR and a 1.5% margin was rejected as stating a
    # parent's "2%" (the comparer rounds either to the gold's precision); stating is the same value
    margin = Problem(
        id="d",
        domain="finance",
        answer="2%",
        question="The Default Rate for a SOFR Loan is how many percentage points above Adjusted Term SOFR?",
    )
    posits = Problem(
        id="d1",
        domain="finance",
        answer="6.0%",
        question="What is the Default Rate if Adjusted Term SOFR is 2.5% and the Applicable Margin is 1.5%?",
    )
    assert reveals(posits, margin) is None
    assert reveals(posits.model_copy(update={"question": posits.question.replace("1.5%", "2.0%")}), margin) == (
        "reveals the parent's answer: its question states '2%'"
    )


# a root nobody fails ----------------------------------------------------------------------------------
async def test_a_question_giving_its_own_answer_is_rejected_before_any_trace(tmp_path, openai_server):
    def problem(question: str, answer: str) -> Problem:
        return Problem(id="c", question=question, answer=answer, domain="math")

    copied = problem("A farm has 15 animals and 44 legs. How many cows are there? (answer 7)", "7")
    assert gives_own_answer(copied) == "the question gives its own answer ('7')"
    assert gives_own_answer(problem("How much change is due? (Answer: 18.5)", "18.5"))
    assert gives_own_answer(problem("Answer this: 7 boxes hold 3 pens each. How many pens?", "21")) is None
    assert gives_own_answer(problem("Of 70 answers, 7 were wrong. How many were right?", "63")) is None
    # the answer as the question's only figure: nothing to work out (short counts aside)
    assert "only figure" in gives_own_answer(problem("If x is 12 more than nothing, what is x?", "12"))
    assert (
        gives_own_answer(problem("Ben is 5 years older than Cara, and their ages sum to 35. How old is Ben?", "20"))
        is None
    )
    assert gives_own_answer(problem("Ben is 12. Cara is 12 too. Add 12 to Ben's age.", "24")) is None
    assert gives_own_answer(problem("A bag holds 3 pens. How many pens are in the bag?", "3")) is None

    def finance(question: str, answer: str) -> Problem:
        return Problem(id="f", question=question, answer=answer, domain="finance")

    restating = finance(
        "If an Event of Default occurs, and the default rate is 2.0% per annum above the rates otherwise "
        "payable, what is the total interest rate charged on the Loans?",
        "2.0%",
    )  # a qualified one, once
    assert "only figure is its own answer ('2.0%')" in gives_own_answer(restating)
    assert gives_own_answer(finance("If the benchmark rate floor is 5%, what is the Floor rate?", "5.00")) is not None
    assert gives_own_answer(finance("Term SOFR is 0.30% and the Floor is 0.50%. What rate applies?", "0.50%")) is None
    assert (
        gives_own_answer(finance("If the Loans otherwise bear 9.00%, what rate applies during a default?", "11.00%"))
        is None
    )
    world = World(agents={})
    openai_server.handler = world
    world.agents = {"teacher": Agent(), "target": Agent(), "s": Agent()}
    config = world_config(openai_server.base_url, ["teacher"], ["s"], "target", str(tmp_path / "c.sqlite"))
    ctx, ledger = Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "c.sqlite"))), Ledger("c")
    leaked = problem("Compute 2 + 3. (answer: 5)", "5")
    assert await verified_node(ctx, leaked, ledger, stage="leaf", path="0") is None
    assert ledger.rejected[0].data["check"] == "own_answer" and openai_server.request_count == 0
    # an answer that is a sentence (the 1.5B answered a Post-Default Rate lookup with the clause; it qualified)
    clause = finance(
        "What would be the Post-Default Rate for Realty Income Corporation's principal of any Class of Loans?",
        "The interest rate otherwise applicable to such Class of Loans plus an additional two percent (2.0%) per annum",
    )
    assert unworkable(clause) == (
        "answer_form",
        "the answer is a sentence of 18 words, not one short value a reward can check",
    )
    assert (
        unworkable(
            finance("What fee is due each quarter on $500,000,000 at 1.00% a year?", "$1,250,000 per fiscal quarter")
        )
        is None
    )
    # measured: a variant asked for "the interest rate otherwise applicable ... after the addition of the
    # Default Rate" with no rate given, answered "x + 2.0%", qualified (the 0.5B wrote "2.0%" half the time)
    symbolic = finance(
        "What is the interest rate otherwise applicable to the principal of the Loans after the addition "
        "of the Default Rate?",
        "x + 2.0%",
    )
    assert unworkable(symbolic) == (
        "answer_form",
        "the answer is a formula over an unknown ('x +'), not one value a reward can check",
    )
    assert unworkable(finance("What rating must the Borrower keep?", "A-1")) is None
    assert unworkable(problem("Simplify (x + 1)^2 - 1.", "x^2 + 2x")) is None  # math answers may be formulas
    # measured: "9 slices, 6 friends each eat 3: how many are left?" -9 qualified (program and traces agreed)
    slices = problem("A pizza is cut into 9 slices. 6 friends each eat 3 slices. How many slices are left?", "-9")
    assert unworkable(slices) == (
        "answer_form",
        "the question asks how many and the answer is negative ('-9'): its quantities contradict each other",
    )
    assert unworkable(problem("How many degrees does the temperature change from 5 to -3?", "8")) is None
    assert unworkable(problem("What is the temperature after it falls 8 degrees from 5?", "-3")) is None
    assert unworkable(copied)[0] == "own_answer"
    assert await verified_node(ctx, clause, ledger, stage="leaf", path="0") is None
    assert ledger.rejected[1].data["check"] == "answer_form" and openai_server.request_count == 0


async def test_seed_too_easy_is_its_own_outcome(tmp_path, openai_server):
    # "Compute 2 + 3." has 1 operation: the weakest student (capacity 1) solves it 4/4
    agents = {"s": Agent(capacity=1, partial=0.875)}
    _, config = context(openai_server, tmp_path, agents, N=4, N_leaf=2, L=100)
    easy = Problem(id="e", question="Compute 2 + 3.", answer="5")
    metrics = await run_grow(config, [easy, SEED], tmp_path / "run")
    assert metrics.seeds_too_easy == 1
    tree = json.loads((tmp_path / "run" / "trees" / "e.json").read_text())
    [decision] = [d for d in tree["decomposition"]["root"]["decisions"] if d["stage"] == "decompose"]
    assert decision["reason"] == "seed too easy: weakest student s already solves it (accuracy 1.000); kept as a leaf"
    assert decision["data"] == {"too_easy": True}
    seed_a = json.loads((tmp_path / "run" / "trees" / "a.json").read_text())
    assert not any(d["data"].get("too_easy") for d in seed_a["decomposition"]["root"]["decisions"])
    # its roots (harder variants of the seed itself) are reported apart, and still counted with the rest
    roots = {n["problem"]["id"] for t in tree["synthetic"] for n in [t["root"]] if n.get("target")}
    assert metrics.too_easy_roots == len(roots) and metrics.too_easy_roots <= metrics.descendants
    assert metrics.too_easy_qualified <= metrics.too_easy_roots


async def test_a_too_easy_seed_is_decomposed_in_the_paper_profile(tmp_path, openai_server):
    # stages.easy_seeds: decompose (the paper decomposes every verified seed): the teacher is asked for a
    # decomposition, the effectivity test conditions the weakest student, S_n = [s]
    agents = {"s": Agent(capacity=1, partial=0.875)}
    ctx, _ = context(openai_server, tmp_path, agents, N=4, easy_seeds="decompose", Nd=0)
    root = TreeNode(problem=Problem(id="e", question="Compute 2 + 3.", answer="5"))
    await decompose(ctx, root, Ledger("e"))
    info, attempt = [d for d in root.decisions if d.stage == "decompose"][:2]
    assert info.data == {"too_easy": True} and info.reason.endswith("decomposed like any other, S_n = [s]")
    assert attempt.data["students"] == ["s"] and attempt.data["unconditioned"] == 1.0
    assert [r for r in openai_server.requests if TASK_MARKERS["decompose"] in r.text]


# composition: Nc trials, and the parent's solution in the pattern --------------------------------------
def test_trials_cycle_through_a_small_pool():
    assert trials([1, 1, 1], 4) == [(0, 0, 0)] * 4
    assert trials([2, 1], 3) == [(0, 0), (1, 0), (0, 0)]
    assert trials([2, 2], 3) == [(0, 0), (0, 1), (1, 0)]


async def test_compose_retries_one_combination_with_the_parents_solution(tmp_path, openai_server):
    # leaf variants of 2 ops are too easy (0.875 > 0.8): each pool holds one variant, one combination;
    # the Nc=3 trials all use it, each a fresh teacher sample (seed 0, 1, 2)
    ctx, _ = context(
        openai_server,
        tmp_path,
        {"s": Agent(capacity=1, boost=2, partial=0.875)},
        N_leaf=2,
        Nc=3,
        N=8,
        compose_all_trials=True,
    )
    trace, _ = await teacher_trace(ctx, SEED)
    root, ledger = TreeNode(problem=SEED, trace=trace), Ledger("a")
    assert await decompose(ctx, root, ledger)
    versions, orphans = await synthesize(ctx, root, ledger)
    asks = [r for r in openai_server.requests if TASK_MARKERS["compose"] in r.text]
    assert sorted(r.body.get("seed") for r in asks) == [0, 1, 2]  # concurrent trials: any arrival order
    assert all(f"<parent_solution>\n{trace.text}\n</parent_solution>" in r.text for r in asks)
    assert [v.problem.id for v in versions] == ["a.s0", "a.s1", "a.s2"] and orphans == []
    assert root.decisions[-1].reason == "kept 3 of 3 composition trials (1 distinct combinations; up to 3)"


# the novelty guard -----------------------------------------------------------------------------------
def test_novelty_similarity_and_restatement():
    seed = Problem(id="s", question="How many outfits can be made from 3 shirts, 4 pants and 5 hats?", answer="60")
    reworded = Problem(
        id="r",
        answer="60",
        question="How many outfits can be made from 3 shirts, 4 pants and 5 hats "
        "if each type of clothing must be used exactly once?",
    )
    new = Problem(
        id="n",
        answer="60",
        question="A diner offers 4 starters, 3 mains and 5 desserts. How many three-course meals are possible?",
    )
    other_answer = reworded.model_copy(update={"answer": "61"})
    settings = NoveltySettings()
    assert similarity(seed.question, reworded.question) == 1.0
    assert similarity("Compute 2 + 3 + 1 + 2.", "Compute 4 + 1 + 1 + 2.") == 7 / 9
    assert restated(reworded, [("seed", seed)], settings) == (
        "restates its seed s: same answer '60', text similarity 1.00 >= 0.85"
    )
    assert restated(new, [("seed", seed)], settings) is None  # same answer, new text
    assert restated(other_answer, [("seed", seed)], settings) is None  # same text frame, new answer
    assert restated(reworded, [("seed", seed)], NoveltySettings(enabled=True, max_similarity=1.0)) is not None


def test_the_same_question_about_another_document_is_no_restatement():
    # a lookup re-grounded on another agreement whose figure happens to equal its source's is a new
    # problem; on the same document (a sibling re-grounded there too) it restates
    def floor(
        id: str, company: str, doc: str, question: str = "Under {}'s credit agreement, what is the Floor?"
    ) -> Problem:
        return Problem(
            id=id,
            domain="finance",
            answer="0.00%",
            question=question.format(company),
            entity=f"{company} Inc.",
            snippet=Snippet(text="\u201cFloor\u201d means a rate of interest equal to 0.00%.", doc_id=doc),
        )

    source, moved, twin = floor("s", "Acme", "acme"), floor("m", "Apex", "apex"), floor("t", "Apex", "apex")
    settings = NoveltySettings(seed_coverage=1.0)  # the seed's n-gram copy check aside
    assert restated(moved, [("source", source)], settings) is None
    assert restated(twin, [("sibling", moved)], settings) == (
        "restates its sibling m: same answer '0.00%', text similarity 1.00 >= 0.85"
    )
    # measured: the 1.5B "re-grounded" a self-contained question on two other agreements by copying it; a
    # question that names no entity asks the same on every document
    copied = "The default rate is 2.0% above the rate otherwise payable of 0.5%. What is the total rate?"
    plain = [
        floor(i, c, d, copied).model_copy(update={"answer": "2.5%"})
        for i, c, d in (("s", "Acme", "acme"), ("m", "Apex", "apex"))
    ]
    assert restated(plain[1], [("source", plain[0])], settings) == (
        "restates its source s: same answer '2.5%', text similarity 1.00 >= 0.85"
    )
    # measured too: a variant that applies its passage's margin to a rate it gives, naming no entity,
    # re-grounded on an agreement with the same margin: the same words and answer, but each answer takes
    # the margin from its own passage, so it asks about another document
    applied = "If the interest rate otherwise applicable to the principal of the Loans is 5%, what is the Default Rate?"
    needs = [
        floor(i, c, d, applied).model_copy(update={"answer": "7.0%"})
        for i, c, d in (("s", "Acme", "acme"), ("m", "Apex", "apex"))
    ]
    assert restated(needs[1], [("source", needs[0])], settings) is None
    assert restated(needs[1].model_copy(update={"id": "t"}), [("sibling", needs[1])], settings) is not None


def test_a_variant_that_copies_its_seeds_wording_is_no_new_problem_and_export_agrees():
    # measured: the 1.5B's "harder" variant of the orchard seed changed only its last number (another
    # answer, so no restatement); it was counted qualified, and export dropped it as a copy of the seed
    from finmbs.export.decontaminate import Decontaminator
    from finmbs.records import Provenance

    def variant(seed: Problem, question: str, answer: str) -> Problem:
        return Problem(
            id=f"{seed.id}.h0v0", question=question, answer=answer, provenance=Provenance(seed_id=seed.id, stage="leaf")
        )

    orchard = Problem(
        id="orchard",
        answer="60",
        question="A farmer has 5 rows of apple trees with 8 trees in each "
        "row. Each tree gives 30 apples, and he sells the apples in bags of 20. How many bags can he fill?",
    )
    ages = Problem(
        id="ages",
        answer="17",
        question="Ben is 4 years older than Cara, and the sum of their ages is 30. How old is Ben?",
    )
    copied = variant(orchard, orchard.question.replace("bags of 20", "bags of 30"), "40")
    reset = variant(
        orchard,
        "A farmer plants 7 rows of pear trees with 9 trees in each row, and each tree gives 24 "
        "pears. He keeps 100 pears and sells the rest in crates of 40. How many full crates "
        "can he sell?",
        "35",
    )
    short = variant(ages, "Ben is 5 years older than Cara, and the sum of their ages is 35. How old is Ben?", "20")
    settings = NoveltySettings()
    assert restated(copied, [("source", orchard)], settings) == (
        "copies its seed orchard: reproduces 68% of its 13-word sequences (>= 50%, what export drops as contamination)"
    )
    assert restated(reset, [("source", orchard)], settings) is None
    assert restated(short, [("source", ages)], settings) is None  # no 13 words of the seed in a row
    assert restated(copied, [("source", ages)], settings) is None  # only the problem's own seed is compared
    export = Decontaminator({}, [orchard, ages])
    assert [export.check(p) is not None for p in (copied, reset, short)] == [True, False, False]
    loose = NoveltySettings(seed_coverage=0.7)
    assert restated(copied, [("source", orchard)], loose) is None


async def test_a_variant_restating_its_leaf_is_rejected_before_any_trace(tmp_path, openai_server):
    agents = {"teacher": Agent(parrot=True), "s": Agent(capacity=1)}
    ctx, _ = context(openai_server, tmp_path, agents, N_leaf=2, R=1, N=4)
    ledger = Ledger("a")
    kept = await harder_leaves(ctx, TreeNode(problem=SEED, path="0"), ledger)
    assert [n.problem.question for n in kept] == ["Compute (2 + 3) * (4 + 1) + 1 + 2."]
    [rejection] = ledger.rejected
    assert rejection.stage == "novelty" and rejection.problem.id == "a.h0v0"
    assert rejection.reason == "restates its source a: same answer '25', text similarity 1.00 >= 0.85"
    # no trace, no student rollout was paid for the restatement
    solved = [r.text for r in openai_server.requests if TASK_MARKERS["leaf"] not in r.text]
    assert solved and not any("Now, Compute" in text for text in solved)


async def test_a_leaf_retry_round_is_a_fresh_sample_or_told_what_was_rejected(tmp_path, openai_server):
    # round 0 keeps nothing (a restatement; a variant the weakest student solves), so round 1 is asked.
    # As in the paper, it is a fresh sample of the same prompt; with stages.leaf_feedback it also lists
    # both rejections as negative context. The first round's prompt never carries any.
    agents = {"teacher": Agent(parrot=True), "s": Agent(capacity=99)}
    for feedback in (False, True):
        openai_server.reset()
        ctx, _ = context(openai_server, tmp_path / str(feedback), agents, N_leaf=2, R=2, N=4, leaf_feedback=feedback)
        assert await harder_leaves(ctx, TreeNode(problem=SEED, path="0"), Ledger("a")) == []
        asks = [r for r in openai_server.requests if TASK_MARKERS["leaf"] in r.text]
        assert len(asks) == 2 and "rejected_variants" not in asks[0].text
        if not feedback:
            assert asks[1].text == asks[0].text and asks[1].body != asks[0].body  # another sample index
            continue
        told = asks[1].text.split("<rejected_variants>", 1)[1]
        assert (
            "- question: Now, Compute (2 + 3) * (4 + 1).\n  answer: 25\n  rejected: restates its source a: "
            "same answer '25', text similarity 1.00 >= 0.85"
        ) in told
        assert (
            "- question: Compute (2 + 3) * (4 + 1) + 1 + 2.\n  answer: 28\n  rejected: too easy: weakest student s "
            "accuracy 1.000 > alpha 0.8"
        ) in told


def test_a_grounded_leaf_is_told_how_a_lookup_becomes_harder(tmp_path, openai_server):
    ctx, _ = context(openai_server, tmp_path, {"s": Agent()})
    floor = Problem(
        id="f",
        question="Under Acme's credit agreement, what is the Floor?",
        answer="0.50%",
        domain="finance",
        snippet=Snippet(text="\u201cFloor\u201d means a rate of interest equal to 0.50%.", doc_id="acme"),
    )
    grounded, plain = (leaf_prompt(ctx, TreeNode(problem=p, path="0"), Ledger(p.id)) for p in (floor, SEED))
    assert "hypothetical input" in grounded and "means a rate of interest equal to 0.50%" in grounded
    assert "hypothetical input" not in plain and "<document>" not in plain


async def test_novelty_guard_can_be_turned_off(tmp_path, openai_server):
    agents = {"s": Agent(capacity=1, boost=2, partial=0.875)}
    _, config = context(openai_server, tmp_path, agents, N_leaf=2, Nc=3, N=8, L=100, compose_all_trials=True)
    guarded = await run_grow(config, [SEED], tmp_path / "on")
    # three identical composed roots: the first is calibrated, the other two restate it
    assert (guarded.descendants, guarded.novelty_rejected, guarded.gated_roots) == (1, 2, 2)
    # a folder whose tree files predate the stored counts: its rejection rows, replayed, give the same counts
    for path in (tmp_path / "on" / "trees").iterdir():
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "counts"}))
    older, fields = collect_metrics(RunDir(tmp_path / "on"), [SEED], "mbs"), set(SeedCounts.model_fields)
    assert older.model_dump(include=fields) == guarded.model_dump(include=fields)
    off = config.model_copy(update={"novelty": NoveltySettings(enabled=False)})
    unguarded = await run_grow(off, [SEED], tmp_path / "off")
    assert (unguarded.descendants, unguarded.novelty_rejected) == (3, 0)


# the command line -----------------------------------------------------------------------------------
def test_grow_keep_all_option(tmp_path, openai_server):
    _, config = context(
        openai_server, tmp_path, {"s": Agent(capacity=1, boost=2, partial=0.875)}, N_leaf=2, Nc=1, N=8, L=100
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (tmp_path / "seeds.jsonl").write_text(SEED.model_dump_json(include={"id", "question", "answer"}) + "\n")
    args = ["grow", "--seeds", str(tmp_path / "seeds.jsonl"), "--config", str(tmp_path / "config.yaml")]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "all"), "--keep", "all"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "all" / "metrics.json").read_text())
    # the composed root (7 ops: target 4/8) and the three 3-op leaf variants (target 8/8, stale)
    assert (metrics["keep"], metrics["descendants"], metrics["qualified"]) == ("all", 1, 1)
    assert (metrics["other_descendants"], metrics["other_qualified"]) == (3, 0)
    assert yaml.safe_load((tmp_path / "all" / "config.yaml").read_text())["stages"]["keep"] == "all"
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "d"), "--method", "mbs", "--match-budget", str(tmp_path / "all")]
    )
    assert result.exit_code == 2 and "--match-budget is for --method direct" in result.output
    assert list(read_jsonl(tmp_path / "all" / "qualified.jsonl"))[0]["meta"]["kind"] == "root"
