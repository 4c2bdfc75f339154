"""The paper's run metrics (section 4.1, table 8) over the finished seeds of a run folder: their tree
files (trees, per-stage usage and the counts each seed recorded as it ran). A tree file written before
the counts were stored gets them by replaying its seed's rejected.jsonl rows through a ledger."""

from __future__ import annotations

from collections import defaultdict

from finmbs.config import RunConfig
from finmbs.mbs.context import TARGET_ROLE, Ledger
from finmbs.mbs.engine_leaves import ENGINE, operator_funnel
from finmbs.mbs.outcome import is_root
from finmbs.mbs.stages import Stage
from finmbs.records import DecompositionTree, Problem, Rejection, RunMetrics, SeedCounts, SeedTrees, TreeNode
from finmbs.runs.folder import QUALIFIED, REJECTED, RunDir
from finmbs.runs.load import read_json, read_records


def add_stage_usage(total: dict[str, dict[str, float]], seed: dict[str, dict[str, float]]) -> None:
    """Sum one seed's per-stage requests, tokens and model seconds into the run's."""
    for stage, counts in seed.items():
        into = total.setdefault(stage, {})
        for key, value in counts.items():
            into[key] = round(into.get(key, 0) + value, 3)


def too_easy(tree: DecompositionTree | None) -> bool:
    return tree is not None and any(d.data.get("too_easy") for d in tree.root.decisions)


def screen_model(config: RunConfig) -> str | None:
    """The weakest student's name when it is the target policy's model (its alpha screen then measured
    the target on the samples calibration must not reuse), else None."""
    weakest, target = config.roles.students[-1], config.roles.target
    return weakest.name if (weakest.model, weakest.api_base) == (target.model, target.api_base) else None


def fresh_draws(metrics: RunMetrics, roots: list[TreeNode], screened_by: str | None) -> None:
    """Count the roots whose alpha screen (on the target's own model) was Goldilocks, and how many of them
    calibration's fresh draws put outside the band."""
    if screened_by is None:
        return
    for node in roots:
        acc = node.student_accuracy.get(screened_by)
        if acc is not None and 0 < acc < 1 and node.target is not None:
            metrics.screen_goldilocks += 1
            metrics.screen_goldilocks_out += node.target.band != "goldilocks"


NO_OPERATOR = "none"  # by_operator's row for qualified roots no operator made (composed, or the paper's prompt)


def structures(metrics: RunMetrics, qualified: list[Problem]) -> None:
    """Count the qualified roots new in structure (meta.structure, novelty.structure), in all and per
    operator (meta.operator, stages.leaf_operators); nothing when neither switch left a mark."""
    if not any("structure" in p.meta or "operator" in p.meta for p in qualified):
        return
    for problem in qualified:
        new = problem.meta.get("structure") == "new"
        metrics.new_structure += new
        row = metrics.by_operator.setdefault(str(problem.meta.get("operator") or NO_OPERATOR), {})
        row["qualified"] = row.get("qualified", 0) + 1
        row["new_structure"] = row.get("new_structure", 0) + new


def add_seed(metrics: RunMetrics, trees: SeedTrees, screened_by: str | None) -> None:
    """Add one finished seed's tree file to the run's metrics."""
    tree = trees.decomposition
    metrics.seeds_done += 1
    add_stage_usage(metrics.stages, trees.stages)
    metrics.seeds_with_trace += tree is not None
    metrics.seeds_too_easy += too_easy(tree)
    metrics.construction_tokens += sum(n for role, n in trees.tokens.items() if role != TARGET_ROLE)
    seen: dict[str, TreeNode] = {n.problem.id: n for t in trees.synthetic for n in t.root.walk() if n.target}
    roots = [n.target for n in seen.values() if n.target and is_root(n)]
    others = [n.target for n in seen.values() if n.target and not is_root(n)]
    fresh_draws(metrics, [n for n in seen.values() if is_root(n)], screened_by)
    metrics.descendants += len(roots)
    metrics.goldilocks += sum(r.band == "goldilocks" for r in roots)
    metrics.qualified += sum(r.qualified for r in roots)
    metrics.relabeled += sum(
        bool(n.target and n.target.qualified and is_root(n) and "relabeled_from" in n.problem.meta)
        for n in seen.values()
    )
    metrics.seeds_converted += any(r.qualified for r in roots)
    if too_easy(tree):  # reported apart: roots of seeds the weakest student already solved
        metrics.too_easy_roots += len(roots)
        metrics.too_easy_qualified += sum(r.qualified for r in roots)
    structures(metrics, [n.problem for n in seen.values() if n.target and n.target.qualified and is_root(n)])
    metrics.other_descendants += len(others)
    metrics.other_goldilocks += sum(r.band == "goldilocks" for r in others)
    metrics.other_qualified += sum(r.qualified for r in others)


def replayed_counts(trees: SeedTrees, rows: list[Rejection]) -> SeedCounts:
    """The counts of a tree file written before they were stored: its seed's rejection rows replayed
    through a ledger, each marked a root as it was."""
    ledger = Ledger(trees.seed.id)
    for row in rows:
        since = len(ledger.rejected)
        ledger.reject(row.problem, row.stage, row.reason, **row.data)
        ledger.mark_roots(since, {row.problem.id} if row.data.get("root") else set())
    ledger.count_decompositions(trees.decomposition)
    return ledger.counts


def rejections_by_seed(run: RunDir) -> dict[str, list[Rejection]]:
    rows: dict[str, list[Rejection]] = defaultdict(list)
    for row in read_records(run.path(REJECTED), Rejection):
        rows[row.problem.provenance.seed_id or row.problem.id].append(row)
    return rows


def collect_metrics(
    run: RunDir, seeds: list[Problem], method: str, keep: str = "roots", screened_by: str | None = None
) -> RunMetrics:
    """The paper's metrics over the synthetic roots of the finished seeds' tree files (other nodes,
    calibrated with keep: all, counted apart), and the counts those seeds recorded (rejections by check,
    decompositions). The rates count the roots the novelty guard or quality control rejected just before
    calibration among the candidates."""
    metrics = RunMetrics(method=method, keep=keep, seeds_in=len(seeds))
    counts, older = SeedCounts(), None
    for seed in seeds:
        path = run.tree_path(seed.id)
        if not run.is_done(seed.id) or not path.exists():
            continue
        trees = read_json(path, SeedTrees)
        add_seed(metrics, trees, screened_by)
        if trees.counts is None:  # an older tree file: rejected.jsonl read once, for such seeds alone
            older = rejections_by_seed(run) if older is None else older
        counts.add(trees.counts or replayed_counts(trees, older[seed.id] if older else []))
    for name, value in counts:
        setattr(metrics, name, value)
    metrics.novelty_rejected_roots = novelty_roots(run, seeds)
    metrics.engine_funnel = engine_funnel(run, seeds)
    return metrics


def engine_funnel(run: RunDir, seeds: list[Problem]) -> dict[str, dict[str, float | int | None]]:
    """The engine operators' funnel (`engine_leaves.operator_funnel`) over the finished seeds' rejected.jsonl
    rows and qualified roots; empty when no engine operator ran."""
    done = {s.id for s in seeds if run.is_done(s.id)}
    if not done:
        return {}

    def mine(problem: Problem) -> bool:
        return problem.meta.get("authored_by") == ENGINE and (problem.provenance.seed_id or problem.id) in done

    rows = [(r.problem, str(r.stage), r.data) for r in read_records(run.path(REJECTED), Rejection) if mine(r.problem)]
    kept = [p for p in read_records(run.path(QUALIFIED), Problem) if mine(p)]
    return operator_funnel(kept, rows)


def novelty_roots(run: RunDir, seeds: list[Problem]) -> int:
    """The synthetic roots of the finished seeds that the final novelty guard rejected: rejected.jsonl rows
    (one per problem, its first rejection) of stage novelty marked `data.root`. The funnel's rates over
    what reached each final gate need them apart from the leaf variants novelty rejects earlier."""
    done = {s.id for s in seeds if run.is_done(s.id)}
    rows = read_records(run.path(REJECTED), Rejection) if done else []
    return sum(
        r.stage == Stage.NOVELTY and bool(r.data.get("root")) and (r.problem.provenance.seed_id or r.problem.id) in done
        for r in rows
    )
