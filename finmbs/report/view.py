"""What the report shows, computed from a run: metrics, bands, stage yields, usage, and per-seed trees."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from finmbs.export.load import Run, SeedTrees
from finmbs.export.rows import difficulty
from finmbs.records import DifficultyReport, Problem, RoleUsage, TreeNode

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

    @property
    def dropped(self) -> str | None:
        return self.trees.dropped if self.trees else None


@dataclass
class ReportView:
    name: str
    domain: str
    metrics: list[tuple[str, str, str]]
    funnel: list[tuple[str, int, str]]
    bands: dict[str, dict[str, int]]
    unknown_band: dict[str, int]
    pass_rates: dict[int, dict[str, int]]
    stages: list[tuple[str, int, list[tuple[str, int]]]]
    usage: list[tuple[str, RoleUsage]]
    seeds: list[SeedView]
    status: dict[str, Status]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def metrics_rows(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(key, label, value) rows of the paper's run metrics."""
    if not m:
        return []
    get = lambda key: m.get(key, 0) or 0  # noqa: E731
    return [
        ("seeds_in", "seeds in", str(get("seeds_in"))),
        ("seeds_with_trace", "seeds with a verified trace", str(get("seeds_with_trace"))),
        ("decompositions", "effective decompositions / attempted",
         f"{get('decompositions_effective')} / {get('decompositions_attempted')}"),
        ("descendants", "candidates (synthetic descendants)", str(get("descendants"))),
        ("goldilocks", "Goldilocks", f"{get('goldilocks')} ({get('goldilocks_rate') * 100:.1f}%)"),
        ("qualified", "qualified", f"{get('qualified')} ({get('qualified_rate') * 100:.1f}%)"),
        ("seed_conversion", "seed conversion", f"{get('seeds_converted')} ({get('seed_conversion') * 100:.1f}%)"),
        ("cache_hits", "cache hits", str(get("cache_hits"))),
        ("wall_time_s", "wall time", f"{get('wall_time_s'):.1f} s"),
    ]


def funnel_rows(m: dict[str, Any]) -> list[tuple[str, int, str]]:
    """Yield per stage: (stage, count, rate against the stage it is drawn from)."""
    get = lambda key: m.get(key, 0) or 0  # noqa: E731
    seeds, candidates = get("seeds_in"), get("descendants")
    return [
        ("seeds in", seeds, ""),
        ("seeds with a verified trace", get("seeds_with_trace"), f"{_pct(get('seeds_with_trace'), seeds)} of seeds"),
        ("effective decompositions", get("decompositions_effective"),
         f"{_pct(get('decompositions_effective'), get('decompositions_attempted'))} of attempted"),
        ("synthetic candidates", candidates, ""),
        ("Goldilocks", get("goldilocks"), f"{_pct(get('goldilocks'), candidates)} of candidates"),
        ("qualified", get("qualified"), f"{_pct(get('qualified'), candidates)} of candidates"),
        ("seeds converted", get("seeds_converted"), f"{_pct(get('seeds_converted'), seeds)} of seeds"),
    ]


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
        (node.problem.id, d.stage, d.reason) for trees in run.trees.values() for node in _tree_nodes(trees)
        for d in node.decisions if d.outcome == "rejected"]
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


def seed_views(run: Run) -> list[SeedView]:
    """Per seed: its trees, qualified and candidate counts, and rejections that sit in no tree."""
    in_trees = {n.problem.id for t in run.trees.values() for n in _synthetic_nodes(t)}
    views = []
    for seed in run.seeds or [t.seed for t in run.trees.values()]:
        trees = run.trees.get(seed.id)
        loose = [(r.problem, r.stage, r.reason) for r in run.rejected
                 if r.problem.provenance.seed_id == seed.id and r.problem.id not in in_trees | {seed.id}]
        views.append(SeedView(
            seed=seed, trees=trees, loose_rejections=loose,
            candidates=len({n.problem.id for n in _synthetic_nodes(trees)}) if trees else 0,
            qualified=sum(1 for p in run.qualified if p.provenance.seed_id == seed.id),
        ))
    return views


def build_view(run: Run) -> ReportView:
    """Everything the template draws; each problem is counted once, by id."""
    status, reasons = node_status(run)
    reports = target_reports(run)
    pass_rates: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(BANDS, 0))
    for found in reports["synthetic"].values():
        pass_rates[found.k][found.band] += 1
    return ReportView(
        name=run.name, domain=str(run.config.get("domain", "")), metrics=metrics_rows(run.metrics),
        funnel=funnel_rows(run.metrics) if run.metrics else [],
        bands={group: {band: sum(r.band == band for r in found.values()) for band in BANDS}
               for group, found in reports.items()},
        unknown_band={"seeds": len(run.seeds) - len(reports["seeds"])},
        pass_rates=dict(sorted(pass_rates.items())),
        stages=[(stage, sum(c.values()), c.most_common(5)) for stage, c in sorted(reasons.items())],
        usage=[(role, RoleUsage.model_validate(u)) for role, u in sorted(run.metrics.get("usage", {}).items())],
        seeds=seed_views(run), status=status,
    )
