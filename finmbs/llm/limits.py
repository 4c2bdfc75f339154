"""Per-endpoint concurrency and rate limits (requests and tokens per minute)."""

from __future__ import annotations

import asyncio
import time


class RateLimiter:
    """A token bucket refilled continuously at `per_minute / 60` units per second."""

    def __init__(self, per_minute: float | None):
        self.rate = per_minute / 60.0 if per_minute else None
        self.capacity = per_minute or 0.0
        self.level = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, amount: float = 1.0) -> None:
        if self.rate is None:
            return
        amount = min(amount, self.capacity)
        async with self._lock:
            while True:
                now = time.monotonic()
                self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
                self.updated = now
                if self.level >= amount:
                    self.level -= amount
                    return
                await asyncio.sleep((amount - self.level) / self.rate)


class EndpointLimits:
    """The concurrency semaphore and the request/token buckets of one endpoint."""

    def __init__(self, max_concurrency: int, rpm: float | None, tpm: float | None):
        self.semaphore = asyncio.Semaphore(max_concurrency)
        self.requests = RateLimiter(rpm)
        self.tokens = RateLimiter(tpm)
        self.max_concurrency = max_concurrency
        self.in_flight = 0

    async def __aenter__(self) -> EndpointLimits:
        await self.semaphore.acquire()
        self.in_flight += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.in_flight -= 1
        self.semaphore.release()
