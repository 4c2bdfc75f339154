"""What one seed yields (its trees, qualified problems and rejections), and the steps every method
shares around synthesis: the seed's verified root, and final calibration of the synthetic trees.

What is kept (figure 1, section 3.4): the synthetic *roots*, the synthetic versions of the seed's root
(path "0"), as the paper counts them. With `stages.keep: all` every other synthetic node is calibrated
too and reported apart. Before calibration the novelty guard rejects a problem that restates its seed,
its source or a sibling (`novelty.py`), and quality control a math problem that is not well-posed
(`quality.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from finmbs.mbs.calibrate import STAGE as CALIBRATE, annotate, calibrate
from finmbs.mbs.context import SECONDS, Context, Ledger, in_stage
from finmbs.mbs.candidates import novel_problems
from finmbs.mbs.quality import STAGE as QUALITY, well_posed
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Decision, DecompositionTree, Problem, Rejection, SyntheticTree, TreeNode


@dataclass
class SeedOutcome:
    """One seed's result; `tree_json()` is the trees/SEED.json document.

    `qualified` holds the qualified synthetic roots (the paper's yield); `qualified_nodes` the other
    qualified synthetic nodes, calibrated only with `stages.keep: all`. `tokens`: per-role tokens
    spent on this seed."""

    seed: Problem
    decomposition: DecompositionTree | None
    synthetic: list[SyntheticTree]
    dropped: str | None
    qualified: list[Problem]
    rejected: list[Rejection]
    qualified_nodes: list[Problem] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # requests, tokens, model seconds

    def tree_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed.model_dump(mode="json"),
            "decomposition": self.decomposition.model_dump(mode="json") if self.decomposition else None,
            "synthetic": [t.model_dump(mode="json") for t in self.synthetic],
            "dropped": self.dropped,
            "tokens": self.tokens,
            # requests and tokens per stage; model seconds differ from run to run (a resumed seed is answered
            # from the cache), so they go to metrics.json alone and the tree file stays the same
            "stages": {stage: {k: v for k, v in c.items() if k != SECONDS} for stage, c in self.stages.items()},
        }


async def seed_root(ctx: Context, seed: Problem, ledger: Ledger) -> TreeNode | None:
    """The root (seed, verified teacher trace); None (and a rejection) when no teacher verifies it."""
    with in_stage("traces"):
        trace, why = await teacher_trace(ctx, seed)
    if trace is None:
        ledger.reject(seed, "traces", why)
        return None
    decision = Decision(stage="traces", outcome="accepted", reason=f"answer verified by {trace.model}")
    return TreeNode(problem=seed, trace=trace, path="0", decisions=[decision])


def synthetic_trees(seed_id: str, roots: list[TreeNode]) -> list[SyntheticTree]:
    return [SyntheticTree(seed_id=seed_id, index=i, root=root) for i, root in enumerate(roots)]


def candidates(trees: list[SyntheticTree]) -> list[TreeNode]:
    """Every synthetic node once (a node can sit in several trees), in tree order."""
    seen: dict[str, TreeNode] = {}
    for tree in trees:
        for node in tree.root.walk():
            seen.setdefault(node.problem.id, node)
    return list(seen.values())


ROOT_PATH = "0"


def is_root(node: TreeNode) -> bool:
    """A synthetic root: a synthetic version of the seed's root (it parallels path "0")."""
    return node.path == ROOT_PATH


def problems_by_id(seed: Problem, tree: DecompositionTree | None, trees: list[SyntheticTree]) -> dict[str, Problem]:
    nodes = [*(tree.root.walk() if tree else []), *(n for t in trees for n in t.root.walk())]
    return {seed.id: seed, **{n.problem.id: n.problem for n in nodes}}


def sources(node: TreeNode, known: dict[str, Problem]) -> list[tuple[str, Problem]]:
    """The problems `node` was made from: the original it mirrors, its parents, what it was re-grounded from."""
    ids = [node.mirrors, node.problem.meta.get("regrounded_from"), *node.problem.provenance.parent_ids]
    return [("source", known[i]) for i in dict.fromkeys(ids) if i and i in known]


def mark_roots(ledger: Ledger, since: int, nodes: list[TreeNode]) -> None:
    """Mark the rejections recorded since `since` with `data.root`: whether each was a synthetic root (the
    rates count a root the final gates reject among the candidates)."""
    roots = {n.problem.id for n in nodes if is_root(n)}
    for rejection in ledger.rejected[since:]:
        rejection.data["root"] = rejection.problem.id in roots


def novel(ctx: Context, nodes: list[TreeNode], seed: Problem, known: dict[str, Problem], ledger: Ledger) -> list[TreeNode]:
    """The nodes that restate neither their seed, their sources nor an earlier kept sibling."""
    by_id = {n.problem.id: n for n in nodes}
    since = len(ledger.rejected)
    kept = novel_problems(ctx, [n.problem for n in nodes],
                          lambda p: [("seed", seed), *sources(by_id[p.id], known)], ledger)
    mark_roots(ledger, since, nodes)
    return [by_id[p.id] for p in kept]


def calibration_candidates(
    ctx: Context, seed: Problem, trees: list[SyntheticTree], known: dict[str, Problem], ledger: Ledger
) -> list[TreeNode]:
    """The synthetic nodes to calibrate (the roots; every node with keep: all) that pass the novelty guard."""
    nodes = [n for n in candidates(trees) if ctx.stages.keep == "all" or is_root(n)]
    return novel(ctx, nodes, seed, known, ledger)


async def calibrate_nodes(ctx: Context, nodes: list[TreeNode], ledger: Ledger) -> tuple[list[Problem], list[Problem]]:
    """Final calibration: returns the qualified (roots, other nodes) and rejects the rest."""
    reports = await asyncio.gather(*(calibrate(ctx, node.problem) for node in nodes))
    roots: list[Problem] = []
    others: list[Problem] = []
    for node, report in zip(nodes, reports):
        node.target = report
        if report.qualified:
            kind = "root" if is_root(node) else "node"
            problem = annotate(node.problem, report)
            (roots if kind == "root" else others).append(
                problem.model_copy(update={"meta": {**problem.meta, "kind": kind}}))
            continue
        why = report.band if report.in_budget else f"{report.band}, not solvable in budget"
        score = f"{report.k}/{report.n} correct for {report.policy} at L={report.budget}"
        ledger.reject(node.problem, CALIBRATE, f"{why} ({score})", difficulty=report.model_dump(mode="json"))
    return roots, others


async def finish(
    ctx: Context, seed: Problem, tree: DecompositionTree | None, synthetic: list[SyntheticTree],
    dropped: str | None, ledger: Ledger, *, reground: bool = True,
) -> SeedOutcome:
    """Calibrate the synthetic trees and gather the seed's outcome. A finance seed's trees are first
    re-grounded on unseen documents (stage 5, unless `reground` is False); only the re-grounded trees
    are calibrated. Before calibration: the novelty guard, and quality control for math."""
    grounded: list[SyntheticTree] = []
    calibrated = synthetic
    if seed.domain == "finance" and synthetic and reground:
        from finmbs.mbs.reground import reground_trees

        with in_stage("reground"):
            grounded = await reground_trees(ctx, seed, synthetic, ledger)
        calibrated = grounded
    known = problems_by_id(seed, tree, synthetic + grounded)
    nodes = calibration_candidates(ctx, seed, calibrated, known, ledger)
    if seed.domain == "math":
        since, judged = len(ledger.rejected), nodes
        with in_stage(QUALITY):
            nodes = await well_posed(ctx, nodes, ledger)
        mark_roots(ledger, since, judged)
    with in_stage(CALIBRATE):
        roots, others = await calibrate_nodes(ctx, nodes, ledger)
    return SeedOutcome(seed, tree, synthetic + grounded, dropped, roots, ledger.rejected, others, ctx.tokens(),
                       ctx.stage_usage())
