"""Each decision rule of each MBS stage, in the scripted arithmetic world on a real HTTP server.

The world (finmbs/testing/world.py): an agent solves a problem with at most `capacity` operations,
gets `partial` accuracy at capacity+1, fails beyond; worked examples covering the problem's
operators raise its capacity by `boost`. Expectations below are worked out by hand from these rules.
"""

from __future__ import annotations

import pytest

from finmbs.llm import Gateway
from finmbs.mbs.calibrate import calibrate, difficulty
from finmbs.mbs.compose import combinations, synthesize
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import decompose
from finmbs.mbs.leaves import harder_leaves
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Problem, Rollout, TreeNode
from finmbs.resources import prompt_template
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config

SEED = Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25")


def setup(server, tmp_path, agents, *, teachers=("teacher",), students=("s",), world=None, **stages):
    world = world or World(agents={})
    world.agents = {"teacher": Agent(), "target": Agent(), **agents}
    server.handler = world
    config = world_config(
        server.base_url, list(teachers), list(students), "target", str(tmp_path / "cache.sqlite"), **stages
    )
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite"))), world


def node(problem: Problem = SEED) -> TreeNode:
    return TreeNode(problem=problem, path="0")


def test_world_markers_are_in_the_prompts():
    for task, marker in TASK_MARKERS.items():
        name = {
            "compose": "compose_parent",
            "leaf": "leaf_harder",
            "direct": "direct_synthesis",
            "conditioned": "solve_conditioned",
            "well_posed": "judge_well_posed",
        }.get(task, task)
        assert marker in prompt_template(name)


async def test_traces_try_teachers_in_order_up_to_nt(tmp_path, openai_server):
    ctx, _ = setup(
        openai_server,
        tmp_path,
        {"weak": Agent(capacity=2), "strong": Agent(capacity=3)},
        teachers=("weak", "strong"),
        Nt=2,
    )
    trace, why = await teacher_trace(ctx, SEED)  # 3 operations: weak fails twice, strong verifies
    assert trace.verified and trace.model == "strong" and trace.answer == "25" and why == ""
    assert [r.model for r in openai_server.requests] == ["weak", "weak", "strong"]
    hard = Problem(id="h", question="Compute (2 + 3) * (4 + 1) - 6.", answer="19")
    trace, why = await teacher_trace(ctx, hard)  # 4 operations: nobody verifies after 2 x 2 tries
    assert trace is None and why.startswith("no verified trace after 2x2 tries")
    assert why.count("'20'") == 4 and openai_server.request_count == 3 + 4


async def test_effectivity_over_every_evaluated_student(tmp_path, openai_server):
    # weakest -> strongest: s3 0/8, s2 0/8 (3 ops = capacity+1, partial 0), s1 8/8 -> S_n = {s3, s2}
    agents = {"s1": Agent(capacity=4), "s2": Agent(capacity=2, boost=0), "s3": Agent(capacity=1, boost=0)}
    ctx, _ = setup(openai_server, tmp_path, agents, students=("s1", "s2", "s3"), Nd=1, N=8)
    root, ledger = node(), Ledger("a")
    assert await decompose(ctx, root, ledger) is False  # no student of S_n gains from the children: dropped
    assert root.student_accuracy == {"s3": 0.0, "s2": 0.0, "s1": 1.0}
    assert root.conditioned_accuracy == {"s3": 0.0, "s2": 0.0}  # s1 (accuracy > 0) is not in S_n
    assert [d.outcome for d in root.decisions] == ["rejected", "rejected", "rejected"]
    assert root.decisions[0].reason == "ineffective: s3 0.000 -> 0.000, s2 0.000 -> 0.000 when conditioned"
    assert root.decisions[-1].reason == "no effective decomposition after 1 retries"
    assert [r.stage for r in ledger.rejected] == ["effectivity"] * 6 and root.children == []

    # the children help the weakest student only (capacity 1 + 2 covers 3 operations): effective, since
    # conditioning raises accuracy for at least one S in S_n (section 3.3), not only for s2
    agents["s3"] = Agent(capacity=1, boost=2)
    ctx, _ = setup(openai_server, tmp_path / "b", agents, students=("s1", "s2", "s3"), Nd=1, N=8)
    root = node()
    assert await decompose(ctx, root, Ledger("a")) is True
    assert root.conditioned_accuracy == {"s3": 1.0, "s2": 0.0}
    decision = root.decisions[0]
    assert decision.outcome == "accepted" and decision.reason == (
        "effective: s3 0.000 -> 1.000, s2 0.000 -> 0.000 with 3 children"
    )
    assert decision.data["student"] == "s2" and decision.data["students"] == ["s3", "s2"]
    assert decision.data["conditioned_by_student"] == {"s3": 1.0, "s2": 0.0} and decision.data["skills"] == ["*", "+"]
    assert [c.problem.question for c in root.children] == ["Compute 2 + 3.", "Compute 4 + 1.", "Compute 5 * 6."]
    # children: the weakest student already solves each (1 operation), so they stay leaves
    assert all(c.decisions[-1].reason.startswith("leaf: weakest student s3 already solves it") for c in root.children)


async def test_all_students_at_zero_are_all_evaluated(tmp_path, openai_server):
    agents = {"s1": Agent(capacity=1, boost=2), "s2": Agent(capacity=0)}
    # D=1: the children stay leaves (s2 fails them too, and their own decompositions could never help it:
    # they would be dropped, and with them the root)
    ctx, _ = setup(openai_server, tmp_path, agents, students=("s1", "s2"), N=4, D=1)
    root = node()
    assert await decompose(ctx, root, Ledger("a"))
    assert root.student_accuracy == {"s2": 0.0, "s1": 0.0} and root.conditioned_accuracy == {"s2": 0.0, "s1": 1.0}


async def test_retries_carry_failed_attempts_as_negative_context(tmp_path, openai_server):
    world = World(agents={}, bad_decompositions=2)
    ctx, _ = setup(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=3, N=4)
    root = node()
    assert await decompose(ctx, root, Ledger("a"))
    outcomes = [(d.outcome, d.data.get("attempt")) for d in root.decisions]
    assert outcomes == [("rejected", 0), ("rejected", 1), ("accepted", 2)]
    asks = [r.text for r in openai_server.requests if TASK_MARKERS["decompose"] in r.text]
    assert [a.count("<failed>") for a in asks] == [0, 1, 2]
    assert "Compute 2 - 1." in asks[2] and "ineffective: s 0.000 -> 0.000 when conditioned" in asks[2]
    # with one retry only, the same world drops the node
    ctx, _ = setup(
        openai_server,
        tmp_path / "b",
        {"s": Agent(capacity=1, boost=2)},
        world=World(agents={}, bad_decompositions=2),
        Nd=1,
        N=4,
    )
    assert await decompose(ctx, node(), Ledger("a")) is False


async def test_unverified_children_and_malformed_json(tmp_path, openai_server):
    world = World(agents={}, wrong_child_answers=True)  # the paper's trace rule (programs: test_programs_engine.py)
    ctx, _ = setup(openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4, programs=False)
    root, ledger = node(), Ledger("a")
    assert await decompose(ctx, root, ledger) is False
    assert root.decisions[0].reason == "no subproblem verified"
    assert {r.stage for r in ledger.rejected} == {"decompose"} and len(ledger.rejected) == 3
    assert all(r.reason.startswith("unverified: no verified trace") for r in ledger.rejected)

    world = World(agents={}, malformed={"decompose"})
    ctx, _ = setup(openai_server, tmp_path / "b", {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4)
    root = node()
    assert await decompose(ctx, root, Ledger("a"))  # the repair re-ask recovers the decomposition
    usage = ctx.gateway.usage["teacher"]
    assert usage.parse_failures == 1 and usage.repairs == 1 and len(root.children) == 3


@pytest.mark.parametrize(
    "depth,expected",
    [(0, []), (1, ["0.0:depth", "0.1:depth"]), (2, ["0.0:effective", "0.0.0:depth", "0.0.1:depth", "0.1:solved"])],
)
async def test_depth_limit(tmp_path, openai_server, depth, expected):
    seed = Problem(id="d", question="Compute ((1 + 2) * 3 + 4) * 5.", answer="65")
    ctx, _ = setup(openai_server, tmp_path, {"s": Agent(capacity=1, boost=3)}, D=depth, N=4)
    root = node(seed)
    assert await decompose(ctx, root, Ledger("d"))
    kinds = []
    for n in list(root.walk())[1:]:
        reason = n.decisions[-1].reason
        kind = "depth" if "depth limit" in reason else "solved" if "already solves" in reason else "effective"
        kinds.append(f"{n.path}:{kind}")
    assert kinds == expected
    assert root.decisions[-1].reason == ("leaf: depth limit D=0" if depth == 0 else root.decisions[-1].reason)


async def test_leaf_alpha_threshold(tmp_path, openai_server):
    leaf = node(Problem(id="l", question="Compute 2 + 3.", answer="5"))
    # variant 0 has 2 operations: weakest accuracy = partial; variant 1 has 3 operations: 0
    ctx, _ = setup(openai_server, tmp_path, {"s": Agent(capacity=1, partial=0.875)}, N_leaf=2, N=8)
    ledger = Ledger("l")
    kept = await harder_leaves(ctx, leaf, ledger)
    assert [k.problem.question for k in kept] == ["Compute 2 + 3 + 1 + 2."]
    assert kept[0].student_accuracy == {"s": 0.0} and kept[0].mirrors == "l"
    assert [(r.problem.id, r.reason) for r in ledger.rejected] == [
        ("l.h0v0", "too easy: weakest student s accuracy 0.875 > alpha 0.8")
    ]
    ctx, _ = setup(openai_server, tmp_path / "b", {"s": Agent(capacity=1, partial=0.75)}, N_leaf=2, N=8)
    assert len(await harder_leaves(ctx, leaf, Ledger("l"))) == 2  # 0.75 <= 0.8 is kept


async def test_leaf_rounds_move_on_to_the_next_teacher(tmp_path, openai_server):
    leaf = node(Problem(id="l", question="Compute 2 + 3.", answer="5"))
    agents = {"lazy": Agent(lazy=True), "s": Agent(capacity=1)}
    ctx, _ = setup(openai_server, tmp_path, agents, teachers=("lazy", "teacher"), N_leaf=2, R=2, N=4)
    kept = await harder_leaves(ctx, leaf, Ledger("l"))
    assert [k.problem.id for k in kept] == ["l.h1v0", "l.h1v1"]
    assert [d.reason for d in leaf.decisions] == [
        "round 0 (lazy): kept 0 of 2 variants",
        "round 1 (teacher): kept 2 of 2 variants",
    ]
    ctx, _ = setup(openai_server, tmp_path / "b", agents, teachers=("lazy", "teacher"), N_leaf=2, R=1, N=4)
    leaf = node(Problem(id="l", question="Compute 2 + 3.", answer="5"))
    assert await harder_leaves(ctx, leaf, Ledger("l")) == [] and len(leaf.decisions) == 1


async def test_with_one_teacher_each_leaf_round_and_decomposition_retry_is_a_fresh_sample(tmp_path, openai_server):
    leaf = node(Problem(id="l", question="Compute 2 + 3.", answer="5"))
    ctx, _ = setup(
        openai_server,
        tmp_path,
        {"lazy": Agent(lazy=True), "s": Agent(capacity=1)},
        teachers=("lazy",),
        N_leaf=2,
        R=2,
        N=4,
    )
    assert await harder_leaves(ctx, leaf, Ledger("l")) == []
    asks = [r for r in openai_server.requests if TASK_MARKERS["leaf"] in r.text]
    assert len(asks) == 2 and [r.body.get("seed") for r in asks] == [0, 1]  # round 1 is not round 0 replayed
    world = World(agents={}, bad_decompositions=5)
    ctx, _ = setup(openai_server, tmp_path / "b", {"s": Agent(capacity=1, boost=2)}, world=world, Nd=2, N=4)
    assert await decompose(ctx, node(), Ledger("a")) is False
    asks = [r for r in openai_server.requests if TASK_MARKERS["decompose"] in r.text]
    assert [r.body.get("seed") for r in asks] == [0, 1, 2]


async def test_relabel_needs_relabel_votes_agreeing_traces(tmp_path, openai_server):
    # the world's sample rule at accuracy 0.34: traces 0 and 1 slip alike (26), trace 2 is right (25)
    slips = {"teacher": Agent(table={3: 0.34})}
    stated = SEED.model_copy(update={"answer": "27"})
    ctx, _ = setup(openai_server, tmp_path / "a", slips, Nt=2, relabel=True, relabel_votes=2)
    trace, why = await teacher_trace(ctx, stated, relabel=True)  # two votes: the shared slip becomes the label
    assert trace.answer == "26" and why == "relabeled: stated answer '27', all 2 traces of teacher answer '26'"
    ctx, _ = setup(openai_server, tmp_path / "b", slips, Nt=2, relabel=True, relabel_votes=3)
    before = openai_server.request_count
    trace, why = await teacher_trace(ctx, stated, relabel=True)  # the third vote disagrees: no label
    assert trace is None and openai_server.request_count - before == 3
    assert why == (
        "no verified trace after 1x2 (+1 relabel votes) tries; answers: "
        "teacher#0: '26' (stop), teacher#1: '26' (stop), teacher#2: '25' (stop)"
    )
    # a vote that verifies the stated answer verifies it; without that vote, 26 would have been the label
    trace, why = await teacher_trace(ctx, SEED, relabel=True)
    assert trace.answer == "25" and trace.verified and why == ""
    # three agreeing votes relabel
    ctx, _ = setup(
        openai_server, tmp_path / "c", {"teacher": Agent(table={3: 0.0})}, Nt=2, relabel=True, relabel_votes=3
    )
    trace, why = await teacher_trace(ctx, stated, relabel=True)
    assert trace.answer == "26" and why == "relabeled: stated answer '27', all 3 traces of teacher answer '26'"
    # without relabel, the votes are never drawn
    ctx, _ = setup(openai_server, tmp_path / "d", slips, Nt=2, relabel_votes=3)
    before = openai_server.request_count
    trace, why = await teacher_trace(ctx, stated)
    assert trace is None and openai_server.request_count - before == 2 and "relabel votes" not in why


async def test_relabel_takes_the_answer_every_trace_agrees_on(tmp_path, openai_server):
    # the teacher states each child's answer one too high; its traces all compute the true value
    world = World(agents={}, wrong_child_answers=True)
    ctx, _ = setup(
        openai_server, tmp_path, {"s": Agent(capacity=1, boost=2)}, world=world, Nd=0, N=4, relabel=True, programs=False
    )  # relabel by traces alone (with programs: test_programs_engine.py)
    root, ledger = node(), Ledger("a")
    assert await decompose(ctx, root, ledger)  # the relabeled children make the decomposition effective
    assert ledger.rejected == [] and len(root.children) == 3
    for child in root.children:
        stated, fixed = child.problem.meta["relabeled_from"], child.problem.answer
        assert int(stated) == int(fixed) + 1 and child.trace.answer == fixed
        assert child.decisions[0].reason == (
            f"relabeled: stated answer {stated!r}, all 4 traces of teacher answer {fixed!r}"
        )  # Nt 4, the default
    # traces that disagree, or one cut at the length limit, never relabel
    from finmbs.mbs.traces import consensus
    from finmbs.records import Rollout

    def said(answer, finish="stop"):
        return Rollout(text="", extracted_answer=answer, reward=0.0, finish_reason=finish)

    problem = Problem(id="p", question="Compute 2 + 3.", answer="6")
    assert consensus(problem, [said("5"), said("5.0")]) == "5"
    assert consensus(problem, [said("5"), said("4")]) is None
    assert consensus(problem, [said("5"), said("5", "length")]) is None
    assert consensus(problem, [said("5")]) is None and consensus(problem, [said(None), said(None)]) is None
    # an answer with an unknown in it (traces that never solved for the value) is no label
    assert consensus(problem, [said("0.0325P"), said("0.0325P")]) is None
    assert consensus(problem, [said("3x+2"), said("3x+2")]) is None
    assert consensus(problem, [said("\\frac{16}{7}"), said("16/7")]) == "\\frac{16}{7}"


def test_combinations_lowest_index_sum_first():
    assert combinations([2, 2, 2], 3) == [(0, 0, 0), (0, 0, 1), (0, 1, 0)]
    assert len(combinations([1, 2], 10)) == 2


@pytest.mark.parametrize("acc_at_5,kept", [(0.75, 1), (0.625, 3)])
async def test_compose_alpha_parent_and_nc(tmp_path, openai_server, acc_at_5, kept):
    # leaves 2+3, 4+1, 5*6 get variants of 2 and 3 operations; Nc=3 trials: combos (0,0,0), (0,0,1),
    # (0,1,0) compose parents with 2+2+1=5, 5 and 2+3+1=6 operations (the 5*6 child is not in the parent);
    # compose_all_trials (finmbs's) runs all three and keeps every passing one
    agents = {"s": Agent(capacity=1, boost=2, partial=0.75, table={5: acc_at_5})}
    ctx, _ = setup(openai_server, tmp_path, agents, N_leaf=2, Nc=3, N=8, compose_all_trials=True)
    root, ledger = node(), Ledger("a")
    assert await decompose(ctx, root, ledger)
    versions, orphans = await synthesize(ctx, root, ledger)
    assert len(versions) == kept
    assert [v.problem.id for v in versions][-1] == "a.s2"
    assert versions[-1].problem.question == "Compute (2 + 3 + 1) * (4 + 1 + 1 + 2)."
    assert [c.problem.id for c in versions[-1].children] == ["a.d0c0.h0v0", "a.d0c1.h0v1", "a.d0c2.h0v0"]
    assert root.decisions[-1].reason == f"kept {kept} of 3 composition trials (3 distinct combinations; up to 3)"
    too_easy = [r for r in ledger.rejected if r.stage == "compose"]
    assert len(too_easy) == 3 - kept
    assert all(r.reason == "too easy: weakest student s accuracy 0.750 > alpha 0.625" for r in too_easy)
    # synthetic leaves that no kept parent uses stay as their own trees
    used = {c.problem.id for v in versions for c in v.children}
    assert {o.problem.id for o in orphans} == {f"a.d0c{k}.h0v{s}" for k in range(3) for s in range(2)} - used


async def test_calibration_bands_and_in_budget(tmp_path, openai_server):
    ctx, _ = setup(openai_server, tmp_path, {}, N=8, L=100)
    ctx.gateway.close()
    ctx, world = setup(openai_server, tmp_path / "b", {}, N=8, L=100)
    world.agents["target"] = Agent(capacity=2, partial=0.5)
    stale = Problem(id="1", question="Compute 2 * 3 + 1.", answer="7")
    gold = Problem(id="2", question="Compute 2 * 3 + 1 - 4.", answer="3")
    hard = Problem(id="3", question="Compute 2 * 3 + 1 - 4 + 5 + 6.", answer="14")
    reports = [await calibrate(ctx, p) for p in (stale, gold, hard)]
    assert [(r.band, r.k, r.in_budget, r.qualified) for r in reports] == [
        ("stale", 8, True, False),
        ("goldilocks", 4, True, True),
        ("hard", 0, False, False),
    ]
    assert reports[2].verified_hard
    # 3 operations need 22 words: at L=20 every rollout is cut ("length"), correct answers never count in budget
    cut = await calibrate(ctx, gold, budget=20)
    assert (cut.band, cut.k, cut.in_budget, cut.qualified, cut.verified_hard) == ("goldilocks", 4, False, False, False)


def test_difficulty_rules():
    def r(reward, reason="stop"):
        return Rollout(text="", extracted_answer=None, reward=reward, finish_reason=reason)

    assert difficulty([r(1, "length"), r(0)], "p", 10).in_budget is False
    assert difficulty([r(0), r(0, "length")], "p", 10).verified_hard is False
    report = difficulty([r(1), r(0, "length"), r(0)], "p", 10)
    assert (report.band, report.k, report.n, report.in_budget, report.qualified) == ("goldilocks", 1, 3, True, True)
