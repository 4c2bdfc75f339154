"""What one seed yields (its trees, qualified problems and rejections), and the steps every method
shares around synthesis: the seed's verified root, and final calibration of the synthetic trees."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from finmbs.mbs.calibrate import STAGE as CALIBRATE, annotate, calibrate
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Decision, DecompositionTree, Problem, Rejection, SyntheticTree, TreeNode


@dataclass
class SeedOutcome:
    """One seed's result; `tree_json()` is the trees/SEED.json document."""

    seed: Problem
    decomposition: DecompositionTree | None
    synthetic: list[SyntheticTree]
    dropped: str | None
    qualified: list[Problem]
    rejected: list[Rejection]

    def tree_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed.model_dump(mode="json"),
            "decomposition": self.decomposition.model_dump(mode="json") if self.decomposition else None,
            "synthetic": [t.model_dump(mode="json") for t in self.synthetic],
            "dropped": self.dropped,
        }


async def seed_root(ctx: Context, seed: Problem, ledger: Ledger) -> TreeNode | None:
    """The root (seed, verified teacher trace); None (and a rejection) when no teacher verifies it."""
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


async def calibrate_trees(ctx: Context, trees: list[SyntheticTree], ledger: Ledger) -> list[Problem]:
    """Final calibration of every synthetic node; returns the qualified problems, rejects the rest."""
    nodes = candidates(trees)
    reports = await asyncio.gather(*(calibrate(ctx, node.problem) for node in nodes))
    qualified = []
    for node, report in zip(nodes, reports):
        node.target = report
        if report.qualified:
            qualified.append(annotate(node.problem, report))
            continue
        why = report.band if report.in_budget else f"{report.band}, not solvable in budget"
        score = f"{report.k}/{report.n} correct for {report.policy} at L={report.budget}"
        ledger.reject(node.problem, CALIBRATE, f"{why} ({score})", difficulty=report.model_dump(mode="json"))
    return qualified


async def finish(
    ctx: Context, seed: Problem, tree: DecompositionTree | None, synthetic: list[SyntheticTree],
    dropped: str | None, ledger: Ledger,
) -> SeedOutcome:
    """Calibrate the synthetic trees and gather the seed's outcome. A finance seed's trees are first
    re-grounded on unseen documents (stage 5); only the re-grounded trees are calibrated."""
    if seed.domain == "finance" and synthetic:
        from finmbs.mbs.reground import reground_trees

        grounded = await reground_trees(ctx, seed, synthetic, ledger)
        qualified = await calibrate_trees(ctx, grounded, ledger)
        return SeedOutcome(seed, tree, synthetic + grounded, dropped, qualified, ledger.rejected)
    qualified = await calibrate_trees(ctx, synthetic, ledger)
    return SeedOutcome(seed, tree, synthetic, dropped, qualified, ledger.rejected)
