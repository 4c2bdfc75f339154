"""MagicBeanStalk on one seed (figure 1), every step named: the verified root (stage 1), decomposition
(stage 2), harder leaves and composition (stages 3-4), then the final gates every method shares:
re-grounding (finance, stage 5), the novelty guard, quality control (math) and final calibration.
`growers()` names each method's per-seed grower; the run loop around them is `finmbs.runs.grow`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from finmbs.mbs.compose import synthesize
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.decompose import decompose
from finmbs.mbs.direct import grow_seed_direct
from finmbs.mbs.outcome import (
    SeedOutcome,
    calibrated,
    guarded,
    outcome,
    problems_by_id,
    quality_checked,
    regrounded,
    seed_root,
    synthetic_trees,
)
from finmbs.mbs.stages import Stage
from finmbs.records import DecompositionTree, Problem

Grower = Callable[[Problem, Context], Awaitable[SeedOutcome]]


async def grow_seed(seed: Problem, ctx: Context) -> SeedOutcome:
    """MagicBeanStalk on one seed."""
    ctx, ledger = ctx.for_seed(), Ledger(seed.id)
    root = await seed_root(ctx, seed, ledger)
    if root is None:
        return outcome(ctx, seed, None, [], ledger, dropped=ledger.rejected[-1].reason)
    tree = DecompositionTree(seed_id=seed.id, root=root)
    with in_stage(Stage.DECOMPOSE):
        effective = await decompose(ctx, root, ledger)
    if not effective:
        ledger.reject(seed, Stage.DECOMPOSE, root.decisions[-1].reason)
        return outcome(ctx, seed, tree, [], ledger, dropped=root.decisions[-1].reason)
    versions, orphans = await synthesize(ctx, root, ledger)
    synthetic = synthetic_trees(seed.id, versions + orphans)
    grounded = await regrounded(ctx, seed, synthetic, ledger)
    trees = synthetic + (grounded or [])
    nodes = guarded(ctx, seed, synthetic if grounded is None else grounded, problems_by_id(seed, tree, trees), ledger)
    nodes = await quality_checked(ctx, seed, nodes, ledger)
    roots, others = await calibrated(ctx, nodes, ledger)
    return outcome(ctx, seed, tree, trees, ledger, roots=roots, others=others)


def growers() -> dict[str, Grower]:
    return {"mbs": grow_seed, "direct": grow_seed_direct}
