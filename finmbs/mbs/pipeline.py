"""Per-seed MBS orchestration and the run loop: seeds concurrently, the run folder, metrics, resume.

`grow_seed(seed, ctx)` is one seed end to end (traces -> decompose -> leaves/compose -> calibrate);
`run_grow` runs many seeds under `seed_concurrency`, saving each finished seed (tree file, qualified,
rejected, done marker) so a killed run resumes where it was; unfinished seeds replay from the
gateway cache.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from finmbs.config import ConfigError, RunConfig, config_changes, dump_config
from finmbs.executors import Executor, Tick, make_executor, no_tick
from finmbs.llm import Gateway
from finmbs.llm.gateway import budget_check
from finmbs.mbs.compose import synthesize
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.decompose import STAGE as DECOMPOSE, decompose
from finmbs.mbs.outcome import SeedOutcome, finish, seed_root, synthetic_trees
from finmbs.records import DecompositionTree, Problem, RoleUsage, RunMetrics, SyntheticTree, TreeNode
from finmbs.runs import (
    CONFIG, CONFIG_CHANGES, METRICS, QUALIFIED, REJECTED, SEEDS, USAGE, JsonlLog, RunDir, UsageLedger,
    atomic_write_json, atomic_write_text, file_name, read_jsonl,
)

Grower = Callable[[Problem, Context], Awaitable[SeedOutcome]]
METRICS_EVERY_S = 30.0  # metrics.json refresh; usage itself reaches usage.jsonl with every call and seed


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


def previous_totals(run: RunDir, ledger: UsageLedger) -> tuple[dict[str, RoleUsage], float]:
    """Usage and wall time already spent on this run folder by earlier (killed or finished) runs.

    Usage comes from the ledger (every paid call, even of a killed run); a folder written before the
    ledger existed falls back to its metrics.json.
    """
    path = run.path(METRICS)
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if ledger.before:
        snapshots = [{role: RoleUsage.model_validate(u) for role, u in s.items()} for s in ledger.before.values()]
        usage = merge_usage(*snapshots)
    else:
        usage = {role: RoleUsage.model_validate(u) for role, u in data.get("usage", {}).items()}
    return usage, float(data.get("wall_time_s", 0.0))


def spent(usage: dict[str, RoleUsage]) -> tuple[int, float]:
    """(tokens, dollars) of a usage table."""
    return sum(u.prompt_tokens + u.completion_tokens for u in usage.values()), sum(u.cost_usd for u in usage.values())


def record_config(run: RunDir, config: RunConfig, allow_change: bool) -> None:
    """Write config.yaml; on an existing folder refuse a changed config unless allowed, then log the change."""
    path, text = run.path(CONFIG), dump_config(config)
    if path.exists():
        changes = config_changes(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, yaml.safe_load(text))
        if changes and not allow_change:
            shown = "; ".join(changes[:3]) + (f" (+{len(changes) - 3} more)" if len(changes) > 3 else "")
            raise ConfigError(f"the config differs from the one {run.root} was grown with: {shown}; use a new --out, "
                              "or pass --allow-config-change to continue it with the new config")
        if changes:
            row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "changes": changes}
            with run.path(CONFIG_CHANGES).open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
    atomic_write_text(path, text)


async def grow_work(seed: Problem, gateway: Gateway, tick: Tick, *, config: RunConfig, method: str) -> SeedOutcome:
    """One seed as a unit of executor work (module level, so it pickles for Ray)."""
    return await growers()[method](seed, Context(config=config, gateway=gateway, tick=tick))


def check_seed_names(seeds: list[Problem]) -> None:
    """Refuse seed ids that would share a file (impossible unless two ids are equal)."""
    names: dict[str, str] = {}
    for seed in seeds:
        name = file_name(seed.id)
        if name in names and names[name] != seed.id:
            raise ValueError(f"seed ids {names[name]!r} and {seed.id!r} map to the same file name {name!r}")
        names[name] = seed.id


async def run_grow(
    config: RunConfig, seeds: list[Problem], out: str | Path, *, method: str = "mbs",
    tick: Tick = no_tick, gateway: Gateway | None = None, executor: Executor | None = None,
    allow_config_change: bool = False,
) -> RunMetrics:
    """Grow every unfinished seed into the run folder `out`; returns the run's metrics.

    Seeds run on `executor` (default: this process, through `gateway`); this process alone writes the
    run folder, and holds its lock meanwhile. A BudgetExceeded or GatewayError stops the run after
    saving metrics; finished seeds stay done. SIGTERM stops it like Ctrl-C (KeyboardInterrupt), with
    everything paid for counted. The budget covers every run on the folder: a rerun whose folder has
    spent it stops before any call.
    """
    growers()[method]  # an unknown method fails before any work
    config.check_environment()
    check_seed_names(seeds)
    with RunDir(out) as run:
        return await _grow_locked(run, config, seeds, method, tick, gateway, executor, allow_config_change)


async def _grow_locked(
    run: RunDir, config: RunConfig, seeds: list[Problem], method: str, tick: Tick, gateway: Gateway | None,
    executor: Executor | None, allow_config_change: bool,
) -> RunMetrics:
    record_config(run, config, allow_config_change)
    atomic_write_text(run.path(SEEDS), "".join(s.model_dump_json() + "\n" for s in seeds))
    ledger = UsageLedger(run.path(USAGE))
    usage_before, wall_before = previous_totals(run, ledger)
    budget_check(config.budget, *spent(usage_before))
    own_executor = executor is None
    executor = executor or make_executor("local", config, gateway=gateway)
    local_gateway: Gateway | None = getattr(executor, "gateway", None)
    if local_gateway is not None:  # in-process work: every paid call reaches the ledger at once
        local_gateway.spent_before = spent(usage_before)
        local_gateway.on_usage = lambda: ledger.write(local_gateway.usage)
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
        ledger.write(executor.usage)
        tick("seeds")
        if time.monotonic() - last_metrics > METRICS_EVERY_S:
            last_metrics = time.monotonic()
            write_metrics()

    todo = [s for s in seeds if not run.is_done(s.id)]
    try:
        with sigterm_as_interrupt():
            await executor.map(partial(grow_work, config=config, method=method), todo,
                               concurrency=config.seed_concurrency, on_result=on_result, tick=tick)
    finally:
        ledger.write(executor.usage)
        if local_gateway is not None:
            local_gateway.on_usage = None
        metrics = write_metrics()
        if own_executor:
            executor.close()
    return metrics


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """In the main thread's event loop: SIGTERM (how schedulers stop jobs) cancels the current task and
    surfaces as KeyboardInterrupt, so it stops the run exactly like Ctrl-C."""
    loop, task, terminated = asyncio.get_running_loop(), asyncio.current_task(), []

    def stop() -> None:
        terminated.append(True)
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, stop)
        installed = True
    except (RuntimeError, ValueError, NotImplementedError):  # not the main thread, or no signals here
        installed = False
    try:
        yield
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt("terminated (SIGTERM)") from None
        raise
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGTERM)
