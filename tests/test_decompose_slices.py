"""Decomposition from the program (`stages.decompose_from_program`) in the engine, through the scripted
world on a real HTTP server: a seed's program written by the teacher is cut into slices, each slice is
stated by the teacher as a child whose answer must be the slice's value, the parent's program over its
children is its own program with the slices replaced, and a node without a usable slice falls back to
the prose decomposition, counted with its reason."""

from __future__ import annotations

from finmbs.config import PAPER_VALUES, load_config
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import decompose
from finmbs.records import DecompositionTree, Problem, TreeNode
from finmbs.runs.grow import run_grow
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config
from finmbs.verify.program import run_program

SEED = Problem(id="a", question="Compute (2 * 3) * (4 + 1).", answer="30")
STEPS = "a = 2 * 3\nb = 4 + 1\nanswer = a * b"  # the program the teacher writes for the seed


def setup(server, tmp_path, world: World, program: str | None = STEPS, **stages) -> Context:
    world.agents = {"teacher": Agent(program=program), "target": Agent(), "s": Agent(capacity=1, boost=2)}
    server.handler = world
    config = world_config(
        server.base_url, ["teacher"], ["s"], "target", str(tmp_path / "cache.sqlite"), **{"Nd": 0, "N": 4, **stages}
    )
    return Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite")))


async def decomposed(ctx: Context) -> tuple[TreeNode, Ledger]:
    root, ledger = TreeNode(problem=SEED, path="0"), Ledger("a")
    await decompose(ctx, root, ledger)
    ledger.count_decompositions(DecompositionTree(seed_id="a", root=root))
    return root, ledger


def asked(server, task: str) -> list[str]:
    return [r.text for r in server.requests if TASK_MARKERS[task] in r.text]


async def test_children_are_stated_from_slices_and_the_parent_program_is_its_own(tmp_path, openai_server):
    root, ledger = await decomposed(setup(openai_server, tmp_path, World(agents={})))
    assert ledger.rejected == []
    assert [(c.problem.question, c.problem.answer) for c in root.children] == [
        ("Compute 2 * 3.", "6"),
        ("Compute 4 + 1.", "5"),
    ]
    [decision] = [d for d in root.decisions if d.data.get("attempt") == 0]
    assert decision.outcome == "accepted" and decision.reason.startswith("effective: ")
    assert decision.data["from_program"] and [(s["name"], s["value"]) for s in decision.data["slices"]] == [
        ("a", "6"),
        ("b", "5"),
    ]
    # the parent's program is the written one with each slice replaced by its child: no teacher writes it
    meta = root.problem.meta
    assert meta["program"] == "a = child_1()\nb = child_2()\nanswer = a * b" and meta["own_program"] == STEPS
    again = run_program(meta["program"], functions=meta["program_functions"])
    assert again.answer == "30" == meta["program_answer"]
    assert not asked(openai_server, "program_parent") and not asked(openai_server, "decompose")
    # the teacher was shown the step and its value, never the parent's answer
    [first, second] = asked(openai_server, "decompose_slice")
    assert "a = 2 * 3\nanswer = a" in first and "<value>6</value>" in first and "30" not in first
    assert "b = 4 + 1\nanswer = b" in second
    assert (ledger.counts.decompositions_from_program, ledger.counts.from_program_effective) == (1, 1)
    assert ledger.counts.prose_fallbacks == 0


async def test_a_child_whose_answer_is_not_its_slice_value_is_rejected(tmp_path, openai_server):
    # the teacher states step a as "Compute 2 * 3 + 1." with its own right answer 7: verified, yet not a
    root, ledger = await decomposed(setup(openai_server, tmp_path, World(agents={}, off_slices={"a"})))
    off = [r for r in ledger.rejected if r.data.get("check") == "slice"]
    assert [(r.problem.question, r.reason) for r in off] == [
        ("Compute 2 * 3 + 1.", "its answer '7' is not its slice's value 6 (a)")
    ]
    assert not [r for r in openai_server.requests if "Compute 2 * 3 + 1." in r.text and "<problem>" in r.text]
    # the one child left (4 + 1) teaches + alone: conditioning does not help, the root is dropped
    [attempt] = [d for d in root.decisions if d.data.get("attempt") == 0]
    assert attempt.outcome == "rejected" and attempt.reason.startswith("ineffective: ")
    assert (ledger.counts.decompositions_from_program, ledger.counts.from_program_effective) == (1, 0)


async def test_no_usable_slice_falls_back_to_prose_with_its_reason(tmp_path, openai_server):
    # the teacher's program for the seed is one expression: nothing to slice
    ctx = setup(openai_server, tmp_path, World(agents={}), program="answer = (2 * 3) * (4 + 1)")
    root, ledger = await decomposed(ctx)
    [attempt] = [d for d in root.decisions if d.data.get("attempt") == 0]
    assert attempt.data["prose_fallback"] == "its program has no intermediate step to slice"
    assert asked(openai_server, "decompose") and not asked(openai_server, "decompose_slice")
    assert root.children and ledger.counts.prose_fallbacks == 1 and ledger.counts.decompositions_from_program == 0
    # a program that does not compute the answer is no ground for slices either
    wrong = setup(openai_server, tmp_path / "wrong", World(agents={}), program="a = 2 * 3\nb = 4 + 2\nanswer = a * b")
    root, ledger = await decomposed(wrong)
    [attempt] = [d for d in root.decisions if d.data.get("attempt") == 0]
    assert attempt.data["prose_fallback"] == "its program gives 36, the answer is '30'"


async def test_switched_off_the_decomposition_is_from_prose_alone(tmp_path, openai_server):
    ctx = setup(openai_server, tmp_path, World(agents={}), decompose_from_program=False)
    root, ledger = await decomposed(ctx)
    assert not asked(openai_server, "program_write") and not asked(openai_server, "decompose_slice")
    assert asked(openai_server, "decompose") and not [d for d in root.decisions if "prose_fallback" in d.data]
    assert PAPER_VALUES["stages.decompose_from_program"] is False
    assert load_config().stages.decompose_from_program is True


async def test_grow_counts_decompositions_from_the_program(tmp_path, openai_server):
    ctx = setup(openai_server, tmp_path, World(agents={}), N_leaf=1, L=100)
    metrics = await run_grow(ctx.config, [SEED], tmp_path / "run")
    assert metrics.decompositions_effective == metrics.from_program_effective == 1
    assert metrics.decompositions_from_program == 1 and metrics.prose_fallbacks == 0


async def test_a_seed_program_is_drawn_again_while_it_misses_the_answer(tmp_path, openai_server):
    # verify.program_samples: the first program the teacher writes gives 36, the second 30 (the seed's answer)
    draws = ("a = 2 * 3\nb = 4 + 2\nanswer = a * b", STEPS)
    ctx = setup(openai_server, tmp_path, World(agents={}), program=None)
    openai_server.handler.agents["teacher"].programs = draws
    root, ledger = await decomposed(ctx)
    first, second = asked(openai_server, "program_write")
    assert ledger.counts.decompositions_from_program == 1
    assert root.problem.meta["own_program"] == STEPS
    # verify.program_equations: plain arithmetic first; the redraw also offers linear equations
    assert "sympy" not in first and "from sympy import symbols, Eq, solve" in second
    # one draw (the paper profile's value, were programs on there): the wrong program ends the program path
    once = setup(openai_server, tmp_path / "once", World(agents={}), program=None)
    openai_server.handler.agents["teacher"].programs = draws
    once.config.verify.program_samples = 1
    root, ledger = await decomposed(once)
    [attempt] = [d for d in root.decisions if d.data.get("attempt") == 0]
    assert attempt.data["prose_fallback"] == "its program gives 36, the answer is '30'"
    # switched off, no redraw offers equations
    off = setup(openai_server, tmp_path / "off", World(agents={}), program=None)
    openai_server.handler.agents["teacher"].programs = draws
    off.config.verify.program_equations = False
    before = len(openai_server.requests)
    await decomposed(off)
    redrawn = [r.text for r in openai_server.requests[before:] if TASK_MARKERS["program_write"] in r.text]
    assert len(redrawn) == 2 and not any("sympy" in text for text in redrawn)
    assert PAPER_VALUES["verify.program_samples"] == 1 and load_config().verify.program_samples == 3


async def test_slice_asks_keep_the_question_and_rewrite_only_its_final_ask(tmp_path, openai_server):
    # stages.slice_asks: the teacher writes one sentence; the context, the program and the answer are the engine's
    seed = SEED.model_copy(update={"question": "Two sums are multiplied here. Compute (2 * 3) * (4 + 1)."})
    ctx = setup(openai_server, tmp_path, World(agents={}))
    root, ledger = TreeNode(problem=seed, path="0"), Ledger("a")
    await decompose(ctx, root, ledger)
    assert ledger.rejected == []
    assert [(c.problem.question, c.problem.answer, c.problem.meta["program"]) for c in root.children] == [
        ("Two sums are multiplied here. Compute 2 * 3.", "6", "a = 2 * 3\nanswer = a"),
        ("Two sums are multiplied here. Compute 4 + 1.", "5", "b = 4 + 1\nanswer = b"),
    ]
    [first, _] = asked(openai_server, "decompose_slice_ask")
    assert "<problem>\nTwo sums are multiplied here.\n</problem>" in first and "Compute (2 * 3) * (4 + 1)." in first
    assert not asked(openai_server, "decompose_slice")  # no whole restatement asked
    # an ask that states another quantity than its slice's: the slice's program and the teacher's trace disagree
    off = setup(openai_server, tmp_path / "off", World(agents={}, off_slices={"a"}))
    root, ledger = TreeNode(problem=seed, path="0"), Ledger("a")
    await decompose(off, root, ledger)
    [wrong] = [r for r in ledger.rejected if r.problem.question.endswith("Compute 2 * 3 + 1.")]
    assert wrong.problem.answer == "6" and "unverified" in wrong.reason

    # an ask that states its own value ("... for the needs of 6 students?") is dropped before any trace
    class Telling(World):
        def decompose_slice_ask(self, agent, text):
            return {"ask": f"Compute {self.step_expression(text)} for 6 or 5 students."}

    telling = setup(openai_server, tmp_path / "telling", Telling(agents={}))
    root, ledger = TreeNode(problem=seed, path="0"), Ledger("a")
    await decompose(telling, root, ledger)
    assert not root.children and not [r for r in openai_server.requests if "for 6 or 5 students" in r.text]
    # switched off, or a question with nothing before its ask: the slice is stated whole, as before
    whole = setup(openai_server, tmp_path / "whole", World(agents={}), slice_asks=False)
    await decompose(whole, TreeNode(problem=seed, path="0"), Ledger("a"))
    assert asked(openai_server, "decompose_slice")
    assert PAPER_VALUES["stages.slice_asks"] is False and load_config().stages.slice_asks is True


def test_a_slice_ask_keeps_only_the_sentences_its_slice_uses():
    from finmbs.mbs.slices import slice_context

    school = (
        "A school has 4 classes of 28 students and 3 classes of 32 students. Each student needs 3 notebooks. "
        "Notebooks come in packs of 8, and a pack costs $6."
    )
    # the 1.5B, shown the packs and the price, answered the seed's 468 for "How many notebooks are needed?"
    notebooks = "students = 4 * 28 + 3 * 32\nnotebooks = students * 3\nanswer = notebooks"
    assert slice_context(school, notebooks) == school.rsplit(" Notebooks come", 1)[0]
    assert (
        slice_context(school, "packs = 624 // 8\nanswer = packs")
        == "Notebooks come in packs of 8, and a pack costs $6."
    )
    pay = (
        "Ana earns $20 an hour. Last week she worked 46 hours, and 20% of her pay was withheld. She is paid on Friday."
    )
    assert slice_context(pay, "tax = 980 * 0.2\nanswer = tax") == pay  # 0.2 is the 20% (and $20), no number: kept
