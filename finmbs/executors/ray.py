"""The Ray executor: items sharded over Ray actors, results written by the calling process.

Each worker is an async Ray actor that builds its own gateway from the run config and runs up to
`concurrency` items at a time, like one local process. Workers on one machine share the sqlite
response cache file (WAL mode); on a multi-node cluster put `cache_path` on a shared filesystem, or
accept per-node caches (a retried item then replays only what its node cached). Each of W workers
gets 1/W of every endpoint's concurrency and rate limits and of the token/cost budget, so the run as
a whole keeps the configured limits. A worker process that dies is restarted by Ray and its
in-flight items are retried (`max_restarts` / `max_task_retries`); their finished LLM calls replay
from the cache. Only the calling process writes the run folder, so a retried item is written once.
Each worker reports its usage to the calling process after every paid call (a long poll per worker,
`Worker.usage_after`), so `on_usage` fires per call as with the local executor: a run stopped while
items are in flight still counts every call their workers paid for.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections import Counter, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from finmbs.config import Budget, Endpoint, RunConfig
from finmbs.executors import ExecutorError, Tick, Work, no_tick
from finmbs.llm import Gateway
from finmbs.llm.cache import ResponseCache
from finmbs.records import RoleUsage, merge_usage

T = TypeVar("T")
MAX_RETRIES = 3


def endpoint_share(endpoint: Endpoint, workers: int) -> Endpoint:
    """One worker's share of an endpoint's concurrency and rate limits."""
    per = {"max_concurrency": max(1, math.ceil(endpoint.max_concurrency / workers))}
    for field in ("requests_per_minute", "tokens_per_minute"):
        limit = getattr(endpoint, field)
        per[field] = limit / workers if limit else None
    return endpoint.model_copy(update=per)


def budget_share(budget: Budget, workers: int) -> Budget:
    """One worker's share of the run's token and cost budget."""
    tokens = max(1, budget.max_tokens // workers) if budget.max_tokens else None
    cost = budget.max_cost_usd / workers if budget.max_cost_usd else None
    return Budget(max_tokens=tokens, max_cost_usd=cost)


class WorkerGateway(Gateway):
    """A worker's gateway: the run's cache file, 1/W of every endpoint's limits and of the budget."""

    def __init__(self, config: RunConfig, workers: int):
        super().__init__(
            cache_path=config.cache_path, budget=budget_share(config.budget, workers), embedded=config.embedded
        )
        self.workers = workers
        for _role, endpoint in config.roles.all():  # import the model clients now: not in the event loop
            self._backend(endpoint)

    def limits(self, endpoint: Endpoint):
        return super().limits(endpoint_share(endpoint, self.workers))


class Worker:
    """A Ray actor: runs items through `work` with its own gateway; returns results with ticks and usage."""

    def __init__(self, config: RunConfig, workers: int, work: Work):
        self.gateway = WorkerGateway(config, workers)
        self.gateway.on_usage = self._accounted
        self.work = work
        self.version = 0  # how many changes the gateway's accounting has had
        self.changed = asyncio.Event()

    def _accounted(self) -> None:
        self.version += 1
        self.changed.set()

    async def usage_after(self, seen: tuple[int, int]) -> tuple[int, int, dict[str, RoleUsage]]:
        """(pid, version, usage) as soon as this process's usage is newer than `seen` = (pid, version):
        the caller's long poll, answered after every paid call (at once for another process's `seen`)."""
        while seen == (os.getpid(), self.version):
            self.changed.clear()
            await self.changed.wait()
        return os.getpid(), self.version, {role: u.model_copy() for role, u in self.gateway.usage.items()}

    async def run(self, item: Any) -> tuple[Any, dict[str, int], int, dict[str, RoleUsage]]:
        ticks: Counter[str] = Counter()

        def tick(stage: str, advance: int = 1) -> None:
            ticks[stage] += advance

        result = await self.work(item, self.gateway, tick)
        usage = {role: u.model_copy() for role, u in self.gateway.usage.items()}
        return result, dict(ticks), os.getpid(), usage


def latest_usage(seen: dict[str, RoleUsage], new: dict[str, RoleUsage]) -> dict[str, RoleUsage]:
    """The newer of two cumulative usage snapshots of one worker, field by field.

    A worker's snapshots only grow, but results (each carrying one) can reach the driver out of order.
    """
    merged = {}
    for role in seen.keys() | new.keys():
        a, b = seen.get(role, RoleUsage()), new.get(role, RoleUsage())
        merged[role] = RoleUsage(
            **{field: max(getattr(a, field), getattr(b, field)) for field in RoleUsage.model_fields}
        )
    return merged


def item_name(item: Any) -> str:
    return str(getattr(item, "id", item))[:80]


class RayExecutor:
    """Items over W Ray actors (`--ray-workers`, default one per CPU of the cluster)."""

    in_process = False

    def __init__(
        self,
        config: RunConfig,
        *,
        address: str | None = None,
        workers: int | None = None,
        max_retries: int = MAX_RETRIES,
    ):
        try:
            import ray
        except ImportError:
            raise ExecutorError("the Ray executor needs Ray: pip install 'finmbs[ray]'") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            options: dict[str, Any] = {"address": address} if address else {"num_cpus": workers}
            try:
                ray.init(include_dashboard=False, logging_level=logging.WARNING, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"cannot start or join the Ray cluster at {address or 'local'}: {exc}") from None
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers or cpus
        if self.workers > cpus:
            self.close()
            raise ExecutorError(f"--ray-workers {self.workers} exceeds the {cpus} CPUs of the Ray cluster")
        self.max_retries = max_retries
        self.config = config.model_copy(update={"cache_path": str(Path(config.cache_path).resolve())})
        ResponseCache(self.config.cache_path).close()  # create it (WAL) here: workers opening a new file at once race
        self._usage: dict[tuple[int, int], dict[str, RoleUsage]] = {}
        self.on_usage: Callable[[], None] | None = None  # called here after every change to `usage`

    @property
    def usage(self) -> dict[str, RoleUsage]:
        """Summed over every worker process (a restarted worker's usage up to its last report counts)."""
        return merge_usage(*self._usage.values())

    def _record(self, worker: int, pid: int, usage: dict[str, RoleUsage]) -> None:
        """Keep a worker process's newest usage snapshot; `on_usage` when it changed the total."""
        before = self._usage.get((worker, pid), {})
        self._usage[(worker, pid)] = latest_usage(before, usage)
        if self._usage[(worker, pid)] != before and self.on_usage is not None:
            self.on_usage()

    def _actors(self, work: Work) -> list[Any]:
        actor = self.ray.remote(Worker).options(
            num_cpus=1, max_restarts=self.max_retries, max_task_retries=self.max_retries
        )
        return [actor.remote(self.config, self.workers, work) for _ in range(self.workers)]

    def _result(self, future: asyncio.Future, item: Any) -> tuple[Any, dict[str, int], int, dict[str, RoleUsage]]:
        """The worker's return value, or the exception the work raised (not Ray's wrapper)."""
        ray = self.ray
        try:
            return future.result()
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, Exception):
                raise exc.cause from None
            raise
        except ray.exceptions.RayActorError as exc:
            raise ExecutorError(
                f"Ray worker died more than {self.max_retries} times on {item_name(item)}: {exc}"
            ) from None

    async def map(
        self,
        work: Work,
        items: Sequence[T],
        *,
        concurrency: int,
        on_result: Callable[[T, Any], None],
        tick: Tick = no_tick,
    ) -> None:
        actors = self._actors(work)
        todo, load = deque(items), [0] * len(actors)
        running: dict[asyncio.Future, tuple[int, T, Any]] = {}
        polls: dict[asyncio.Future, tuple[int, Any]] = {}  # each worker's pending usage report

        def poll(worker: int, seen: tuple[int, int]) -> None:
            ref = actors[worker].usage_after.remote(seen)
            polls[asyncio.wrap_future(ref.future())] = (worker, ref)

        def fill() -> None:
            while todo and min(load) < concurrency:
                worker = load.index(min(load))
                item = todo.popleft()
                ref = actors[worker].run.remote(item)
                running[asyncio.wrap_future(ref.future())] = (worker, item, ref)
                load[worker] += 1

        try:
            for worker in range(len(actors)):
                poll(worker, (0, 0))
            fill()
            while running:
                done, _ = await asyncio.wait([*running, *polls], return_when=asyncio.FIRST_COMPLETED)
                for future in done & polls.keys():
                    worker, _ref = polls.pop(future)
                    if future.exception() is None:  # a dead worker's failure surfaces through its items
                        pid, version, usage = future.result()
                        self._record(worker, pid, usage)
                        poll(worker, (pid, version))
                for future in done & running.keys():
                    worker, item, _ref = running.pop(future)
                    load[worker] -= 1
                    result, ticks, pid, usage = self._result(future, item)
                    self._record(worker, pid, usage)
                    for stage, advance in ticks.items():
                        tick(stage, advance)
                    on_result(item, result)
                fill()
        finally:
            for _worker, _item, ref in running.values():
                self.ray.cancel(ref)
            for future, (_worker, ref) in polls.items():
                future.cancel()
                self.ray.cancel(ref)
            for actor in actors:
                self.ray.kill(actor)

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
