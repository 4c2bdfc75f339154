"""Per-seed MBS orchestration and the run loop: seeds concurrently, the run folder, metrics, resume.

`grow_seed(seed, ctx)` is one seed end to end (traces -> decompose -> leaves/compose -> calibrate);
`run_grow` runs many seeds under `seed_concurrency`, saving each finished seed (tree file, qualified,
rejected, done marker) so a killed run resumes where it was; unfinished seeds replay from the
gateway cache.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from finmbs.baselines.direct import grow_seed_direct
from finmbs.config import RunConfig, dump_config
from finmbs.executors import Executor, Tick, make_executor, no_tick
from finmbs.llm import Gateway
from finmbs.mbs.compose import synthesize
from finmbs.mbs.context import TARGET_ROLE, Context, Ledger
from finmbs.mbs.decompose import ANSWER_LEAK, STAGE as DECOMPOSE, decompose
from finmbs.mbs.novelty import STAGE as NOVELTY
from finmbs.mbs.outcome import SeedOutcome, finish, is_root, seed_root, synthetic_trees
from finmbs.records import DecompositionTree, Problem, RoleUsage, RunMetrics, SyntheticTree, TreeNode, merge_usage
from finmbs.runs import (
    CONFIG, METRICS, QUALIFIED, REJECTED, SEEDS, JsonlLog, RunDir, atomic_write_json, atomic_write_text, read_jsonl,
)

Grower = Callable[[Problem, Context], Awaitable[SeedOutcome]]
METRICS_EVERY_S = 30.0


async def grow_seed(seed: Problem, ctx: Context) -> SeedOutcome:
    """MagicBeanStalk on one seed."""
    ctx, ledger = ctx.for_seed(), Ledger(seed.id)
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
    return {"mbs": grow_seed, "direct": grow_seed_direct}


# run folder -----------------------------------------------------------------------------------
REGROUND = "reground"  # reground.STAGE, named here so metrics need not import the index stack
QUALIFIED_NODES = "qualified_nodes.jsonl"  # keep: all -- qualified non-root nodes, apart from qualified.jsonl


def save_seed(run: RunDir, outcome: SeedOutcome, qualified: JsonlLog, rejected: JsonlLog) -> None:
    """Write one finished seed: tree file, qualified and rejected rows, then the done marker."""
    atomic_write_json(run.tree_path(outcome.seed.id), outcome.tree_json())
    qualified.append(outcome.qualified)
    if outcome.qualified_nodes:
        JsonlLog(run.path(QUALIFIED_NODES)).append(outcome.qualified_nodes)
    rejected.append(outcome.rejected)
    run.mark_done(outcome.seed.id)


def load_tree(path: Path) -> tuple[DecompositionTree | None, list[SyntheticTree], dict[str, int]]:
    """(decomposition, synthetic trees, tokens per role) of one finished seed's tree file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    tree = DecompositionTree.model_validate(data["decomposition"]) if data["decomposition"] else None
    return tree, [SyntheticTree.model_validate(t) for t in data["synthetic"]], data.get("tokens", {})


def decomposition_attempts(nodes: list[TreeNode]) -> tuple[int, int]:
    """(effective, attempted) decomposition proposals recorded on these nodes."""
    attempts = [d for n in nodes for d in n.decisions if d.stage == DECOMPOSE and "attempt" in d.data]
    return sum(d.outcome == "accepted" for d in attempts), len(attempts)


def too_easy(tree: DecompositionTree | None) -> bool:
    return tree is not None and any(d.data.get("too_easy") for d in tree.root.decisions)


def count_rejections(metrics: RunMetrics, rows: list[dict[str, Any]]) -> None:
    """The counted rejections: answer leaks, novelty, re-grounded problems failing verification."""
    checks = Counter((row["stage"], row.get("data", {}).get("check")) for row in rows)
    metrics.answer_leaks = checks[(DECOMPOSE, ANSWER_LEAK)]
    metrics.novelty_rejected = sum(n for (stage, _), n in checks.items() if stage == NOVELTY)
    metrics.reground_unverified = checks[(REGROUND, "verify")]
    metrics.reground_too_easy = checks[(REGROUND, "screen")]


def collect_metrics(run: RunDir, seeds: list[Problem], method: str, keep: str = "roots") -> RunMetrics:
    """The paper's metrics over the synthetic roots of the finished seeds' tree files (other nodes,
    calibrated with keep: all, counted apart) and the rejections in rejected.jsonl."""
    metrics = RunMetrics(method=method, keep=keep, seeds_in=len(seeds))
    rows = list(read_jsonl(run.path(REJECTED)))
    count_rejections(metrics, rows)
    nodes: list[TreeNode] = [
        TreeNode.model_validate(row["data"]["node"])
        for row in rows if row["stage"] == DECOMPOSE and "node" in row.get("data", {})
    ]
    for seed in seeds:
        path = run.tree_path(seed.id)
        if not run.is_done(seed.id) or not path.exists():
            continue
        tree, synthetic, tokens = load_tree(path)
        metrics.seeds_with_trace += tree is not None
        metrics.seeds_too_easy += too_easy(tree)
        metrics.construction_tokens += sum(n for role, n in tokens.items() if role != TARGET_ROLE)
        nodes.extend(tree.root.walk() if tree else [])
        seen: dict[str, TreeNode] = {n.problem.id: n for t in synthetic for n in t.root.walk() if n.target}
        roots = [n.target for n in seen.values() if n.target and is_root(n)]
        others = [n.target for n in seen.values() if n.target and not is_root(n)]
        metrics.descendants += len(roots)
        metrics.goldilocks += sum(r.band == "goldilocks" for r in roots)
        metrics.qualified += sum(r.qualified for r in roots)
        metrics.seeds_converted += any(r.qualified for r in roots)
        metrics.other_descendants += len(others)
        metrics.other_goldilocks += sum(r.band == "goldilocks" for r in others)
        metrics.other_qualified += sum(r.qualified for r in others)
    metrics.decompositions_effective, metrics.decompositions_attempted = decomposition_attempts(nodes)
    return metrics


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
        metrics = collect_metrics(run, seeds, method, config.stages.keep)
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
