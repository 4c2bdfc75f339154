"""Direct seed synthesis (appendix C): the teacher sees the seed, its verified trace and answer and
writes N_leaf variants per round (R rounds over the teachers); each variant is verified and then
goes through the same final calibration and metrics as MBS."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from finmbs.mbs.candidates import WorkedProblem, derive, verified_node
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.outcome import SeedOutcome, finish, seed_root, synthetic_trees
from finmbs.mbs.solve import document_block
from finmbs.records import DecompositionTree, Problem, TreeNode
from finmbs.resources import render_prompt

STAGE = "direct"


class DirectProblems(BaseModel):
    problems: list[WorkedProblem] = Field(min_length=1)


async def direct_round(ctx: Context, root: TreeNode, r: int, ledger: Ledger) -> list[TreeNode]:
    """One teacher call of N_leaf variants, each verified by rejection sampling."""
    teacher = ctx.teachers[r % len(ctx.teachers)]
    seed = root.problem
    text = render_prompt(
        "direct_synthesis", n=ctx.stages.N_leaf, document=document_block(seed), question=seed.question,
        solution=root.trace.text if root.trace else "", answer=seed.answer,
    )
    [reply] = await ctx.gateway.structured(teacher, DirectProblems, role="teacher",
                                           messages=[{"role": "user", "content": text}])
    ctx.tick(STAGE)
    problems = [
        derive(seed, w, id=f"{seed.id}.x{r}v{s}", stage=STAGE, tree_path="0", parent_ids=[seed.id], method="direct")
        for s, w in enumerate(reply.problems[: ctx.stages.N_leaf] if reply else [])
    ]
    nodes = await asyncio.gather(
        *(verified_node(ctx, p, ledger, stage=STAGE, path="0", mirrors=seed.id) for p in problems)
    )
    return [n for n in nodes if n is not None]


async def grow_seed_direct(seed: Problem, ctx: Context) -> SeedOutcome:
    """Direct synthesis for one seed; `decomposition` holds only the root (the seed's verified trace)."""
    ledger = Ledger(seed.id)
    root = await seed_root(ctx, seed, ledger)
    if root is None:
        return await finish(ctx, seed, None, [], ledger.rejected[-1].reason, ledger)
    rounds = await asyncio.gather(*(direct_round(ctx, root, r, ledger) for r in range(ctx.stages.R)))
    nodes = [n for found in rounds for n in found]
    tree = DecompositionTree(seed_id=seed.id, root=root)
    return await finish(ctx, seed, tree, synthetic_trees(seed.id, nodes), None, ledger)
