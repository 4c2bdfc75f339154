"""What every stage shares: the run config, the gateway, progress, and a per-seed ledger of rejections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from finmbs.config import Endpoint, RunConfig, StageParams
from finmbs.executors import Tick, no_tick
from finmbs.llm import Gateway
from finmbs.records import Problem, Rejection


@dataclass
class Context:
    """Shared by all seeds of a run: config, the one gateway, and a progress callback `tick(stage)`."""

    config: RunConfig
    gateway: Gateway
    tick: Tick = no_tick

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


@dataclass
class Ledger:
    """One seed's record of every candidate that did not make it, with stage and reason."""

    seed_id: str
    rejected: list[Rejection] = field(default_factory=list)

    def reject(self, problem: Problem, stage: str, reason: str, **data: Any) -> None:
        self.rejected.append(Rejection(problem=problem, stage=stage, reason=reason, data=data))
