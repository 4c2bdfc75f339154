"""Named mutation operators for leaf variants (stages.leaf_operators) and the structure check
(novelty.structure): the program skeleton, the shipped catalogues (every worked example's programs run
to its answers and differ in structure), operator rotation, and the engine end to end through the
scripted world on a real HTTP server (a teacher that ignores its operator is rejected and counted;
operators named in the prompts and recorded in meta.operator, metrics and the report)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from finmbs.config import PAPER_VALUES, NoveltySettings, StageParams, load_config
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.leaves import harder_leaves
from finmbs.mbs.novelty import same_answer
from finmbs.mbs.operators import OperatorError, catalogue, load_catalogue, rotation
from finmbs.records import Problem, Trace, TreeNode
from finmbs.resources import resource_dir
from finmbs.runs import read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config
from finmbs.verify.program import run_program
from finmbs.verify.skeleton import same_structure, skeleton

# --- the skeleton ---------------------------------------------------------------------------------

ORCHARD = "rows = 5\ntrees = rows * 8\napples = trees * 30\nanswer = apples // 20"


def test_skeleton_is_the_same_for_renamed_renumbered_and_relined_programs():
    same = [
        "a = 4\nb = a * 9\nc = b * 25\nanswer = c // 10",  # renamed, renumbered
        "total = 5 * 8 * 30\nanswer = total // 20",  # two lines merged
        "apples = 30 * (8 * 5)\nanswer = apples // 20",  # operands of * in another order
        "import math\n'''bags'''\nx = 5 * 8\nunused = x - 1\nanswer = (x * 30) // 20",  # import, docstring, dead step
        "answer = 5\nanswer *= 8\nanswer *= 30\nanswer //= 20",  # augmented assignments
        "total = 5 * 8 * 30\nanswer = int(round(total // 20, 2))",  # conversions and rounding compute nothing
    ]
    for program in same:
        assert skeleton(program) == skeleton(ORCHARD), program
        assert same_structure(program, ORCHARD) is True
    # a loop or a branch: the canonical dump, names by binding order, constants abstracted
    loop = "total = 0\nfor i in range(5):\n    total += i * 3\nanswer = total"
    renamed = "s = 0\nfor k in range(7):\n    s += k * 11\nanswer = s"
    assert skeleton(loop).startswith("ast: ") and skeleton(loop) == skeleton(renamed)


def test_skeleton_differs_for_an_added_step_an_inverse_and_another_operation():
    pizza = "eaten = 3 * 2\nanswer = 8 - eaten"
    assert not same_structure("eaten = 3 * 2\nanswer = eaten + 2", pizza)  # the inverse problem
    assert not same_structure(ORCHARD + "\nanswer = answer - 40 // 4", ORCHARD)  # one more step
    assert not same_structure("answer = 5 * 8 * 30 / 20", ORCHARD)  # / is not //
    assert not same_structure("answer = 5 * 8 * 30 * 2 // 20", ORCHARD)  # one more factor
    assert not same_structure("answer = (8 - 3) * 2", pizza) and not same_structure("answer = 8 * 2 - 3", pizza)
    loop = "total = 0\nfor i in range(5):\n    total += i\nanswer = total"
    assert not same_structure(loop, "total = 0\nfor i in range(5):\n    total += i * i\nanswer = total")
    # finance: a quoted figure is an input like a literal; another operation on it is new
    quoted = "rate = quote('two percent (2.0%)', 0.02)\nanswer = 1000000 * rate"
    assert skeleton(quoted) == skeleton("answer = 500 * 0.03")
    assert not same_structure(quoted + " * 90 / 360", quoted)


def test_no_skeleton_without_a_parse_or_an_answer():
    assert skeleton("answer = (") is None and skeleton("total = 5 * 8") is None
    assert same_structure("answer = (", ORCHARD) is None
    # a name used many times over does not blow up: the dump stands in
    bomb = "a0 = 2\n" + "".join(f"a{i + 1} = a{i} * a{i}\n" for i in range(40)) + "answer = a40"
    assert skeleton(bomb).startswith("ast: ")


# --- the catalogues ---------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", ["math", "finance"])
def test_every_shipped_operator_example_runs_to_its_answers_and_changes_the_structure(domain):
    operators = catalogue(domain)
    assert len(operators) >= 4 and len({o.name for o in operators}) == len(operators)
    for op in operators:
        shapes = []
        for side in (op.before, op.after):
            result = run_program(side.program, op.passage)
            assert result.ok, (op.name, result.error)
            assert same_answer(domain, result.answer, side.answer, side.question), (op.name, result.answer)
            shapes.append(skeleton(side.program))
        assert None not in shapes and shapes[0] != shapes[1], op.name


def test_a_bad_catalogue_is_one_error_naming_the_file_and_entry(tmp_path):
    path = tmp_path / "math.yaml"
    example = {"question": "Q?", "answer": "1"}
    good = {"name": "inverse", "instruction": "Ask for another unknown.", "before": example, "after": example}
    for rows, says in (
        ([good, {**good, "instruction": ""}], "entry 1 (inverse): instruction"),
        ([good, {k: v for k, v in good.items() if k != "after"} | {"name": "other"}], "entry 1 (other): after"),
        ([good, good], "entry 1 (inverse): the name 'inverse' is used twice"),
        ({"name": "x"}, "a non-empty list of operators expected"),
    ):
        path.write_text(json.dumps(rows))
        with pytest.raises(OperatorError, match=re.escape(says)) as info:
            load_catalogue(path)
        assert str(path) in str(info.value)
    with pytest.raises(OperatorError, match="no operator catalogue"):
        load_catalogue(tmp_path / "absent.yaml")


def test_rotation_takes_every_operator_once_from_a_leaf_dependent_start():
    operators = catalogue("math")
    starts = set()
    for i in range(40):
        order = rotation(f"seed-{i}.d0c{i % 3}", operators)
        assert sorted(o.name for o in order) == sorted(o.name for o in operators)
        starts.add(order[0].name)
    assert len(starts) > 1  # the leaves of a run do not all begin with the same operator
    assert rotation("x", operators) == rotation("x", operators)


def test_switches_are_off_in_the_paper_profile_and_on_in_the_default_config():
    assert PAPER_VALUES["stages.leaf_operators"] is False and PAPER_VALUES["novelty.structure"] is False
    default = load_config(resource_dir("configs") / "default.yaml")
    assert default.stages.leaf_operators and default.novelty.structure
    paper = load_config(resource_dir("configs") / "default.yaml", profile="paper")
    assert not paper.stages.leaf_operators and not paper.novelty.structure
    # the fields' own defaults stay off: configs built in code (the scripted world's) ask as before
    assert not StageParams().leaf_operators and not NoveltySettings().structure


# --- the engine ------------------------------------------------------------------------------------

EASY = Problem(id="e", question="Compute 2 + 3.", answer="5")  # the weakest student solves it: a leaf


def operator_asks(server) -> list[str]:
    """The operator each operator prompt named, in request order."""
    return [
        re.search(r"Change to apply \((\w+)\)", r.text).group(1)
        for r in server.requests
        if TASK_MARKERS["leaf_operator"] in r.text
    ]


async def test_a_leaf_never_gets_one_operator_twice(tmp_path, openai_server):
    world = World(agents={"lazy": Agent(lazy=True), "s": Agent(capacity=1)})
    openai_server.handler = world
    config = world_config(
        openai_server.base_url,
        ["lazy"],
        ["s"],
        "s",
        str(tmp_path / "c.sqlite"),
        N_leaf=2,
        R=4,
        N=4,
        leaf_operators=True,
    )
    config.novelty.structure = True
    ctx = Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "c.sqlite")))
    leaf = TreeNode(problem=EASY, path="0", trace=Trace(text="2 + 3 = 5", answer="5", model="lazy", verified=True))
    ledger = Ledger("e")
    assert await harder_leaves(ctx, leaf, ledger) == []
    asked = operator_asks(openai_server)
    names = [o.name for o in catalogue("math")]
    assert sorted(asked) == sorted(names)  # 5 operators over rounds of 2: 2 + 2 + 1, then none left
    assert [d.reason for d in leaf.decisions if "round 3" in d.reason] == [
        "round 3: not asked, each of the 5 operators was asked once"
    ]
    # every variant ignored its operator (the leaf renumbered): each a counted rejection, none asked again
    assert len(ledger.rejected) == 5 == ledger.counts.same_structure
    assert all(r.stage == "novelty" and r.data["check"] == "structure" for r in ledger.rejected)
    assert {r.problem.meta["operator"] for r in ledger.rejected} == set(names)
    assert [d.data["skeleton"] for d in leaf.decisions if "source_program" in d.data] == ["flow: ('Add', 'C', 'C')"]


def grow_config(server, tmp_path: Path, teachers: list[str], **switches):
    server.handler = World(
        agents={
            "lazy": Agent(lazy=True),
            "teacher": Agent(),
            "s1": Agent(capacity=1),
            "s2": Agent(capacity=1),
            "target": Agent(capacity=1, partial=0.5),
        }
    )
    config = world_config(
        server.base_url,
        teachers,
        ["s1", "s2"],
        "target",
        str(tmp_path / "cache.sqlite"),
        **{"Nt": 2, "N": 8, "N_leaf": 2, "R": 2, "L": 100, **switches},
    )
    config.novelty.structure = True
    return config


async def test_grow_rejects_and_counts_variants_of_the_source_structure(tmp_path, openai_server):
    # round 0's teacher ignores its operators (renumbers the seed); round 1's applies them
    out = tmp_path / "run"
    config = grow_config(openai_server, tmp_path, ["lazy", "teacher"], leaf_operators=True)
    metrics = await run_grow(config, [EASY], out)
    rows = list(read_jsonl(out / "rejected.jsonl"))
    same = [r for r in rows if r["data"].get("check") == "structure"]
    assert len(same) == 2 == metrics.same_structure and all(r["stage"] == "novelty" for r in same)
    assert all(r["reason"].startswith("same structure as its source e: ") for r in same)
    assert all(r["problem"]["id"].startswith("e.h0") and r["data"]["operator"] for r in same)
    qualified = [Problem.model_validate(r) for r in read_jsonl(out / "qualified.jsonl")]
    assert len(qualified) == 2 == metrics.qualified == metrics.new_structure
    names = {o.name for o in catalogue("math")}
    assert all(p.meta["operator"] in names and p.meta["structure"] == "new" for p in qualified)
    asked = operator_asks(openai_server)
    assert len(asked) == 4 == len(set(asked))  # two rounds of two, four operators
    assert {p.meta["operator"] for p in qualified} == set(asked[2:])
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["same_structure"] == 2 and saved["new_structure"] == 2 and saved["new_structure_rate"] == 1.0
    assert saved["by_operator"] == {p.meta["operator"]: {"qualified": 1, "new_structure": 1} for p in qualified}


async def test_structure_check_alone_rejects_the_paper_prompts_copies(tmp_path, openai_server):
    # operators off: the paper's "harder" prompt; a lazy teacher's renumbered variants are still caught
    out = tmp_path / "run"
    metrics = await run_grow(grow_config(openai_server, tmp_path, ["lazy"]), [EASY], out)
    assert metrics.qualified == 0 and metrics.same_structure == 4  # two rounds of two renumberings
    assert not operator_asks(openai_server)
    rows = list(read_jsonl(out / "rejected.jsonl"))
    assert all("operator" not in r["problem"]["meta"] for r in rows)
    assert not any(r["stage"] == "leaf" for r in rows)  # rejected before any trace or screen
    # switched off, the same variants are traced and screened (and found too easy): no structure rejection
    config = grow_config(openai_server, tmp_path / "off", ["lazy"])
    config.novelty.structure = False
    metrics = await run_grow(config, [EASY], tmp_path / "off-run")
    rows = list(read_jsonl(tmp_path / "off-run" / "rejected.jsonl"))
    assert metrics.same_structure == 0 and {r["stage"] for r in rows if r["problem"]["id"] != "e"} == {"leaf"}


def test_a_variant_that_restates_its_operators_example_is_a_counted_copy(tmp_path):
    # the 1.5B, named combine_quantities for an age puzzle, wrote that operator's own example (the parking lots)
    from finmbs.mbs.leaves import copied_example

    config = world_config("http://unused", ["t"], ["s"], "s", str(tmp_path / "c.sqlite"))
    ctx, ledger = Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "c.sqlite"))), Ledger("e")
    for operator in catalogue("math"):
        for side in (operator.before, operator.after):
            copy = Problem(id="e.h0v0", question=side.question, answer="42", meta={"operator": operator.name})
            assert copied_example(ctx, copy, ledger), operator.name  # whatever answer it states
    assert len(ledger.rejected) == 2 * len(catalogue("math"))
    assert all(r.stage == "novelty" and "copies the worked example of operator" in r.reason for r in ledger.rejected)
    own = Problem(
        id="e.h0v1", question="Compute 2 + 3, then double it.", answer="10", meta={"operator": "reuse_intermediate"}
    )
    assert not copied_example(ctx, own, ledger) and not copied_example(ctx, EASY, ledger)  # no operator: no check
