"""Executors: the Ray executor gives exactly the local executor's outputs in the scripted world, a
killed Ray worker's seeds are retried without duplicates, and `--executor ray` works on grow,
calibrate and eval. One local Ray cluster (2 CPUs) serves the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import Budget, Endpoint, RunConfig
from finmbs.evaluate import EvalError
from finmbs.evaluate.benchmarks import load_benchmark
from finmbs.evaluate.run import EvalSettings, run_eval
from finmbs.executors import ExecutorError, make_executor
from finmbs.executors.local import LocalExecutor
from finmbs.executors.ray import RayExecutor, budget_share, endpoint_share
from finmbs.llm import BudgetExceeded, Gateway
from finmbs.records import Problem
from finmbs.runs import UsageLedger, read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.testing.server import Request, ScriptedOpenAIServer
from finmbs.testing.world import Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
QUESTIONS = ["(2 + 3) * (4 + 1)", "(1 + 6) * (2 + 2)", "(3 + 3) * (5 + 1)"]  # no shared subproblems
SEEDS = [Problem(id=f"q{i}", question=f"Compute {q}.", answer=str(eval(q))) for i, q in enumerate(QUESTIONS)]  # noqa: S307
SEEDS.append(Problem(id="bad", question="Compute 7 * 6.", answer="41"))  # no trace verifies
runner = CliRunner()


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers run this module's die_once
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def world():
    with ScriptedOpenAIServer(World(agents=dict(AGENTS))) as server:
        yield server


def config(server, cache: Path, **fields) -> RunConfig:
    cfg = world_config(
        server.base_url,
        ["weak-teacher", "strong-teacher"],
        ["s1", "s2"],
        "target",
        str(cache),
        Nt=2,
        N=8,
        N_leaf=2,
        L=100,
    )
    return cfg.model_copy(update=fields)


def outputs(out: Path) -> dict:
    """Everything a run folder holds except wall time (rows sorted: workers finish in any order), and
    except transport incidents: a request that timed out on a loaded machine and was sent again counts
    a retry in one run and not in the other (the requests the server answered are compared apart)."""
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("wall_time_s")
    for stage in metrics["stages"].values():  # model seconds are timing too
        stage.pop("model_seconds")
    for usage in metrics["usage"].values():
        usage.pop("retries"), usage.pop("errors")
    rows = {
        name: sorted(json.dumps(r, sort_keys=True) for r in read_jsonl(out / name))
        for name in ("qualified.jsonl", "rejected.jsonl")
    }
    counts = {name: len(r) for name, r in rows.items()}
    trees = {p.name: json.loads(p.read_text()) for p in sorted((out / "trees").iterdir())}
    return {
        "metrics": metrics,
        **rows,
        "counts": counts,
        "trees": trees,
        "done": sorted(p.name for p in (out / "done").iterdir()),
    }


def differences(got: object, want: object, path: str = "") -> list[str]:
    """Where two JSON-like values differ (a failure names the field, not only "dicts differ")."""
    if isinstance(got, dict) and isinstance(want, dict):
        return [
            d
            for key in sorted(set(got) | set(want), key=str)
            for d in differences(got.get(key), want.get(key), f"{path}.{key}")
        ]
    return [] if got == want else [f"{path or '.'}: {str(got)[:200]} != {str(want)[:200]}"]


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """The local executor's run: outputs and the requests it sent."""
    tmp = tmp_path_factory.mktemp("local")
    before = world.request_count
    asyncio.run(run_grow(config(world, tmp / "cache.sqlite"), SEEDS, tmp / "run"))
    return outputs(tmp / "run"), world.request_count - before


def executor_args(executor: str) -> list[str]:
    return ["--executor", executor, *(["--ray-workers", "1"] if executor == "ray" else [])]


def write_config(cfg: RunConfig, path: Path) -> Path:
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    return path


def test_ray_grow_gives_the_local_outputs(ray_cluster, world, reference, tmp_path):
    expected, requests = reference
    assert expected["counts"] == {"qualified.jsonl": 3, "rejected.jsonl": 10} and len(expected["trees"]) == 4
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("".join(s.model_dump_json() + "\n" for s in SEEDS))
    cfg = write_config(config(world, tmp_path / "cache.sqlite"), tmp_path / "run.yaml")
    before = world.request_count
    args = [
        "grow",
        "--seeds",
        str(seeds),
        "--out",
        str(tmp_path / "run"),
        "--config",
        str(cfg),
        "--executor",
        "ray",
        "--ray-workers",
        "2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert world.request_count - before == requests  # the same LLM calls, from other processes
    got = outputs(tmp_path / "run")
    assert got == expected, differences(got, expected)  # usage per role included
    assert ray_cluster.is_initialized()  # a cluster the command did not start is left running

    # resume: a finished folder sends nothing and changes nothing
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert world.request_count - before == requests
    assert outputs(tmp_path / "run")["counts"] == expected["counts"]


async def die_once(seed, gateway, tick, *, work, marker: str, victim: str):
    """The work, but the worker process dies (once) right after finishing the victim seed."""
    outcome = await work(seed, gateway, tick)
    if seed.id == victim and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return outcome


class DyingOnce(RayExecutor):
    def __init__(self, config: RunConfig, marker: Path, victim: str, **kwargs):
        super().__init__(config, **kwargs)
        self.die = {"marker": str(marker), "victim": victim}

    async def map(self, work, items, **kwargs):
        await super().map(partial(die_once, work=work, **self.die), items, **kwargs)


async def test_a_killed_worker_is_retried_without_duplicates(ray_cluster, world, reference, tmp_path):
    expected, requests = reference
    cfg = config(world, tmp_path / "cache.sqlite", seed_concurrency=1)  # the victim dies alone
    marker = tmp_path / "died"
    before = world.request_count
    executor = DyingOnce(cfg, marker, "q1", workers=2)
    await run_grow(cfg, SEEDS, tmp_path / "run", executor=executor)
    pids = {pid for _worker, pid in executor._usage}
    assert len(pids) == 3 and int(marker.read_text()) in pids  # the dead worker's paid calls count, and its restart
    assert world.request_count - before == requests  # the retried seed replayed from the cache
    got = outputs(tmp_path / "run")
    assert got["counts"] == expected["counts"]  # no duplicate rows
    for key in ("qualified.jsonl", "rejected.jsonl", "trees", "done"):
        assert got[key] == expected[key]
    metrics, want = got["metrics"], expected["metrics"]
    accounting = ("usage", "cache_hits")  # the retried seed's calls were answered from the cache
    assert {k: v for k, v in metrics.items() if k not in accounting} == {
        k: v for k, v in want.items() if k not in accounting
    }
    assert metrics["cache_hits"] > 0


def test_ray_calibrate_and_eval_match_local(ray_cluster, world, reference, tmp_path, shared_data):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(s.model_dump_json() + "\n" for s in SEEDS))
    cfg = write_config(config(world, tmp_path / "cache.sqlite"), tmp_path / "run.yaml")
    for executor in ("local", "ray"):
        out = tmp_path / f"{executor}.jsonl"
        result = runner.invoke(
            app,
            [
                "calibrate",
                str(problems),
                "--out",
                str(out),
                "-n",
                "8",
                "--max-tokens",
                "100",
                "--config",
                str(cfg),
                "--set",
                f"cache_path={tmp_path / executor}.sqlite",
                *executor_args(executor),
            ],
        )
        assert result.exit_code == 0, result.output
    local, ray = (tmp_path / "local.jsonl").read_text(), (tmp_path / "ray.jsonl").read_text()
    assert local == ray and len(local.splitlines()) == 4  # same rows, same order
    assert json.loads((tmp_path / "ray.summary.json").read_text())["stale"] == 3

    def aime(request: Request) -> str:  # sample i of every question: correct when i is even
        answers = {"Every morning Aya": 204, "Let $ABC$ be a triangle": 113, "regular octagon": 371}
        answer = next(a for marker, a in answers.items() if marker in request.text)
        return f"\\boxed{{{answer + request.body['seed'] % 2}}}"

    world.handler = aime
    try:
        results = {}
        for executor in ("local", "ray"):
            out = tmp_path / f"eval-{executor}.json"
            result = runner.invoke(
                app,
                [
                    "eval",
                    "aime2024",
                    "--model",
                    "openai/policy",
                    "--api-base",
                    world.base_url,
                    "--data",
                    str(shared_data / "aime2024"),
                    "-n",
                    "4",
                    "--max-tokens",
                    "64",
                    "--limit",
                    "3",
                    "--k",
                    "1,2",
                    "--out",
                    str(out),
                    "--set",
                    f"cache_path={tmp_path / executor}-eval.sqlite",
                    *executor_args(executor),
                ],
            )
            assert result.exit_code == 0, result.output
            data = json.loads(out.read_text())
            results[executor] = {k: v for k, v in data.items() if k not in ("created", "wall_time_s")}
    finally:
        world.handler = World(agents=dict(AGENTS))
    assert results["local"] == results["ray"]
    assert results["ray"]["metrics"]["overall"]["pass_at"]["pass@1"]["value"] == 0.5


async def call_then_wait(item, gateway, tick, *, endpoint: Endpoint, release: str):
    """One paid call, then held in flight until the file `release` exists."""
    await gateway.generate(endpoint, role="target", messages=[{"role": "user", "content": f"item {item}"}])
    while not os.path.exists(release):
        await asyncio.sleep(0.05)
    return item


def ledger_samples(path: Path) -> int:
    """Target samples received (paid calls) in a usage ledger: the last snapshot of each session, summed."""
    last = {row["session"]: row["usage"] for row in read_jsonl(path)}
    return sum(u.get("target", {}).get("samples", 0) for u in last.values())


async def test_ray_workers_report_every_paid_call_while_items_are_in_flight(
    ray_cluster, openai_server, make_endpoint, tmp_path
):
    cfg = world_config(openai_server.base_url, ["t"], ["s"], "p", str(tmp_path / "cache.sqlite"))
    ledger, release = UsageLedger(tmp_path / "usage.jsonl"), tmp_path / "release"
    work = partial(call_then_wait, endpoint=make_endpoint("policy"), release=str(release))
    results: list[int] = []
    with RayExecutor(cfg, workers=2) as executor:
        executor.on_usage = lambda: ledger.write(executor.usage)  # as a run wires its usage.jsonl
        task = asyncio.create_task(
            executor.map(work, [1, 2, 3], concurrency=2, on_result=lambda item, result: results.append(result))
        )
        for _ in range(1200):  # the three paid calls reach the ledger while no item has returned
            if ledger_samples(tmp_path / "usage.jsonl") == 3 or task.done():
                break
            await asyncio.sleep(0.05)
        assert (ledger_samples(tmp_path / "usage.jsonl"), results, task.done()) == (3, [], False)
        assert openai_server.request_count == 3 and executor.usage["target"].samples == 3
        release.write_text("")
        await asyncio.wait_for(task, 120)
    assert sorted(results) == [1, 2, 3] and ledger_samples(tmp_path / "usage.jsonl") == 3


def test_limits_and_budget_are_shared_out_and_bad_options_are_named(ray_cluster, tmp_path):
    endpoint = Endpoint(name="t", model="openai/t", max_concurrency=9, requests_per_minute=600, tokens_per_minute=None)
    share = endpoint_share(endpoint, 2)
    assert (share.max_concurrency, share.requests_per_minute, share.tokens_per_minute) == (5, 300, None)
    assert budget_share(Budget(max_tokens=1001, max_cost_usd=3.0), 2) == Budget(max_tokens=500, max_cost_usd=1.5)
    cfg = world_config("http://127.0.0.1:9/v1", ["t"], ["s"], "p", str(tmp_path / "c.sqlite"))
    with pytest.raises(ExecutorError, match="need --executor ray"):
        make_executor("local", cfg, ray_workers=2)
    with pytest.raises(ExecutorError, match="exceeds the 2 CPUs"):
        RayExecutor(cfg, workers=3)
    local = make_executor("local", cfg)
    assert isinstance(local, LocalExecutor) and isinstance(local.gateway, Gateway)
    local.close()

    # what the work raises in a worker reaches the caller as itself (the CLI turns it into one line)
    with RayExecutor(cfg, workers=1) as executor:
        settings = EvalSettings(mode="retrieval", n=1, temperature=1.0, max_tokens=8, k=[1])
        with pytest.raises(EvalError, match="--executor local"):
            run_eval(load_benchmark("financebench"), settings, cfg, cfg.roles.target, None, executor=executor)
        with pytest.raises(BudgetExceeded, match="token budget spent"):
            asyncio.run(executor.map(spent, [1, 2, 3], concurrency=2, on_result=lambda item, result: None))


async def spent(item, gateway, tick):
    raise BudgetExceeded("token budget spent: 10 >= 10")


def test_out_of_order_usage_snapshots_keep_the_newest():
    from finmbs.executors.ray import latest_usage
    from finmbs.records import RoleUsage

    newer = {"target": RoleUsage(calls=12, completion_tokens=12), "judge": RoleUsage(calls=1)}
    older = {"target": RoleUsage(calls=12, completion_tokens=8)}
    assert latest_usage(newer, older) == latest_usage(older, newer) == newer
