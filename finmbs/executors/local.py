"""The default executor: every item in this process's event loop, through one shared gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from finmbs.executors import Tick, Work, no_tick
from finmbs.llm import Gateway
from finmbs.records import RoleUsage

T = TypeVar("T")


async def first_failure(coroutines: list[Coroutine[Any, Any, None]]) -> None:
    """Run all; on the first exception cancel the rest and raise it."""
    tasks = [asyncio.create_task(c) for c in coroutines]
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        if task.exception():
            raise task.exception()  # type: ignore[misc]


class LocalExecutor:
    """`concurrency` items at a time in one event loop; the gateway's limits hold for the whole run."""

    in_process = True

    def __init__(self, gateway: Gateway, *, own_gateway: bool = False):
        self.gateway, self.own_gateway = gateway, own_gateway

    @property
    def usage(self) -> dict[str, RoleUsage]:
        return self.gateway.usage

    @property
    def on_usage(self) -> Callable[[], None] | None:
        return self.gateway.on_usage

    @on_usage.setter
    def on_usage(self, hook: Callable[[], None] | None) -> None:
        self.gateway.on_usage = hook

    async def map(
        self,
        work: Work,
        items: Sequence[T],
        *,
        concurrency: int,
        on_result: Callable[[T, Any], None],
        tick: Tick = no_tick,
    ) -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one(item: T) -> None:
            async with gate:
                result = await work(item, self.gateway, tick)
            on_result(item, result)

        await first_failure([one(item) for item in items])

    def close(self) -> None:
        if self.own_gateway:
            self.gateway.close()

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
