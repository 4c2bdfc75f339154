"""`grow` end to end in the scripted world: run folder, exact metrics, direct baseline, budget stop,
and `finmbs calibrate`."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import Budget
from finmbs.llm import BudgetExceeded, Gateway
from finmbs.mbs.pipeline import run_grow
from finmbs.records import Problem, RunMetrics
from finmbs.runs import read_jsonl
from finmbs.testing.world import Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2), "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5), "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
SEEDS = [
    Problem(id="a", question="Compute (2 + 3) * (4 + 1).", answer="25"),
    Problem(id="bad", question="Compute 7 * 6.", answer="41"),  # wrong ground truth: no trace verifies
]


def config(server, tmp_path, **stages):
    server.handler = World(agents=dict(AGENTS))
    stages = {"Nt": 2, "N": 8, "N_leaf": 2, "L": 100, **stages}
    return world_config(server.base_url, ["weak-teacher", "strong-teacher"], ["s1", "s2"], "target",
                        str(tmp_path / "cache.sqlite"), **stages)


def metrics_of(out) -> dict:
    data = json.loads((out / "metrics.json").read_text())
    return {k: v for k, v in data.items() if k not in ("usage", "wall_time_s", "cache_hits")}


async def test_mbs_run_folder_and_exact_metrics(tmp_path, openai_server):
    out = tmp_path / "run"
    metrics = await run_grow(config(openai_server, tmp_path), SEEDS, out)
    # seed a: s2 (weakest) 0/8, s1 4/8 -> evaluated s2; children 2+3, 4+1, 5*5 lift s2 to 8/8: effective.
    # Each leaf: variant of 2 ops (s2 7/8 > 0.8, rejected), variant of 3 ops kept (0/8). One composition
    # (7 ops, target capacity 6 -> 4/8 goldilocks, qualified); the three 3-op leaves are stale (8/8).
    assert metrics_of(out) == {
        "method": "mbs", "seeds_in": 2, "seeds_with_trace": 1, "decompositions_effective": 1,
        "decompositions_attempted": 1, "descendants": 4, "goldilocks": 1, "qualified": 1, "seeds_converted": 1,
        "goldilocks_rate": 0.25, "qualified_rate": 0.25, "seed_conversion": 0.5,
    }
    assert metrics.usage["target"].calls == 4 and metrics.usage["target"].samples == 32
    [qualified] = list(read_jsonl(out / "qualified.jsonl"))
    assert qualified["question"] == "Compute (2 + 3 + 1 + 2) * (4 + 1 + 1 + 2)." and qualified["answer"] == "64"
    assert qualified["provenance"] == {"seed_id": "a", "method": "mbs", "stage": "compose", "tree_path": "0",
                                       "parent_ids": ["a.d0c0.h0v1", "a.d0c1.h0v1", "a.d0c2.h0v1"], "source": None}
    assert qualified["meta"]["difficulty"]["band"] == "goldilocks" and qualified["meta"]["data_source"] == "finmbs/math"
    rejected = list(read_jsonl(out / "rejected.jsonl"))
    assert Counter(r["stage"] for r in rejected) == {"traces": 1, "leaf": 3, "calibrate": 3}
    assert next(r for r in rejected if r["stage"] == "traces")["problem"]["id"] == "bad"
    tree = json.loads((out / "trees" / "a.json").read_text())
    assert set(tree) == {"seed", "decomposition", "synthetic", "dropped"} and tree["dropped"] is None
    assert tree["decomposition"]["root"]["student_accuracy"] == {"s2": 0.0, "s1": 0.5}
    assert [t["root"]["problem"]["id"] for t in tree["synthetic"]] == ["a.s0"]
    dropped = json.loads((out / "trees" / "bad.json").read_text())
    assert dropped["decomposition"] is None and dropped["dropped"].startswith("no verified trace after 2x2 tries")
    assert yaml.safe_load((out / "config.yaml").read_text())["stages"]["N_leaf"] == 2
    assert sorted(p.name for p in (out / "done").iterdir()) == ["a", "bad"]

    # a rerun of a finished folder sends nothing and changes nothing
    before = openai_server.request_count
    again = await run_grow(config(openai_server, tmp_path), SEEDS, out)
    assert openai_server.request_count == before and again.qualified == 1
    assert len(list(read_jsonl(out / "rejected.jsonl"))) == len(rejected)


async def test_direct_baseline_same_filters_and_metrics(tmp_path, openai_server):
    out = tmp_path / "direct"
    await run_grow(config(openai_server, tmp_path, R=2), SEEDS[:1], out, method="direct")
    # 2 rounds x 2 renumbered copies of the 3-op seed: all verified, all stale for the target (capacity 6)
    assert metrics_of(out) | {"goldilocks_rate": 0, "qualified_rate": 0} == {
        "method": "direct", "seeds_in": 1, "seeds_with_trace": 1, "decompositions_effective": 0,
        "decompositions_attempted": 0, "descendants": 4, "goldilocks": 0, "qualified": 0, "seeds_converted": 0,
        "goldilocks_rate": 0, "qualified_rate": 0, "seed_conversion": 0.0,
    }
    tree = json.loads((out / "trees" / "a.json").read_text())
    assert tree["decomposition"]["root"]["children"] == []
    assert [t["root"]["problem"]["question"] for t in tree["synthetic"]] == [
        "Compute (3 + 4) * (5 + 2).", "Compute (4 + 5) * (6 + 3).", "Compute (3 + 4) * (5 + 2).",
        "Compute (4 + 5) * (6 + 3)."]


async def test_budget_stops_cleanly_and_a_larger_budget_continues(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    out = tmp_path / "run"
    tight = Gateway(cache_path=str(tmp_path / "cache.sqlite"), budget=Budget(max_tokens=1500))
    with pytest.raises(BudgetExceeded):
        await run_grow(cfg, SEEDS, out, gateway=tight)
    first = openai_server.request_count
    saved = RunMetrics.model_validate(
        {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k in RunMetrics.model_fields})
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
    problems.write_text("".join(json.dumps({"id": str(i), "question": q, "answer": a}) + "\n" for i, (q, a) in enumerate([
        ("Compute 2 * 3 + 1.", "7"), ("Compute 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8.", "36"),
        ("Compute 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8 + 9.", "45")])))
    out = tmp_path / "annotated.jsonl"
    result = CliRunner().invoke(app, ["calibrate", str(problems), "--model", "target", "-n", "8", "--max-tokens", "100",
                                      "--out", str(out), "--config", str(config_path)])
    assert result.exit_code == 0, result.output
    bands = [row["meta"]["difficulty"]["band"] for row in read_jsonl(out)]
    assert bands == ["stale", "goldilocks", "hard"]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary == {"problems": 3, "hard": 1, "goldilocks": 1, "stale": 1, "in_budget": 2, "qualified": 1,
                       "verified_hard": 1, "policy": "target", "n": 8, "budget": 100}
    # a litellm model string with --api-base works too (same server, the world's target agent)
    result = CliRunner().invoke(app, ["calibrate", str(problems), "--model", "openai/target", "--api-base",
                                      openai_server.base_url, "-n", "4", "--max-tokens", "30", "--out", str(out),
                                      "--config", str(config_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert (summary["goldilocks"], summary["in_budget"], summary["policy"]) == (1, 1, "openai_target")


def test_grow_command_budget_exit_and_resume(tmp_path, openai_server):
    cfg = config(openai_server, tmp_path)
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(s.model_dump_json(include={"id", "question", "answer"}) + "\n" for s in SEEDS))
    args = ["grow", "--seeds", str(seeds), "--out", str(tmp_path / "run"), "--config", str(config_path)]
    result = CliRunner().invoke(app, [*args, "--set", "budget.max_tokens=800"])
    assert result.exit_code == 3 and "raise budget.max_tokens and rerun" in result.output
    assert (tmp_path / "run" / "metrics.json").exists()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "seeds with verified trace" in result.output
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["qualified"] == 1
