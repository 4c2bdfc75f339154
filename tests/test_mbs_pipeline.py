"""`grow` end to end in the scripted world: run folder, exact metrics, direct baseline, budget stop,
and `finmbs calibrate`."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import Budget, QualitySettings
from finmbs.llm import BudgetExceeded, Gateway
from finmbs.mbs.direct import budget_tokens, with_budgets
from finmbs.records import Problem, RunMetrics
from finmbs.runs import read_jsonl
from finmbs.runs.budgets import construction_budgets
from finmbs.runs.grow import run_grow
from finmbs.testing.world import TASK_MARKERS, Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
SEEDS = [
    Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25"),
    Problem(id="bad", question="Compute 7 * 6.", answer="41"),  # wrong ground truth: no trace verifies
]


def config(server, tmp_path, **stages):
    server.handler = World(agents=dict(AGENTS))
    stages = {"Nt": 2, "N": 8, "N_leaf": 2, "L": 100, **stages}
    return world_config(
        server.base_url,
        ["weak-teacher", "strong-teacher"],
        ["s1", "s2"],
        "target",
        str(tmp_path / "cache.sqlite"),
        **stages,
    )


VOLATILE = (
    "usage",
    "wall_time_s",
    "cache_hits",
    "stages",
    "construction_tokens",
    "construction_tokens_per_seed",
    "construction_tokens_per_qualified",
)
ZERO = {
    "seeds_too_easy": 0,
    "too_easy_roots": 0,
    "too_easy_qualified": 0,
    "answer_leaks": 0,
    "leaks_by_answer": 0,
    "leaks_by_question": 0,
    "leaks_by_solution": 0,
    "not_well_posed": 0,
    "novelty_rejected_roots": 0,
    "engine_funnel": {},  # stages.program_operators is off in the scripted world
    "reground_unverified": 0,
    "reground_too_easy": 0,
    "other_descendants": 0,
    "other_goldilocks": 0,
    "other_qualified": 0,
    "program_rejected": 0,
    "relabeled": 0,
    "decompositions_from_program": 0,
    "from_program_effective": 0,
    "same_structure": 0,  # the scripted world's configs leave novelty.structure and leaf operators off
    "new_structure": 0,
    "new_structure_rate": 0.0,
    "by_operator": {},
}


def metrics_of(out) -> dict:
    data = json.loads((out / "metrics.json").read_text())
    return {k: v for k, v in data.items() if k not in VOLATILE}


async def test_mbs_run_folder_and_exact_metrics(tmp_path, openai_server):
    out = tmp_path / "run"
    metrics = await run_grow(config(openai_server, tmp_path), SEEDS, out)
    # seed a: s2 (weakest) 0/8, s1 4/8 -> S_n = {s2}; children 2+3, 4+1, 5*6 lift s2 to 8/8: effective.
    # Each leaf: variant of 2 ops (s2 7/8 > 0.8, rejected), variant of 3 ops kept (0/8): one combination.
    # The first of up to Nc=10 trials composes a.s0 (7 ops), which passes the alpha_parent screen: the
    # trials stop there (the paper). Only the synthetic root is calibrated: a.s0 (target capacity 6 -> 4/8
    # goldilocks, in budget: qualified); the 3-op leaves are not calibrated.
    assert metrics_of(out) == {
        "rules_version": 2,
        "method": "mbs",
        "keep": "roots",
        "seeds_in": 2,
        "seeds_done": 2,
        "seeds_with_trace": 1,
        "decompositions_effective": 1,
        "decompositions_attempted": 1,
        "prose_fallbacks": 1,  # the seed's program is one expression
        "descendants": 1,
        "gated_roots": 0,
        "root_candidates": 1,
        "goldilocks": 1,
        "qualified": 1,
        "seeds_converted": 1,
        "novelty_rejected": 0,
        "goldilocks_rate": 1.0,
        "qualified_rate": 1.0,
        "seed_conversion": 0.5,
        "screen_goldilocks": 0,
        "screen_goldilocks_out": 0,
        **ZERO,
    }
    assert metrics.usage["target"].calls == 1 and metrics.usage["target"].samples == 8
    # per stage: every stage that called a model, and the target's tokens only in final calibration
    stages = json.loads((out / "metrics.json").read_text())["stages"]
    assert set(stages) == {"traces", "decompose", "leaf", "compose", "quality", "calibrate"}
    assert stages["calibrate"]["requests"] == 1 and all(
        s["tokens"] > 0 and s["model_seconds"] > 0 for s in stages.values()
    )
    assert sum(s["tokens"] for name, s in stages.items() if name != "calibrate") == metrics.construction_tokens
    [qualified] = list(read_jsonl(out / "qualified.jsonl"))
    assert qualified["question"] == "Compute (2 + 3 + 1 + 2) * (4 + 1 + 1 + 2)." and qualified["answer"] == "64"
    assert qualified["provenance"] == {
        "seed_id": "a",
        "method": "mbs",
        "stage": "compose",
        "tree_path": "0",
        "parent_ids": ["a.d0c0.h0v1", "a.d0c1.h0v1", "a.d0c2.h0v1"],
        "source": None,
    }
    assert qualified["meta"]["difficulty"]["band"] == "goldilocks" and qualified["meta"]["data_source"] == "finmbs/math"
    assert qualified["meta"]["kind"] == "root" and not (out / "qualified_nodes.jsonl").exists()
    rejected = list(read_jsonl(out / "rejected.jsonl"))
    assert Counter(r["stage"] for r in rejected) == {"traces": 1, "leaf": 3}
    assert next(r for r in rejected if r["stage"] == "traces")["problem"]["id"] == "bad"
    tree = json.loads((out / "trees" / "a.json").read_text())
    assert set(tree) == {"seed", "decomposition", "synthetic", "dropped", "tokens", "stages", "counts"}
    assert tree["dropped"] is None
    # the counts each seed recorded as it ran, summed, are the run's
    counts = [json.loads(path.read_text())["counts"] for path in (out / "trees").iterdir()]
    names = list(counts[0])
    assert {name: sum(c[name] for c in counts) for name in names} == {name: getattr(metrics, name) for name in names}
    assert tree["counts"]["decompositions_attempted"] >= tree["counts"]["decompositions_effective"] == 1
    assert tree["decomposition"]["root"]["student_accuracy"] == {"s2": 0.0, "s1": 0.5}
    assert [t["root"]["problem"]["id"] for t in tree["synthetic"]] == ["a.s0"]
    assert set(tree["tokens"]) == {"teacher", "student", "judge", "target"} and all(
        n > 0 for n in tree["tokens"].values()
    )
    dropped = json.loads((out / "trees" / "bad.json").read_text())
    assert dropped["decomposition"] is None and dropped["dropped"].startswith("no verified trace after 2x2 tries")
    assert set(dropped["tokens"]) == {"teacher"}
    construction = (
        tree["tokens"]["teacher"] + tree["tokens"]["student"] + tree["tokens"]["judge"] + dropped["tokens"]["teacher"]
    )
    assert metrics.construction_tokens == construction and metrics.construction_tokens_per_seed == construction / 2
    assert yaml.safe_load((out / "config.yaml").read_text())["stages"]["N_leaf"] == 2
    assert sorted(p.name for p in (out / "done").iterdir()) == ["a", "bad"]

    # a rerun of a finished folder sends nothing and changes nothing
    before = openai_server.request_count
    again = await run_grow(config(openai_server, tmp_path), SEEDS, out)
    assert openai_server.request_count == before and again.qualified == 1
    assert len(list(read_jsonl(out / "rejected.jsonl"))) == len(rejected)


async def test_keep_all_reports_other_nodes_apart(tmp_path, openai_server):
    # a weaker target (capacity 2): the composed root (7 ops) is hard, each 3-op leaf variant 4/8 goldilocks
    cfg = config(openai_server, tmp_path)
    openai_server.handler.agents["target"] = Agent(capacity=2, partial=0.5)
    roots = await run_grow(cfg, SEEDS[:1], tmp_path / "roots")
    assert (roots.descendants, roots.goldilocks, roots.qualified, roots.other_descendants) == (1, 0, 0, 0)
    assert roots.usage["target"].calls == 1  # only the root is calibrated
    cfg = cfg.model_copy(update={"stages": cfg.stages.model_copy(update={"keep": "all"})})
    every = await run_grow(cfg, SEEDS[:1], tmp_path / "all")
    # the paper's metrics are unchanged; the three leaf variants are counted apart
    assert (every.descendants, every.goldilocks, every.qualified, every.seeds_converted) == (1, 0, 0, 0)
    assert (every.other_descendants, every.other_goldilocks, every.other_qualified) == (3, 3, 3)
    assert every.keep == "all" and every.novelty_rejected == 0
    assert list(read_jsonl(tmp_path / "all" / "qualified.jsonl")) == []
    nodes = list(read_jsonl(tmp_path / "all" / "qualified_nodes.jsonl"))
    assert [n["question"] for n in nodes] == [
        "Compute 2 + 3 + 1 + 2.",
        "Compute 4 + 1 + 1 + 2.",
        "Compute 5 * 6 + 1 + 2.",
    ]
    assert {n["meta"]["kind"] for n in nodes} == {"node"}


async def test_quality_control_rejects_a_problem_the_judge_finds_ill_posed(tmp_path, openai_server):
    # the same run as above, but the judge finds the composed root ill-posed: rejected at stage "quality"
    # with the judge's reason, counted, and never calibrated (no target call)
    cfg = config(openai_server, tmp_path)
    openai_server.handler.ill_posed = {"(2 + 3 + 1 + 2) * (4 + 1 + 1 + 2)"}
    metrics = await run_grow(cfg, SEEDS[:1], tmp_path / "run")
    assert (metrics.descendants, metrics.qualified, metrics.not_well_posed) == (0, 0, 1)
    assert "target" not in metrics.usage
    [rejection] = [r for r in read_jsonl(tmp_path / "run" / "rejected.jsonl") if r["stage"] == "quality"]
    assert rejection["problem"]["question"] == "Compute (2 + 3 + 1 + 2) * (4 + 1 + 1 + 2)."
    assert rejection["reason"] == "not well-posed: (2 + 3 + 1 + 2) * (4 + 1 + 1 + 2): not every operand is stated"
    judged = [r for r in openai_server.requests if TASK_MARKERS["well_posed"] in r.text]
    assert len(judged) == 1 and judged[0].model.endswith("weak-teacher")  # the judge role, once per candidate
    # turned off: no judge call, the problem is calibrated and qualifies as in the run above
    openai_server.requests.clear()
    off = cfg.model_copy(update={"quality": QualitySettings(enabled=False)})
    unchecked = await run_grow(off, SEEDS[:1], tmp_path / "off")
    assert (unchecked.descendants, unchecked.qualified, unchecked.not_well_posed) == (1, 1, 0)
    assert not any(TASK_MARKERS["well_posed"] in r.text for r in openai_server.requests)
    # a kept problem records the verdict on its node
    tree = json.loads((tmp_path / "run" / "trees" / "a.json").read_text())
    assert tree["synthetic"] and all(
        d["stage"] != "quality" or d["outcome"] == "accepted" for t in tree["synthetic"] for d in t["root"]["decisions"]
    )


async def test_direct_baseline_single_call_per_seed(tmp_path, openai_server):
    out = tmp_path / "direct"
    await run_grow(config(openai_server, tmp_path, R=2), SEEDS[:1], out, method="direct")
    # one teacher call (weak-teacher) writes N_direct=4 renumbered copies of the 3-op seed (prompt E asks
    # for several): each verified, stale for the target
    assert metrics_of(out) | {"goldilocks_rate": 0, "qualified_rate": 0} == {
        "rules_version": 2,
        "method": "direct",
        "keep": "roots",
        "seeds_in": 1,
        "seeds_done": 1,
        "seeds_with_trace": 1,
        "decompositions_effective": 0,
        "decompositions_attempted": 0,
        "prose_fallbacks": 0,
        "descendants": 4,
        "gated_roots": 0,
        "root_candidates": 4,
        "goldilocks": 0,
        "qualified": 0,
        "seeds_converted": 0,
        "novelty_rejected": 0,
        "goldilocks_rate": 0,
        "qualified_rate": 0,
        "seed_conversion": 0.0,
        "screen_goldilocks": 0,
        "screen_goldilocks_out": 0,
        **ZERO,
    }
    tree = json.loads((out / "trees" / "a.json").read_text())
    assert tree["decomposition"]["root"]["children"] == []
    assert [t["root"]["problem"]["question"] for t in tree["synthetic"]] == [
        "Compute (3 + 4) * (5 + 2).",
        "Compute (4 + 5) * (6 + 3).",
        "Compute (5 + 6) * (7 + 4).",
        "Compute (6 + 7) * (8 + 5).",
    ]
    assert [d["reason"] for d in tree["decomposition"]["root"]["decisions"]][1:] == [
        "call 0 (weak-teacher): 4 of 4 verified"
    ]
    assert sum(TASK_MARKERS["direct"] in r.text for r in openai_server.requests) == 1


async def test_direct_restating_the_seed_is_rejected(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    openai_server.handler.agents["weak-teacher"] = Agent(parrot=True)  # writes "Now, Compute <seed>."
    metrics = await run_grow(cfg, SEEDS[:1], tmp_path / "direct", method="direct")
    assert (metrics.descendants, metrics.novelty_rejected) == (
        0,
        4,
    ) and "target" not in metrics.usage  # never calibrated
    assert metrics.root_candidates == metrics.gated_roots == 4  # each copy is a candidate the rates count
    assert metrics.novelty_rejected_roots == 4  # all four at the final guard (the funnel's first gate)
    rejection, *_ = [r for r in read_jsonl(tmp_path / "direct" / "rejected.jsonl") if r["stage"] == "novelty"]
    assert rejection["problem"]["question"] == "Now, Compute (2 + 3) * (4 + 1)."
    assert rejection["reason"] == "restates its seed a: same answer '25', text similarity 1.00 >= 0.85"


async def test_direct_matched_budget_oversamples_to_the_mbs_tokens(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    mbs = await run_grow(cfg, SEEDS[:1], tmp_path / "mbs")
    budgets = construction_budgets(tmp_path / "mbs")
    # like with like: the tokens before re-grounding, quality control and calibration
    mbs_stages = json.loads((tmp_path / "mbs" / "trees" / "a.json").read_text())["stages"]
    assert budgets == {"a": budget_tokens(mbs_stages)} and 0 < budgets["a"] < mbs.construction_tokens
    seeds = with_budgets(SEEDS[:1], budgets)
    direct = await run_grow(cfg, seeds, tmp_path / "direct", method="direct")
    tree = json.loads((tmp_path / "direct" / "trees" / "a.json").read_text())
    calls = [d for d in tree["decomposition"]["root"]["decisions"] if "call" in d["data"]]
    # calls go on, teachers in turn, until the seed's counted tokens reach the MBS seed's
    assert budget_tokens(tree["stages"]) >= budgets["a"] and len(calls) > 1
    assert [d["reason"].split(":")[0] for d in calls[:2]] == ["call 0 (weak-teacher)", "call 1 (strong-teacher)"]
    # every call renumbers the seed the same way: four problems, the later copies restate them
    assert (direct.descendants, direct.novelty_rejected) == (4, 4 * (len(calls) - 1))
    with pytest.raises(ValueError, match="no such run folder"):
        construction_budgets(tmp_path / "nothing-here")


async def test_budget_stops_cleanly_and_a_larger_budget_continues(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    out = tmp_path / "run"
    tight = Gateway(cache_path=str(tmp_path / "cache.sqlite"), budget=Budget(max_tokens=1500))
    with pytest.raises(BudgetExceeded):
        await run_grow(cfg, SEEDS, out, gateway=tight)
    first = openai_server.request_count
    saved = RunMetrics.model_validate(
        {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k in RunMetrics.model_fields}
    )
    assert saved.usage["teacher"].calls > 0
    metrics = await run_grow(cfg, SEEDS, out)
    assert metrics.qualified == 1 and metrics.seeds_with_trace == 1
    assert metrics.usage["teacher"].calls > saved.usage["teacher"].calls  # usage of both runs is summed
    total = openai_server.request_count
    assert first < total
    openai_server.reset()
    await run_grow(config(openai_server, tmp_path / "fresh"), SEEDS, tmp_path / "reference")
    # work done before the stop was cached: both runs together sent no more than one full run, plus
    # the requests in flight at the stop (they never reached the cache)
    assert openai_server.request_count <= total <= openai_server.request_count + 16


def test_calibrate_command(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": str(i), "question": q, "answer": a}) + "\n"
            for i, (q, a) in enumerate(
                [
                    ("Compute 2 * 3 + 1.", "7"),
                    ("Compute 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8.", "36"),
                    ("Compute 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9.", "45"),
                ]
            )
        )
    )
    out = tmp_path / "annotated.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(problems),
            "--model",
            "target",
            "-n",
            "8",
            "--max-tokens",
            "100",
            "--out",
            str(out),
            "--config",
            str(config_path),
        ],
    )
    assert result.exit_code == 0, result.output
    bands = [row["meta"]["difficulty"]["band"] for row in read_jsonl(out)]
    assert bands == ["stale", "goldilocks", "hard"]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary == {
        "problems": 3,
        "hard": 1,
        "goldilocks": 1,
        "stale": 1,
        "in_budget": 2,
        "qualified": 1,
        "verified_hard": 1,
        "policy": "target",
        "n": 8,
        "budget": 100,
    }
    # a litellm model string with --api-base works too (same server, the world's target agent)
    result = CliRunner().invoke(
        app,
        [
            "calibrate",
            str(problems),
            "--model",
            "openai/target",
            "--api-base",
            openai_server.base_url,
            "-n",
            "4",
            "--max-tokens",
            "30",
            "--out",
            str(out),
            "--config",
            str(config_path),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert (summary["goldilocks"], summary["in_budget"], summary["policy"]) == (1, 1, "openai_target")


def grow_args(server, tmp_path) -> list[str]:
    """`finmbs grow` of SEEDS into tmp_path/run, in the scripted world, its config and seeds written as files."""
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config(server, tmp_path).model_dump(mode="json")))
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(s.model_dump_json(include={"id", "question", "answer"}) + "\n" for s in SEEDS))
    return ["grow", "--seeds", str(seeds), "--out", str(tmp_path / "run"), "--config", str(config_path)]


def test_grow_command_budget_exit_and_resume(tmp_path, openai_server):
    args = grow_args(openai_server, tmp_path)
    result = CliRunner().invoke(app, [*args, "--set", "budget.max_tokens=800"])
    assert result.exit_code == 3 and "raise budget.max_tokens and rerun" in result.output
    assert (tmp_path / "run" / "metrics.json").exists()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "seeds with verified trace" in result.output
    assert "done: 2/2 seeds finished" in result.output  # the progress lines (tests/test_grow_progress.py)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["qualified"] == 1
