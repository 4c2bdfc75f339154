"""The run loop: many seeds under `seed_concurrency`, each saved as it finishes (tree file, qualified,
rejected, done marker) so a killed run resumes where it was; unfinished seeds replay from the gateway
cache. The one writer holds the folder's lock; the config is recorded (a changed one refused unless
allowed); SIGTERM stops the run after the model calls in flight have returned, so every call the
servers received is on the usage ledger.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from finmbs.config import ConfigError, RunConfig, config_changes, dump_config
from finmbs.executors import Executor, Tick, make_executor, no_tick
from finmbs.ingest.index import shared_index
from finmbs.llm import Gateway
from finmbs.llm.gateway import budget_check
from finmbs.mbs.context import SECONDS, Context
from finmbs.mbs.outcome import SeedOutcome
from finmbs.mbs.pipeline import growers
from finmbs.mbs.reground import excluded_documents
from finmbs.mbs.stages import Progress
from finmbs.records import RULES_VERSION, Problem, RoleUsage, RunMetrics, merge_usage
from finmbs.runs.folder import (
    CONFIG,
    CONFIG_CHANGES,
    CONTAMINATION,
    METRICS,
    QUALIFIED,
    QUALIFIED_NODES,
    REJECTED,
    SEEDS,
    USAGE,
    JsonlLog,
    RunDir,
    UsageLedger,
    atomic_write_json,
    atomic_write_text,
    file_name,
)
from finmbs.runs.load import RunReadError, rules_of
from finmbs.runs.metrics import collect_metrics, screen_model
from finmbs.runs.progress import SEED, STARTED

METRICS_EVERY_S = 30.0  # metrics.json refresh; usage itself reaches usage.jsonl with every call and seed
# SIGTERM: the longest wait for the model calls in flight, well inside the grace period schedulers give
# before SIGKILL (30 s for Kubernetes and Slurm's default KillWait), leaving time to write the folder
DRAIN_S = 20.0
STOP_GRACE_S = 3.0  # seconds the event loop gets to take a SIGTERM up before the main thread is interrupted


def save_seed(run: RunDir, outcome: SeedOutcome, qualified: JsonlLog, rejected: JsonlLog) -> None:
    """Write one finished seed: tree file, qualified and rejected rows, then the done marker."""
    atomic_write_json(run.tree_path(outcome.seed.id), outcome.tree_file())
    qualified.append(outcome.qualified)
    if outcome.qualified_nodes:
        JsonlLog(run.path(QUALIFIED_NODES)).append(outcome.qualified_nodes)
    rejected.append(outcome.rejected)
    run.mark_done(outcome.seed.id)


def previous_totals(run: RunDir, ledger: UsageLedger) -> tuple[dict[str, RoleUsage], float, Counter[str]]:
    """Usage, wall time and model seconds per stage already spent on this run folder by earlier
    (killed or finished) runs.

    Usage comes from the ledger (every paid call, even of a killed run); a folder written before the
    ledger existed falls back to its metrics.json. Stage seconds count the seeds those runs finished.
    """
    path = run.path(METRICS)
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if ledger.before:
        snapshots = [{role: RoleUsage.model_validate(u) for role, u in s.items()} for s in ledger.before.values()]
        usage = merge_usage(*snapshots)
    else:
        usage = {role: RoleUsage.model_validate(u) for role, u in data.get("usage", {}).items()}
    seconds = Counter({stage: float(c.get(SECONDS, 0.0)) for stage, c in data.get("stages", {}).items()})
    return usage, float(data.get("wall_time_s", 0.0)), seconds


def spent(usage: dict[str, RoleUsage]) -> tuple[int, float]:
    """(tokens, dollars) of a usage table."""
    return sum(u.prompt_tokens + u.completion_tokens for u in usage.values()), sum(u.cost_usd for u in usage.values())


def check_rules(run: RunDir) -> None:
    """An existing run folder is continued only under the rules it was grown with (`RULES_VERSION`): its
    tree files' decisions and counts would otherwise mix two rule sets. One error naming both versions."""
    path = run.path(METRICS)
    if not path.exists():
        return
    version = rules_of(json.loads(path.read_text(encoding="utf-8")))
    if version != RULES_VERSION:
        raise RunReadError(
            f"{run.root} was grown under finmbs rules version {version}, this finmbs runs version {RULES_VERSION}: "
            "its decisions would be mixed with other rules; grow into a new --out (report and export still read it)"
        )


def record_config(run: RunDir, config: RunConfig, allow_change: bool) -> None:
    """Write config.yaml; on an existing folder refuse a changed config unless allowed, then log the change."""
    path, text = run.path(CONFIG), dump_config(config)
    if path.exists():
        changes = config_changes(yaml.safe_load(path.read_text(encoding="utf-8")) or {}, yaml.safe_load(text))
        if changes and not allow_change:
            shown = "; ".join(changes[:3]) + (f" (+{len(changes) - 3} more)" if len(changes) > 3 else "")
            raise ConfigError(
                f"the config differs from the one {run.root} was grown with: {shown}; use a new --out, "
                "or pass --allow-config-change to continue it with the new config"
            )
        if changes:
            row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "changes": changes}
            with run.path(CONFIG_CHANGES).open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")
    atomic_write_text(path, text)


async def grow_work(
    seed: Problem,
    gateway: Gateway,
    tick: Tick,
    *,
    config: RunConfig,
    method: str,
    excluded: frozenset[str] = frozenset(),
    peers: tuple[Problem, ...] = (),
) -> SeedOutcome:
    """One seed as a unit of executor work (module level, so it pickles for Ray). The seed's id is set in
    its task for the progress lines (`progress.SEED`: the engine's ticks name no seed), and a first tick says
    it started. `peers`: the run's seeds, in order (the engine's `chained` operator draws on them)."""
    SEED.set(seed.id)
    tick(STARTED)
    ctx = Context(config=config, gateway=gateway, tick=tick, excluded_documents=excluded, peers=peers)
    return await growers()[method](seed, ctx)


def regrounds(config: RunConfig, seeds: list[Problem], method: str) -> bool:
    """Whether this run re-grounds (finance seeds; the direct baseline with stages.direct_reground)."""
    return any(s.domain == "finance" for s in seeds) and (method == "mbs" or config.stages.direct_reground)


def record_exclusions(run: RunDir, config: RunConfig, seeds: list[Problem]) -> frozenset[str]:
    """The documents no seed is re-grounded on (every seed's own, every held-out one), written to
    contamination.json; a holdout entry that names no indexed document is warned about once."""
    with shared_index(config.index) as index:
        found = excluded_documents(index, seeds, config.index.holdout)
        docs = {d.doc_id: d for d in index.documents()}
    if found.unmatched:
        warnings.warn(
            f"index.holdout names no indexed document for: {', '.join(found.unmatched)} "
            f"(matched against doc ids, file names, companies and CIKs of {config.index.path})",
            stacklevel=2,
        )
    atomic_write_json(run.path(CONTAMINATION), found.as_json(docs, config.index.holdout))
    return frozenset(found.excluded)


def check_seed_names(seeds: list[Problem]) -> None:
    """Refuse seed ids that would share a file (impossible unless two ids are equal)."""
    names: dict[str, str] = {}
    for seed in seeds:
        name = file_name(seed.id)
        if name in names and names[name] != seed.id:
            raise ValueError(f"seed ids {names[name]!r} and {seed.id!r} map to the same file name {name!r}")
        names[name] = seed.id


async def run_grow(
    config: RunConfig,
    seeds: list[Problem],
    out: str | Path,
    *,
    method: str = "mbs",
    tick: Tick = no_tick,
    gateway: Gateway | None = None,
    executor: Executor | None = None,
    allow_config_change: bool = False,
    on_seed: Callable[[Problem, SeedOutcome], None] | None = None,
) -> RunMetrics:
    """Grow every unfinished seed into the run folder `out`; returns the run's metrics. `on_seed` is called
    with each seed and its outcome once the seed is saved (the command's progress lines).

    Seeds run on `executor` (default: this process, through `gateway`); this process alone writes the
    run folder, and holds its lock meanwhile. A BudgetExceeded or GatewayError stops the run after
    saving metrics; finished seeds stay done. SIGTERM stops it like Ctrl-C (KeyboardInterrupt) once the
    model calls in flight have returned (`sigterm_as_interrupt`), with everything paid for counted. The
    budget covers every run on the folder: a rerun whose folder has spent it stops before any call.
    """
    growers()[method]  # an unknown method fails before any work
    config.check_environment()
    check_seed_names(seeds)
    with RunDir(out) as run:
        return await _grow_locked(run, config, seeds, method, tick, gateway, executor, allow_config_change, on_seed)


async def _grow_locked(
    run: RunDir,
    config: RunConfig,
    seeds: list[Problem],
    method: str,
    tick: Tick,
    gateway: Gateway | None,
    executor: Executor | None,
    allow_config_change: bool,
    on_seed: Callable[[Problem, SeedOutcome], None] | None = None,
) -> RunMetrics:
    check_rules(run)
    record_config(run, config, allow_config_change)
    atomic_write_text(run.path(SEEDS), "".join(s.model_dump_json() + "\n" for s in seeds))
    ledger = UsageLedger(run.path(USAGE))
    usage_before, wall_before, seconds = previous_totals(run, ledger)
    budget_check(config.budget, *spent(usage_before))
    own_executor = executor is None
    executor = executor or make_executor("local", config, gateway=gateway)
    executor.on_usage = lambda: ledger.write(executor.usage)  # every paid call reaches the ledger, wherever it ran
    local_gateway: Gateway | None = getattr(executor, "gateway", None)
    if local_gateway is not None:
        local_gateway.spent_before = spent(usage_before)
    qualified, rejected = JsonlLog(run.path(QUALIFIED)), JsonlLog(run.path(REJECTED), key="problem.id")
    start = last_metrics = time.monotonic()

    def write_metrics() -> RunMetrics:
        metrics = collect_metrics(run, seeds, method, config.stages.keep, screen_model(config))
        metrics.usage = merge_usage(usage_before, executor.usage)
        metrics.wall_time_s = wall_before + time.monotonic() - start
        for stage, spent_s in seconds.items():
            metrics.stages.setdefault(stage, {})[SECONDS] = round(spent_s, 3)
        atomic_write_json(run.path(METRICS), metrics.summary())
        return metrics

    def on_result(seed: Problem, outcome: SeedOutcome) -> None:
        nonlocal last_metrics
        save_seed(run, outcome, qualified, rejected)
        seconds.update({stage: c.get(SECONDS, 0.0) for stage, c in outcome.stages.items()})
        ledger.write(executor.usage)
        if on_seed is not None:
            on_seed(seed, outcome)
        tick(Progress.SEEDS)
        if time.monotonic() - last_metrics > METRICS_EVERY_S:
            last_metrics = time.monotonic()
            write_metrics()

    excluded = record_exclusions(run, config, seeds) if regrounds(config, seeds, method) else frozenset()
    todo = [s for s in seeds if not run.is_done(s.id)]
    if len(todo) < len(seeds):
        tick(Progress.SEEDS, len(seeds) - len(todo))  # finished by an earlier run: progress counts them done
    try:
        with sigterm_as_interrupt(local_gateway):
            await executor.map(
                partial(grow_work, config=config, method=method, excluded=excluded, peers=tuple(seeds)),
                todo,
                concurrency=config.seed_concurrency,
                on_result=on_result,
                tick=tick,
            )
    finally:
        ledger.write(executor.usage)
        executor.on_usage = None
        metrics = write_metrics()
        if own_executor:
            executor.close()
    return metrics


@contextmanager
def sigterm_as_interrupt(gateway: Gateway | None = None) -> Iterator[None]:
    """In the main thread's event loop: SIGTERM (how schedulers stop jobs) stops the run like Ctrl-C
    (KeyboardInterrupt). With the run's in-process `gateway`, no new model call is sent from then on, the
    embedded models stop generating, and the served calls in flight are awaited (up to DRAIN_S) before the
    current task is cancelled, so every call a server received is answered and on the usage ledger;
    without one (work on Ray), or at a second SIGTERM, the task is cancelled at once.

    The handler is Python's own, so it runs in the main thread even while the loop is busy in synchronous
    work (text processing, a long regular-expression match: the engine checks for signals, but holds the GIL,
    so no other thread could step in); it asks the loop to stop and sets an alarm (SIGALRM, handled the same
    way): when the loop has not taken the stop up within STOP_GRACE_S (it is blocked), or at a second SIGTERM
    before it did, KeyboardInterrupt is raised where the main thread is."""
    loop, task, terminated = asyncio.get_running_loop(), asyncio.current_task(), []
    draining: list[asyncio.Task[None]] = []
    stopping: list[bool] = []  # set once the loop ran stop()
    alarms: list[object] = []  # the SIGALRM handler the alarm replaced, once it is set

    async def drain_then_cancel(gateway: Gateway) -> None:
        await gateway.drain(DRAIN_S)
        if task is not None:
            task.cancel()

    def stop() -> None:
        first = not stopping
        stopping.append(True)
        signal.setitimer(signal.ITIMER_REAL, 0)  # the loop took it up: no alarm
        if first and gateway is not None:
            draining.append(loop.create_task(drain_then_cancel(gateway)))
        elif task is not None:
            task.cancel()

    def unanswered(signum: int, frame: object) -> None:  # the alarm: the loop did not take the stop up
        if not stopping:
            raise KeyboardInterrupt("terminated (SIGTERM)")

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.append(True)
        if stopping or len(terminated) == 1:
            loop.call_soon_threadsafe(stop)
            if not stopping:
                alarms.append(signal.signal(signal.SIGALRM, unanswered))
                signal.setitimer(signal.ITIMER_REAL, STOP_GRACE_S)
            return
        raise KeyboardInterrupt("terminated (SIGTERM)")

    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
        installed = True
    except ValueError:  # not the main thread: no signals here
        installed = False
    try:
        yield
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt("terminated (SIGTERM)") from None
        raise
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous)
        if alarms:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, alarms[0])  # type: ignore[arg-type]
        for pending in draining:
            pending.cancel()
        if gateway is not None:
            gateway.resume()
