"""Executors: where the per-item work of `grow` (seeds), `calibrate` and `eval` (problems) runs.

A unit of work is an async function `work(item, gateway, tick) -> result` (bind its other arguments
with `functools.partial`; under Ray it must pickle). An executor runs it over items, at most
`concurrency` at a time per worker, and hands each result to `on_result(item, result)` in the
calling process, which alone writes the run folder: outputs, done markers and resume behave the
same whatever the executor. `executor.usage` is the per-role LLM accounting of the work so far, and
`executor.on_usage` (when set) is called in the calling process after every paid call, wherever it ran.

    local  (default) one process, one event loop, one gateway
    ray    items sharded over Ray actors, each with its own gateway on the same config and cache
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar

from finmbs.config import RunConfig
from finmbs.errors import FinmbsError
from finmbs.llm import Gateway
from finmbs.records import RoleUsage

T = TypeVar("T")
Tick = Callable[..., None]
Work = Callable[[Any, Gateway, Tick], Awaitable[Any]]
ExecutorName = Literal["local", "ray"]


class ExecutorError(FinmbsError, RuntimeError):
    """The executor could not run the work (a worker kept dying, no cluster to join)."""


def no_tick(stage: str, advance: int = 1) -> None:
    return None


class Executor(Protocol):
    usage: dict[str, RoleUsage]
    on_usage: Callable[[], None] | None  # called here after every change to `usage` (a usage ledger's hook)
    in_process: bool  # True when the work runs in this process (it may then hold unpicklable objects)

    async def map(
        self,
        work: Work,
        items: Sequence[T],
        *,
        concurrency: int,
        on_result: Callable[[T, Any], None],
        tick: Tick = no_tick,
    ) -> None: ...

    def close(self) -> None: ...


def make_executor(
    name: ExecutorName,
    config: RunConfig,
    *,
    gateway: Gateway | None = None,
    ray_address: str | None = None,
    ray_workers: int | None = None,
) -> Executor:
    """The executor named on the command line (`--executor local|ray`)."""
    if name == "ray":
        from finmbs.executors.ray import RayExecutor

        return RayExecutor(config, address=ray_address, workers=ray_workers)
    if ray_address or ray_workers:
        raise ExecutorError("--ray-address and --ray-workers need --executor ray")
    from finmbs.executors.local import LocalExecutor

    return LocalExecutor(gateway or Gateway.from_config(config), own_gateway=gateway is None)
