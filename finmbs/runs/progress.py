"""What a running `finmbs grow` shows: each seed's stage, each qualified problem as it lands, and the time
left estimated from the work done so far, as lines for the terminal and for the run folder's progress.log.

The engine reports progress through its `tick(stage)` callback, which names a stage but not the seed; the
seed comes from `SEED`, a context variable `finmbs.runs.grow.grow_work` sets in the seed's own task (the
engine's subtasks inherit it). On Ray the ticks of a seed arrive after it finished, without the variable:
the seed lines and the estimate then move per finished seed alone.

The estimate (`GrowProgress.eta_s`): a seed's work is its method's stages in order (`METHOD_STAGES`); a
finished seed counts whole, a running one the share of its work its latest stage stands for
(`STAGE_SHARE_CAP` at most, so no running seed counts as done). Stages differ in cost (a quickstart seed
spends most of its time hardening leaves), so that share is learned from the seeds this process finished:
the middle of the stretch of their time the stage took, averaged (`stage_shares`). Before any seed that
reached the stage has finished, it is the stage's place in the list ((index + 1) / stages). Work done by
this process over its elapsed time is the rate; what is left of the seeds it started with, over that rate,
is the time left. Seeds an earlier run finished are neither work done nor work left. The figure is rough
until a seed or two have finished; it is shown from the first stage reached, never before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from finmbs.mbs.stages import METHOD_STAGES
from finmbs.records import DifficultyReport, Problem

SEED: ContextVar[str | None] = ContextVar("finmbs_seed", default=None)  # the seed whose task is running
STARTED = "seed-started"  # a tick grow_work sends as a seed's work begins (no stage: no progress bar)
PROGRESS_LOG = "progress.log"  # in the run folder: the lines the terminal shows, with their times
STAGE_SHARE_CAP = 0.9  # the most of a seed's work a running seed counts for (its last stage may be long)
QUESTION_CHARS = 160  # a qualified problem's question is cut to this on its line (the run folder has it whole)


def short(text: str, limit: int = QUESTION_CHARS) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def duration(seconds: float) -> str:
    """A duration for people: 45 s, 12 min, 1 h 05 min."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"


def why_qualified(problem: Problem) -> str:
    """Why a problem qualified, from its calibration (meta.difficulty): the target's pass rate in the band."""
    try:
        report = DifficultyReport.model_validate(problem.meta.get("difficulty"))
    except ValueError:
        return "qualified (no calibration recorded)"
    budget = "within" if report.in_budget else "over"
    return (
        f"{report.band}: {report.policy} solved {report.k}/{report.n} ({report.success_rate:.0%}), "
        f"{budget} its budget of {report.budget} tokens"
    )


def best(problems: Iterable[Problem], limit: int = 3) -> list[Problem]:
    """The run's best problems: closest to half solved by the target (the middle of the Goldilocks band,
    the most informative to train on), then the longest question (more steps)."""

    def rank(problem: Problem) -> tuple[float, int]:
        try:
            rate = DifficultyReport.model_validate(problem.meta.get("difficulty")).success_rate
        except ValueError:
            rate = 0.0
        return abs(rate - 0.5), -len(problem.question)

    return sorted(problems, key=rank)[:limit]


def stage_shares(state: SeedState, end: float) -> dict[str, float]:
    """For a seed finished at `end`: each stage it reached, the share of its time at the middle of that
    stage's stretch (from its first tick to the next stage's, or to the end)."""
    took = end - state.started
    if took <= 0:
        return {}
    times = sorted(state.entered.items(), key=lambda item: item[1])
    bounds = [t for _, t in times[1:]] + [end]
    return {stage: ((t - state.started) + (b - state.started)) / 2 / took for (stage, t), b in zip(times, bounds)}


@dataclass
class SeedState:
    """One seed of this run: where it is (the latest of its method's stages that ticked) and since when."""

    started: float
    stage: str = ""  # "": none ticked yet, so the seed is in its method's first stage (traces)
    reached: int = -1  # index of `stage` in the method's stages; -1: none yet
    results: int = 0  # ticks of any kind so far (a trace, a student rollout, a proposal): work is moving
    entered: dict[str, float] = field(default_factory=dict)  # when each stage it reached first ticked


@dataclass
class GrowProgress:
    """The state behind the lines: call `tick` from the engine's callback, `finished` as each seed is saved.
    `emit` gets each line (the terminal); `log` (progress.log) gets it with the time in front."""

    seeds: list[Problem]
    method: str
    done_before: int = 0  # seeds an earlier run on the folder finished
    emit: Callable[[str], None] = print
    log: TextIO | None = None
    clock: Callable[[], float] = time.monotonic
    stages: tuple[str, ...] = ()
    running: dict[str, SeedState] = field(default_factory=dict)
    finished_now: int = 0  # seeds this process finished
    qualified: list[Problem] = field(default_factory=list)
    done: set[str] = field(default_factory=set)  # seeds this process finished
    started: float = 0.0
    # per stage, the share of a finished seed's time at the middle of that stage's stretch (`stage_shares`)
    shares: dict[str, list[float]] = field(default_factory=dict)
    # the heartbeat thread reads what the event loop's thread changes
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def __post_init__(self) -> None:
        self.stages = tuple(str(s) for s in METHOD_STAGES[self.method])
        self.started = self.clock()

    # the engine's events -----------------------------------------------------------------------------
    def tick(self, stage: str) -> None:
        """A tick of `stage` in the current seed's task (SEED): a seed starting or reaching a later stage
        gets a line; more ticks of the same stage do not."""
        seed = SEED.get()
        if seed is None:
            return
        with self.lock:
            self._tick(seed, stage)

    def _tick(self, seed: str, stage: str) -> None:
        if seed in self.done:
            return  # a finished seed's task still ticks (the seeds counter, as it is saved)
        if stage != STARTED and stage not in self.stages:
            if seed in self.running:  # a counter (student rollouts, program checks): work moving, no stage
                self.running[seed].results += 1
            return
        state = self.running.get(seed)
        if stage == STARTED or state is None:
            if state is None:
                state = self.running[seed] = SeedState(started=self.clock())
                self.say(f"seed {seed}: started ({self.count_line()})")
            if stage == STARTED:
                return
        state.results += 1
        if stage in self.stages and self.stages.index(stage) > state.reached:
            state.reached, state.stage = self.stages.index(stage), stage
            state.entered[stage] = self.clock()
            step = f"{state.reached + 1}/{len(self.stages)}"
            self.say(f"seed {seed}: stage {stage} ({step}){self.eta_part()}")

    def finished(self, seed: Problem, qualified: list[Problem]) -> None:
        """A seed is saved: a line per qualified problem (question, answer, why), then the seed's own line."""
        with self.lock:
            self._finished(seed, qualified)

    def _finished(self, seed: Problem, qualified: list[Problem]) -> None:
        state = self.running.pop(seed.id, None)
        self.done.add(seed.id)
        self.finished_now += 1
        if state is not None:
            for stage, share in stage_shares(state, self.clock()).items():
                self.shares.setdefault(stage, []).append(share)
        for problem in qualified:
            self.qualified.append(problem)
            self.say(
                f"QUALIFIED {problem.id} (seed {seed.id}): {short(problem.question)}"
                f" | answer: {short(problem.answer, 60)} | why: {why_qualified(problem)}"
            )
        took = f" in {duration(self.clock() - state.started)}" if state else ""
        self.say(f"seed {seed.id}: finished{took}, {len(qualified)} qualified ({self.count_line()}){self.eta_part()}")

    # the estimate --------------------------------------------------------------------------------------
    def share(self, state: SeedState) -> float:
        """The share of a running seed's work its latest stage stands for: learned from the finished seeds
        that reached that stage, else its place in the list."""
        learned = self.shares.get(state.stage)
        share = sum(learned) / len(learned) if learned else (state.reached + 1) / len(self.stages)
        return min(STAGE_SHARE_CAP, share)

    def work_done(self) -> float:
        """Seeds' worth of work this process did: finished seeds whole, running ones by the stage reached."""
        return self.finished_now + sum(self.share(s) for s in self.running.values() if s.reached >= 0)

    def eta_s(self) -> float | None:
        """Seconds left at the rate of the work done so far; None before any stage was reached."""
        todo = len(self.seeds) - self.done_before
        done = self.work_done()
        elapsed = self.clock() - self.started
        if done <= 0 or elapsed <= 0:
            return None
        return max(0.0, (todo - done) * elapsed / done)

    # the lines -----------------------------------------------------------------------------------------
    def count_line(self) -> str:
        finished = self.done_before + self.finished_now
        running, kept = len(self.running), len(self.qualified)
        return f"{finished}/{len(self.seeds)} seeds finished, {running} running, {kept} qualified"

    def all_done(self) -> bool:
        return self.done_before + self.finished_now >= len(self.seeds)

    def eta_part(self) -> str:
        eta = self.eta_s()
        return "" if eta is None or self.all_done() else f"; about {duration(eta)} left"

    def status(self) -> str:
        """The heartbeat line: the counts, what each running seed is doing, the time left."""
        with self.lock:
            return self._status()

    def _status(self) -> str:
        doing = ", ".join(
            f"{seed}: {s.stage or self.stages[0]}, {s.results} results" for seed, s in sorted(self.running.items())
        )
        elapsed = duration(self.clock() - self.started)
        eta = self.eta_s()
        left = "estimating the time left" if eta is None else f"about {duration(eta)} left"
        if self.all_done():
            left = "nothing left"
        return f"{self.count_line()}{f' ({doing})' if doing else ''}; {elapsed} elapsed, {left}"

    def say(self, line: str) -> None:
        self.emit(line)
        if self.log is not None:
            self.log.write(f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')}Z {line}\n")
            self.log.flush()


def open_log(run_folder: Path) -> TextIO:
    """The run folder's progress.log, appended to (a resumed run adds its lines after the earlier ones')."""
    run_folder.mkdir(parents=True, exist_ok=True)
    return (run_folder / PROGRESS_LOG).open("a", encoding="utf-8")
