"""What the report shows, computed from a run: metrics, bands, stage yields, usage, and per-seed trees."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from finmbs.export.rows import difficulty
from finmbs.mbs.stages import Stage, in_order
from finmbs.records import DifficultyReport, Problem, RoleUsage, SeedTrees, TreeNode
from finmbs.report.drift import DriftView, drift_view
from finmbs.runs.folder import CONTAMINATION
from finmbs.runs.load import Run

BANDS = ("hard", "goldilocks", "stale")


@dataclass
class Status:
    """A node's fate: qualified, rejected (with reasons), or neither yet."""

    qualified: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "qualified" if self.qualified else "rejected" if self.reasons else ""


@dataclass
class SeedView:
    seed: Problem
    trees: SeedTrees | None
    qualified: int
    candidates: int
    loose_rejections: list[tuple[Problem, str, str]]
    failed_outputs: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> str | None:
        return self.trees.dropped if self.trees else None


@dataclass
class FunnelStep:
    """One row of the funnel: a count, its rate against the step it is drawn from, and its bar width (%)."""

    key: str
    label: str
    count: int
    rate: str
    width: float


@dataclass
class ReasonCount:
    """A rejection reason as a short code, how often it occurred, and one full reason as an example."""

    stage: str
    code: str
    count: int
    example: str


@dataclass
class MetricTable:
    """A dict-valued field of metrics.json drawn as a table (e.g. time and tokens per stage)."""

    key: str
    title: str
    columns: list[str]
    rows: list[tuple[str, list[str]]]


@dataclass
class ReportView:
    name: str
    domain: str
    metrics: list[tuple[str, str, str]]
    funnel: list[FunnelStep]
    bands: dict[str, dict[str, int]]
    unknown_band: dict[str, int]
    pass_rates: dict[int, dict[str, int]]
    rollouts: int
    other_n: int
    stages: list[tuple[str, int, list[ReasonCount]]]
    usage: list[tuple[str, RoleUsage]]
    tables: list[MetricTable]
    seeds: list[SeedView]
    status: dict[str, Status]
    contamination: dict[str, Any] | None = None  # contamination.json: documents re-grounding never targeted
    drift: DriftView | None = None  # `finmbs requalify`: the pool across policies


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


KNOWN_METRICS = {
    "method",
    "usage",
    "seeds_in",
    "seeds_done",
    "seeds_with_trace",
    "decompositions_effective",
    "decompositions_attempted",
    "descendants",
    "goldilocks",
    "goldilocks_rate",
    "qualified",
    "qualified_rate",
    "seeds_converted",
    "seed_conversion",
    "cache_hits",
    "wall_time_s",
}


def label_of(key: str) -> str:
    return key.replace("_", " ")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _format(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3f}".rstrip("0").rstrip(".")


def extra_metrics(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Numeric fields of metrics.json the report has no special row for (added by newer stages), as they are."""
    return [
        (key, label_of(key), _format(value)) for key, value in m.items() if key not in KNOWN_METRICS and _number(value)
    ]


def metrics_rows(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, label, value) rows of the paper's run metrics, then any other numeric field of metrics.json."""
    if not m:
        return []
    get = lambda key: m.get(key, 0) or 0  # noqa: E731
    return [
        ("seeds_in", "seeds in", str(get("seeds_in"))),
        ("seeds_with_trace", "seeds with a verified trace", str(get("seeds_with_trace"))),
        (
            "decompositions",
            "effective decompositions / attempted",
            f"{get('decompositions_effective')} / {get('decompositions_attempted')}",
        ),
        ("descendants", "candidates (synthetic descendants)", str(get("descendants"))),
        ("goldilocks", "Goldilocks", f"{get('goldilocks')} ({get('goldilocks_rate') * 100:.1f}%)"),
        ("qualified", "qualified", f"{get('qualified')} ({get('qualified_rate') * 100:.1f}%)"),
        (
            "seed_conversion",
            "seed conversion (of the finished seeds)",
            f"{get('seeds_converted')} ({get('seed_conversion') * 100:.1f}%) of {get('seeds_done')} finished, "
            f"{get('seeds_in')} in",
        ),
        ("cache_hits", "cache hits", str(get("cache_hits"))),
        ("wall_time_s", "wall time", f"{get('wall_time_s'):.1f} s"),
        *extra_metrics(m),
    ]


# (key, label, base): seeds first, then candidates, as the paper's table 8 reads; each count's rate is over
# its base, what reached that step (None: the step is its own whole).
# The final gates a synthetic root passes in order: the novelty guard, quality control (math), calibration;
# each one's rejections are over the roots that reached it, so no rate can pass 100%.
FUNNEL = [
    ("seeds_in", "seeds in", None),
    ("seeds_with_trace", "seeds with a verified trace", "seeds_in"),
    ("seeds_done", "seeds finished", "seeds_in"),
    ("seeds_converted", "seeds converted (a qualified descendant)", "seeds_done"),
    ("decompositions_attempted", "decompositions attempted", None),
    ("decompositions_effective", "effective decompositions", "decompositions_attempted"),
    ("root_candidates", "synthetic roots at the final gates", None),
    ("novelty_rejected_roots", "rejected by the novelty guard", "root_candidates"),
    ("quality_rejected_roots", "rejected by quality control", "past_novelty"),
    ("descendants", "synthetic candidates (calibrated)", "root_candidates"),
    ("goldilocks", "Goldilocks", "descendants"),
    ("qualified", "qualified (Goldilocks and in budget)", "descendants"),
]
# the gate rows need novelty_rejected_roots (metrics.json of a run before it: gated_roots as one row)
GATE_ROWS = ("novelty_rejected_roots", "quality_rejected_roots")
OLD_GATE_ROW = ("gated_roots", "rejected by novelty or quality control", "root_candidates")


BASES = {
    "seeds_in": "seeds",
    "seeds_done": "finished seeds",
    "decompositions_attempted": "attempted",
    "root_candidates": "roots at the final gates",
    "past_novelty": "roots past the novelty guard",
    "descendants": "candidates",
    "too_easy_roots": "their calibrated roots",
}
# other counts of metrics.json with a known base; a count with none (answer leaks, novelty over every node,
# program rejections...) is shown without a rate rather than over a whole it is not drawn from
EXTRA_BASES = {
    "too_easy_roots": "descendants",
    "too_easy_qualified": "too_easy_roots",
    "gated_roots": "root_candidates",
    "screen_goldilocks": "descendants",
    "new_structure": "qualified",
}
_NOT_A_COUNT = re.compile(r"token|cost|usd|time|rate|_s$|bytes")  # numbers that are no step of the funnel


def funnel_counts(m: dict[str, Any]) -> dict[str, int]:
    """metrics.json's counts with the final gates' derived ones: the roots that reached them (root_candidates,
    written by newer runs, else calibrated plus gated), those past the novelty guard, and those quality
    control rejected (the gated roots the novelty guard did not)."""
    get = lambda key: m.get(key, 0) or 0  # noqa: E731
    counts = {k: v for k, v in m.items() if _number(v)}
    candidates = m.get("root_candidates") or get("descendants") + get("gated_roots")
    novelty = get("novelty_rejected_roots")
    counts.update(
        root_candidates=candidates,
        past_novelty=candidates - novelty,
        quality_rejected_roots=max(0, get("gated_roots") - novelty),
    )
    return counts


def _step(key: str, label: str, count: float, base: str | None, counts: dict[str, int]) -> FunnelStep:
    whole = counts.get(base, 0) if base else count
    return FunnelStep(
        key,
        label,
        count,
        f"{_pct(count, whole)} of {BASES.get(base, label_of(base))}" if base else "",
        min(100.0, 100.0 * count / whole) if whole else 0.0,
    )


def funnel_rows(m: dict[str, Any]) -> list[FunnelStep]:
    """From seeds to qualified: each count, its share of what reached that step, and a bar scaled to it;
    other numeric counts of metrics.json follow, with a rate only where what they are drawn from is known
    (seeds_* of the seeds in)."""
    counts = funnel_counts(m)
    split = "novelty_rejected_roots" in m  # runs before it: the gated roots as one row
    steps = []
    for key, label, base in FUNNEL:
        if key in GATE_ROWS and not split:
            if key == GATE_ROWS[0]:
                key, label, base = OLD_GATE_ROW
            else:
                continue
        steps.append(_step(key, label, counts.get(key, 0), base, counts))
    shown = {s.key for s in steps}
    for key, label, _value in extra_metrics(m):
        if isinstance(m[key], int) and not _NOT_A_COUNT.search(key) and key not in shown:
            base = "seeds_in" if key.startswith("seeds_") else EXTRA_BASES.get(key)
            # no known whole: the count alone, no bar (a full one would read as 100%)
            steps.append(_step(key, label, m[key], base, counts) if base else FunnelStep(key, label, m[key], "", 0.0))
    return steps


def metric_tables(m: dict[str, Any]) -> list[MetricTable]:
    """Dict-valued fields of metrics.json other than usage (per-stage time and tokens, counts by reason...)."""
    tables = []
    for key, value in m.items():
        if key == "usage" or not isinstance(value, dict) or not value:
            continue
        if all(isinstance(v, dict) for v in value.values()):
            columns = list(dict.fromkeys(c for v in value.values() for c, x in v.items() if _number(x)))
            rows = [(name, [_format(v[c]) if _number(v.get(c)) else "" for c in columns]) for name, v in value.items()]
        else:
            columns = ["value"]
            rows = [(name, [_format(v) if _number(v) else str(v)]) for name, v in value.items()]
        tables.append(MetricTable(key=key, title=label_of(key), columns=columns, rows=rows))
    return tables


_CUT = re.compile(r"[:(;\d\[]| (?:for|in|after|with|when|on|at|from|than)\b|[<>=]")


def reason_code(reason: str) -> str:
    """A short code for a reason: its leading words before any number, colon or detail, as a slug
    ("too easy: weakest student ... 0.875 > alpha 0.8" -> too-easy; "stale (8/8 correct ...)" -> stale)."""
    head = _CUT.split(reason.strip(), maxsplit=1)[0]
    words = re.findall(r"[A-Za-z_][A-Za-z_-]*", head.lower())[:5]
    return "-".join(words) or "other"


def reason_counts(reasons: Counter[str], stage: str) -> list[ReasonCount]:
    """The reasons of one stage grouped by code, most frequent first, each with one full example."""
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for reason, count in reasons.items():
        code = reason_code(reason)
        counts[code] += count
        example.setdefault(code, reason)
    return [ReasonCount(stage, code, count, example[code]) for code, count in counts.most_common()]


def _synthetic_nodes(trees: SeedTrees) -> list[TreeNode]:
    return [node for tree in trees.synthetic for node in tree.root.walk()]


def _tree_nodes(trees: SeedTrees) -> list[TreeNode]:
    roots = [trees.decomposition.root] if trees.decomposition else []
    return [node for root in roots for node in root.walk()] + _synthetic_nodes(trees)


def node_status(run: Run) -> tuple[dict[str, Status], dict[str, Counter[str]]]:
    """Each problem's fate, and the rejection reasons per stage (rejected.jsonl plus tree decisions, once each)."""
    status: dict[str, Status] = defaultdict(Status)
    for problem in run.qualified:
        status[problem.id].qualified = True
    reasons: dict[str, Counter[str]] = defaultdict(Counter)
    seen: set[tuple[str, str]] = set()
    rejections = [(r.problem.id, r.stage, r.reason) for r in run.rejected] + [
        (node.problem.id, d.stage, d.reason)
        for trees in run.trees.values()
        for node in _tree_nodes(trees)
        for d in node.decisions
        if d.outcome == "rejected"
    ]
    for problem_id, stage, reason in rejections:
        if (problem_id, stage) not in seen:
            seen.add((problem_id, stage))
            status[problem_id].reasons.append(f"{stage}: {reason}")
            reasons[stage][reason] += 1
    return status, reasons


def target_reports(run: Run) -> dict[str, dict[str, DifficultyReport]]:
    """The target policy's DifficultyReport per problem id, for the seeds and for the synthetic candidates."""
    seeds = {}
    for seed in run.seeds:
        trees = run.trees.get(seed.id)
        root = trees.decomposition.root if trees and trees.decomposition else None
        found = (root.target if root else None) or difficulty(seed)
        if found:
            seeds[seed.id] = found
    synthetic = {n.problem.id: n.target for t in run.trees.values() for n in _synthetic_nodes(t) if n.target}
    for problem in [*run.qualified, *(r.problem for r in run.rejected)]:
        found = difficulty(problem)
        if found and problem.provenance.method != "seed":
            synthetic.setdefault(problem.id, found)
    for rejection in run.rejected:
        if rejection.data.get("difficulty"):
            synthetic.setdefault(rejection.problem.id, DifficultyReport.model_validate(rejection.data["difficulty"]))
    return {"seeds": seeds, "synthetic": synthetic}


def failed_outputs(run: Run, seed_id: str) -> list[str]:
    """What the teachers answered for a seed no teacher verified: full outputs when the rejection carries
    them (data["attempts"]), else the answers listed in its reason."""
    outputs = []
    for rejection in run.rejected:
        if rejection.problem.id != seed_id or rejection.stage != Stage.TRACES:
            continue
        attempts = rejection.data.get("attempts")
        if isinstance(attempts, list) and attempts:
            outputs += [a.get("text") or str(a) if isinstance(a, dict) else str(a) for a in attempts]
        else:
            outputs += rejection.answers
    return outputs


def seed_views(run: Run) -> list[SeedView]:
    """Per seed: its trees, qualified and candidate counts, rejections that sit in no tree, and, for a dropped
    seed, what its teachers answered."""
    in_trees = {n.problem.id for t in run.trees.values() for n in _synthetic_nodes(t)}
    views = []
    for seed in run.seeds or [t.seed for t in run.trees.values()]:
        trees = run.trees.get(seed.id)
        loose = [
            (r.problem, r.stage, r.reason)
            for r in run.rejected
            if r.problem.provenance.seed_id == seed.id and r.problem.id not in in_trees | {seed.id}
        ]
        views.append(
            SeedView(
                seed=seed,
                trees=trees,
                loose_rejections=loose,
                failed_outputs=failed_outputs(run, seed.id),
                candidates=len({n.problem.id for n in _synthetic_nodes(trees)}) if trees else 0,
                qualified=sum(1 for p in run.qualified if p.provenance.seed_id == seed.id),
            )
        )
    return views


def rollouts_per_problem(run: Run, reports: list[DifficultyReport]) -> int:
    """N of the run (stages.N of its config), else the most common n of its target reports."""
    configured = (run.config.get("stages") or {}).get("N") if isinstance(run.config, dict) else None
    if isinstance(configured, int) and configured > 0:
        return configured
    return Counter(r.n for r in reports).most_common(1)[0][0] if reports else 0


def band_of(k: int, n: int) -> str:
    return "hard" if k == 0 else "stale" if k == n else "goldilocks"


def build_view(run: Run) -> ReportView:
    """Everything the template draws; each problem is counted once, by id."""
    status, reasons = node_status(run)
    reports = target_reports(run)
    synthetic = list(reports["synthetic"].values())
    n = rollouts_per_problem(run, synthetic)
    pass_rates = {k: dict.fromkeys(BANDS, 0) for k in range(n + 1)}
    for found in synthetic:
        if found.n == n:
            pass_rates[found.k][found.band] += 1
    return ReportView(
        name=run.name,
        domain=str(run.config.get("domain", "")),
        metrics=metrics_rows(run.metrics),
        funnel=funnel_rows(run.metrics) if run.metrics else [],
        bands={
            group: {band: sum(r.band == band for r in found.values()) for band in BANDS}
            for group, found in reports.items()
        },
        unknown_band={"seeds": len(run.seeds) - len(reports["seeds"])},
        pass_rates=pass_rates,
        rollouts=n,
        other_n=sum(r.n != n for r in synthetic),
        stages=[
            (stage, sum(c.values()), reason_counts(c, stage))
            for stage, c in sorted(reasons.items(), key=lambda item: in_order(item[0]))
        ],
        usage=[(role, RoleUsage.model_validate(u)) for role, u in sorted(run.metrics.get("usage", {}).items())],
        tables=metric_tables(run.metrics),
        seeds=seed_views(run),
        status=status,
        contamination=contamination(run),
        drift=drift_view(run.root),
    )


def contamination(run: Run) -> dict[str, Any] | None:
    """The run's contamination.json (finance runs that re-ground), or None."""
    path = run.root / CONTAMINATION
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
