"""Stage 6 (section 3.4, appendix D): final calibration against the target policy at budget L.

N rollouts: hard (0/N), Goldilocks (1..N-1), stale (N/N). In-budget solvable: at least one correct
rollout that finished with `stop` (a `length`-truncated rollout never counts). Qualified:
Goldilocks AND in-budget. Usable on any problem set: the corpus-filtering baseline.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from finmbs.config import Endpoint, RunConfig, check_endpoints
from finmbs.executors import Executor, Tick, make_executor
from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.solve import CALIBRATE_PURPOSE, rollouts
from finmbs.mbs.stages import Stage
from finmbs.records import DifficultyReport, Problem, Rollout

STAGE = Stage.CALIBRATE


def difficulty(samples: list[Rollout], policy: str, budget: int) -> DifficultyReport:
    """The band and in-budget solvability of N rollouts."""
    n, k = len(samples), sum(1 for r in samples if r.reward == 1.0)
    band = "hard" if k == 0 else "stale" if k == n else "goldilocks"
    in_budget = any(r.reward == 1.0 and r.finish_reason == "stop" for r in samples)
    verified_hard = k == 0 and all(r.finish_reason == "stop" for r in samples)
    return DifficultyReport(
        policy=policy, budget=budget, n=n, k=k, band=band, in_budget=in_budget, verified_hard=verified_hard
    )


async def calibrate(
    ctx: Context,
    problem: Problem,
    *,
    target: Endpoint | None = None,
    n: int | None = None,
    budget: int | None = None,
    purpose: str = CALIBRATE_PURPOSE,
) -> DifficultyReport:
    """The target policy's DifficultyReport on one problem (N rollouts at max_tokens = L), asked with the
    training prompt and drawn fresh: never the samples a student screen of the same model already drew.
    `purpose` (a calibration purpose, `solve.calibration_purpose`) keeps a re-screen's draws apart too."""
    target = target or ctx.config.roles.target
    n, budget = n or ctx.stages.N, budget or ctx.stages.L
    samples = await rollouts(ctx, target, "target", problem, n, max_tokens=budget, purpose=purpose)
    ctx.tick(STAGE)
    return difficulty(samples, target.name, budget)


def annotate(problem: Problem, report: DifficultyReport) -> Problem:
    """A copy of `problem` with meta["difficulty"] set."""
    return problem.model_copy(update={"meta": {**problem.meta, "difficulty": report.model_dump(mode="json")}})


async def calibrate_work(
    problem: Problem,
    gateway: Gateway,
    tick: Tick,
    *,
    config: RunConfig,
    target: Endpoint | None,
    n: int | None,
    budget: int | None,
    purpose: str = CALIBRATE_PURPOSE,
) -> Problem:
    """One problem as a unit of executor work (module level, so it pickles for Ray)."""
    ctx = Context(config=config, gateway=gateway, tick=tick)
    return annotate(problem, await calibrate(ctx, problem, target=target, n=n, budget=budget, purpose=purpose))


async def calibrate_all(
    ctx: Context,
    problems: list[Problem],
    *,
    target: Endpoint | None = None,
    n: int | None = None,
    budget: int | None = None,
    concurrency: int = 8,
    executor: Executor | None = None,
) -> list[Problem]:
    """Annotate every problem with its DifficultyReport (order kept), on `executor` (default: ctx's gateway).
    A missing API key or `${VAR}` of the target is a ConfigError before any call."""
    check_endpoints([("target", target or ctx.config.roles.target)])
    executor = executor or make_executor("local", ctx.config, gateway=ctx.gateway)
    annotated: dict[int, Problem] = {}
    work = partial(calibrate_work, config=ctx.config, target=target, n=n, budget=budget)
    await executor.map(
        work,
        problems,
        concurrency=concurrency,
        tick=ctx.tick,
        on_result=lambda problem, result: annotated.__setitem__(id(problem), result),
    )
    return [annotated[id(p)] for p in problems]


def band_summary(reports: list[DifficultyReport]) -> dict[str, int]:
    """hard / goldilocks / stale counts, in-budget, qualified and verified-hard counts."""
    bands = Counter(r.band for r in reports)
    return {
        "problems": len(reports),
        "hard": bands["hard"],
        "goldilocks": bands["goldilocks"],
        "stale": bands["stale"],
        "in_budget": sum(r.in_budget for r in reports),
        "qualified": sum(r.qualified for r in reports),
        "verified_hard": sum(r.verified_hard for r in reports),
    }
