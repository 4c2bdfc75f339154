"""Per-seed MBS orchestration and the run loop: seeds concurrently, the run folder, metrics, resume.

`grow_seed(seed, ctx)` is one seed end to end (traces -> decompose -> leaves/compose -> calibrate);
`run_grow` runs many seeds under `seed_concurrency`, saving each finished seed (tree file, qualified,
rejected, done marker) so a killed run resumes where it was; unfinished seeds replay from the
gateway cache.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from finmbs.config import RunConfig, dump_config
from finmbs.executors import Executor, Tick, make_executor, no_tick
from finmbs.llm import Gateway
from finmbs.mbs.compose import synthesize
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import STAGE as DECOMPOSE, decompose
from finmbs.mbs.outcome import SeedOutcome, finish, seed_root, synthetic_trees
from finmbs.records import DecompositionTree, Problem, RoleUsage, RunMetrics, SyntheticTree, TreeNode
from finmbs.runs import (
    CONFIG, METRICS, QUALIFIED, REJECTED, SEEDS, JsonlLog, RunDir, atomic_write_json, atomic_write_text, read_jsonl,
)

Grower = Callable[[Problem, Context], Awaitable[SeedOutcome]]
METRICS_EVERY_S = 30.0


async def grow_seed(seed: Problem, ctx: Context) -> SeedOutcome:
    """MagicBeanStalk on one seed."""
    ledger = Ledger(seed.id)
    root = await seed_root(ctx, seed, ledger)
    if root is None:
        return await finish(ctx, seed, None, [], ledger.rejected[-1].reason, ledger)
    tree = DecompositionTree(seed_id=seed.id, root=root)
    if not await decompose(ctx, root, ledger):
        ledger.reject(seed, DECOMPOSE, root.decisions[-1].reason)
        return await finish(ctx, seed, tree, [], root.decisions[-1].reason, ledger)
    versions, orphans = await synthesize(ctx, root, ledger)
    return await finish(ctx, seed, tree, synthetic_trees(seed.id, versions + orphans), None, ledger)


def growers() -> dict[str, Grower]:
    from finmbs.baselines.direct import grow_seed_direct

    return {"mbs": grow_seed, "direct": grow_seed_direct}


# run folder -----------------------------------------------------------------------------------
def save_seed(run: RunDir, outcome: SeedOutcome, qualified: JsonlLog, rejected: JsonlLog) -> None:
    """Write one finished seed: tree file, qualified and rejected rows, then the done marker."""
    atomic_write_json(run.tree_path(outcome.seed.id), outcome.tree_json())
    qualified.append(outcome.qualified)
    rejected.append(outcome.rejected)
    run.mark_done(outcome.seed.id)


def load_tree(path: Path) -> tuple[DecompositionTree | None, list[SyntheticTree]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    tree = DecompositionTree.model_validate(data["decomposition"]) if data["decomposition"] else None
    return tree, [SyntheticTree.model_validate(t) for t in data["synthetic"]]


def decomposition_attempts(nodes: list[TreeNode]) -> tuple[int, int]:
    """(effective, attempted) decomposition proposals recorded on these nodes."""
    attempts = [d for n in nodes for d in n.decisions if d.stage == DECOMPOSE and "attempt" in d.data]
    return sum(d.outcome == "accepted" for d in attempts), len(attempts)


def collect_metrics(run: RunDir, seeds: list[Problem], method: str) -> RunMetrics:
    """The paper's metrics from the finished seeds' tree files and the dropped nodes in rejected.jsonl."""
    metrics = RunMetrics(method=method, seeds_in=len(seeds))
    nodes: list[TreeNode] = [
        TreeNode.model_validate(row["data"]["node"])
        for row in read_jsonl(run.path(REJECTED)) if row["stage"] == DECOMPOSE and "node" in row.get("data", {})
    ]
    for seed in seeds:
        path = run.tree_path(seed.id)
        if not run.is_done(seed.id) or not path.exists():
            continue
        tree, synthetic = load_tree(path)
        metrics.seeds_with_trace += tree is not None
        nodes.extend(tree.root.walk() if tree else [])
        seen: dict[str, TreeNode] = {n.problem.id: n for t in synthetic for n in t.root.walk() if n.target}
        reports = [n.target for n in seen.values() if n.target]
        metrics.descendants += len(reports)
        metrics.goldilocks += sum(r.band == "goldilocks" for r in reports)
        metrics.qualified += sum(r.qualified for r in reports)
        metrics.seeds_converted += any(r.qualified for r in reports)
    metrics.decompositions_effective, metrics.decompositions_attempted = decomposition_attempts(nodes)
    return metrics


def merge_usage(*usages: dict[str, RoleUsage]) -> dict[str, RoleUsage]:
    """Per-role usage summed field by field (earlier runs of a resumed folder + this one)."""
    total: dict[str, RoleUsage] = {}
    for usage in usages:
        for role, u in usage.items():
            base = total.setdefault(role, RoleUsage())
            for field in RoleUsage.model_fields:
                setattr(base, field, getattr(base, field) + getattr(u, field))
    return total


def previous_totals(run: RunDir) -> tuple[dict[str, RoleUsage], float]:
    """Usage and wall time already spent on this run folder by earlier (killed or finished) runs."""
    path = run.path(METRICS)
    if not path.exists():
        return {}, 0.0
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    usage = {role: RoleUsage.model_validate(u) for role, u in data.get("usage", {}).items()}
    return usage, float(data.get("wall_time_s", 0.0))


async def grow_work(seed: Problem, gateway: Gateway, tick: Tick, *, config: RunConfig, method: str) -> SeedOutcome:
    """One seed as a unit of executor work (module level, so it pickles for Ray)."""
    return await growers()[method](seed, Context(config=config, gateway=gateway, tick=tick))


async def run_grow(
    config: RunConfig, seeds: list[Problem], out: str | Path, *, method: str = "mbs",
    tick: Tick = no_tick, gateway: Gateway | None = None, executor: Executor | None = None,
) -> RunMetrics:
    """Grow every unfinished seed into the run folder `out`; returns the run's metrics.

    Seeds run on `executor` (default: this process, through `gateway`); this process alone writes the
    run folder. A BudgetExceeded or GatewayError stops the run after saving metrics; finished seeds
    stay done.
    """
    growers()[method]  # an unknown method fails before any work
    run = RunDir(out)
    atomic_write_text(run.path(CONFIG), dump_config(config))
    atomic_write_text(run.path(SEEDS), "".join(s.model_dump_json() + "\n" for s in seeds))
    usage_before, wall_before = previous_totals(run)
    own_executor = executor is None
    executor = executor or make_executor("local", config, gateway=gateway)
    qualified, rejected = JsonlLog(run.path(QUALIFIED)), JsonlLog(run.path(REJECTED), key="problem.id")
    start = last_metrics = time.monotonic()

    def write_metrics() -> RunMetrics:
        metrics = collect_metrics(run, seeds, method)
        metrics.usage = merge_usage(usage_before, executor.usage)
        metrics.wall_time_s = wall_before + time.monotonic() - start
        atomic_write_json(run.path(METRICS), metrics.summary())
        return metrics

    def on_result(seed: Problem, outcome: SeedOutcome) -> None:
        nonlocal last_metrics
        save_seed(run, outcome, qualified, rejected)
        tick("seeds")
        if time.monotonic() - last_metrics > METRICS_EVERY_S:
            last_metrics = time.monotonic()
            write_metrics()

    todo = [s for s in seeds if not run.is_done(s.id)]
    try:
        await executor.map(partial(grow_work, config=config, method=method), todo,
                           concurrency=config.seed_concurrency, on_result=on_result, tick=tick)
    finally:
        metrics = write_metrics()
        if own_executor:
            executor.close()
    return metrics
