"""What every stage shares: the run config, the gateway, progress, and a per-seed ledger of rejections
and meter of tokens."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from finmbs.config import Endpoint, RunConfig, StageParams
from finmbs.executors import Tick, no_tick
from finmbs.llm import Gateway
from finmbs.records import Problem, Rejection


TARGET_ROLE = "target"
OTHER_STAGE = "other"
SECONDS = "model_seconds"
CURRENT_STAGE: ContextVar[str | None] = ContextVar("finmbs_stage", default=None)


@contextmanager
def in_stage(name: str) -> Iterator[None]:
    """Account the model calls made inside (tasks started inside too) to stage `name`; an enclosing
    stage keeps them (a decomposition child's trace counts to the decomposition, not to traces)."""
    if CURRENT_STAGE.get() is not None:
        yield
        return
    token = CURRENT_STAGE.set(name)
    try:
        yield
    finally:
        CURRENT_STAGE.reset(token)


class SeedGateway:
    """The run's gateway as one seed sees it: every call passes through, and its tokens (the prompt
    once, every sample's completion) are counted per role; cached samples count too, so the count is
    what constructing this seed's problems costs whether or not a cache saved the calls. Per stage
    (`in_stage`) it also counts requests, tokens and seconds spent waiting on the model (concurrent
    requests overlap, so a stage's seconds can exceed its wall time)."""

    def __init__(self, gateway: Gateway):
        self.inner = gateway
        self.tokens: Counter[str] = Counter()
        self.stages: dict[str, Counter[str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, endpoint: Endpoint, *, role: str, **request: Any) -> list:
        start = time.monotonic()
        samples = await self.inner.generate(endpoint, role=role, **request)
        prompt = max((s.prompt_tokens for s in samples), default=0)  # one request: its prompt counts once
        tokens = prompt + sum(s.completion_tokens for s in samples)
        self.tokens[role] += tokens
        stage = self.stages.setdefault(CURRENT_STAGE.get() or OTHER_STAGE, Counter())
        stage.update({"requests": 1, "tokens": tokens, SECONDS: time.monotonic() - start})
        return samples

    structured = Gateway.structured  # its generate calls come back through this meter


@dataclass
class Context:
    """Shared by all seeds of a run: config, the one gateway, and a progress callback `tick(stage)`."""

    config: RunConfig
    gateway: Gateway
    tick: Tick = no_tick
    excluded_documents: frozenset[str] = frozenset()  # never re-grounded on: other seeds', held-out ones

    @property
    def stages(self) -> StageParams:
        return self.config.stages

    @property
    def teachers(self) -> list[Endpoint]:
        return self.config.roles.teachers

    @property
    def students(self) -> list[Endpoint]:
        """Strongest first (S1..SJ)."""
        return self.config.roles.students

    @property
    def weakest(self) -> Endpoint:
        return self.config.roles.students[-1]

    def for_seed(self) -> Context:
        """This context with a fresh per-seed token meter on its gateway."""
        inner = self.gateway.inner if isinstance(self.gateway, SeedGateway) else self.gateway
        return Context(config=self.config, gateway=SeedGateway(inner), tick=self.tick,  # type: ignore[arg-type]
                       excluded_documents=self.excluded_documents)

    def tokens(self) -> dict[str, int]:
        """Tokens per role spent through this context's meter (empty without one)."""
        return dict(self.gateway.tokens) if isinstance(self.gateway, SeedGateway) else {}

    def stage_usage(self) -> dict[str, dict[str, float]]:
        """Requests, tokens and model seconds per stage spent through this context's meter."""
        if not isinstance(self.gateway, SeedGateway):
            return {}
        return {stage: {k: round(v, 3) for k, v in c.items()} for stage, c in self.gateway.stages.items()}

    def construction_tokens(self) -> int:
        """Tokens spent constructing problems: every role but the target policy's calibration."""
        return sum(n for role, n in self.tokens().items() if role != TARGET_ROLE)


@dataclass
class Ledger:
    """One seed's record of every candidate that did not make it, with stage and reason."""

    seed_id: str
    rejected: list[Rejection] = field(default_factory=list)

    def reject(self, problem: Problem, stage: str, reason: str, **data: Any) -> None:
        self.rejected.append(Rejection(problem=problem, stage=stage, reason=reason, data=data))
