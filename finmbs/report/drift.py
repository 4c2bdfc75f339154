"""The report's drift section: how a run's pool moved between bands across the policies `finmbs requalify`
screened it with (RUN/requalify/history.jsonl), per domain and per seed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from finmbs.records import PassRate, Problem
from finmbs.report.charts import Chart, bar_chart
from finmbs.runs.load import read_records
from finmbs.runs.requalify import (
    BANDS,
    HISTORY,
    POOL,
    Moves,
    moves,
    read_history,
    requalify_folder,
    seed_of,
    session_key,
    session_label,
)


@dataclass
class Session:
    """One policy's measurement of the pool (policy, weights, N, L): its band counts."""

    label: str
    source: str
    bands: dict[str, int]


@dataclass
class DriftStep:
    """From one session to the next: the problems both measured, and where they moved, overall and per group."""

    before: str
    after: str
    problems: int
    total: Moves
    by_domain: dict[str, Moves]
    by_seed: dict[str, Moves]


@dataclass
class DriftView:
    sessions: list[Session]
    steps: list[DriftStep]


def drift_view(root: Path) -> DriftView | None:
    """The drift of the pool requalify keeps for the run at `root`, or None when it was never requalified."""
    folder = requalify_folder(root)
    if not (folder / HISTORY).is_file():
        return None
    history = read_history(folder / HISTORY)
    problems = read_records(folder / POOL, Problem)
    by_session: dict[str, dict[str, PassRate]] = {}
    for item in history:
        by_session.setdefault(session_key(item), {})[item.problem_id] = item
    sessions = [
        Session(
            label=session_label(next(iter(found.values()))),
            source=next(iter(found.values())).source,
            bands={band: sum(e.band == band for e in found.values()) for band in BANDS},
        )
        for found in by_session.values()
    ]
    steps = []
    pairs = list(zip(sessions, by_session.values()))
    for (first, before), (then, after) in zip(pairs, pairs[1:]):
        both = [p for p in problems if p.id in before and p.id in after]
        total = moves(both, after, before, lambda p: "all").get("all", Moves())
        steps.append(
            DriftStep(
                before=first.label,
                after=then.label,
                problems=len(both),
                total=total,
                by_domain=moves(both, after, before, lambda p: p.domain),
                by_seed=moves(both, after, before, seed_of),
            )
        )
    return DriftView(sessions=sessions, steps=steps)


def drift_charts(view: DriftView | None) -> list[Chart]:
    """For the latest step: the problems that moved into each band, per domain and per seed."""
    if view is None or not view.steps:
        return []
    step = view.steps[-1]
    charts = []
    for what, groups in (("domain", step.by_domain), ("seed", step.by_seed)):
        chart = bar_chart(
            f"Moved per {what}: {step.before} -> {step.after}",
            [
                (name, [(band, moved.into[band]) for band in ("stale", "goldilocks", "hard")])
                for name, moved in groups.items()
            ],
            x_title=what,
            width=max(460, min(1100, 60 + 70 * len(groups))),
        )
        chart.note = "bars: problems that moved into stale, Goldilocks or hard; unchanged ones are not drawn."
        charts.append(chart)
    return charts
