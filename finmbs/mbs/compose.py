"""Stage 4 (section 3.4): bottom-up composition of synthetic parents, propagated to the root.

Up to Nc child-combination trials per parent: each picks one synthetic version per child
(combinations in order of increasing index sum; when the pools hold fewer than Nc combinations, the
trials cycle through them again, each retry a fresh teacher sample). The teacher composes a parent
with the original (parent with its verified solution, children) configuration as the pattern (the
dependency pattern lives in the parent's solution, appendix E). Candidates are verified and discarded
when the weakest student's accuracy exceeds alpha_parent. With `stages.compose_all_trials` (the paper
profile) all Nc run at once and every passing one is a version: section 3.4 discards each candidate on
its own, "every node ends up with synthetic versions", and appendix G's table 10 counts more roots than
seeds at D = 1. Off (finmbs's default), the trials stop at the first that passes, the node's one version.

A child with no synthetic version does not stop its parent: the parent is composed from the
synthetic versions of the children that have them (the pattern still shows every original child);
only a node none of whose children has a version gets none. The paper does not say what becomes of a
parent with a failed child; dropping every ancestor of one failed leaf would end a whole seed on it.

With `stages.engine_compose` (finmbs's, off in the paper profile) a math parent is first composed by the
engine (`engine_leaves.engine_composed`): a child version's answer stands for one given of the parent's
own program, the text worded by template and checked by number slots and a round trip, then screened by
alpha_parent like any trial; the teacher's trials run only when none passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from itertools import product

from finmbs.mbs.candidates import WorkedProblem, derive, reply_model, verified_node
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.engine_leaves import engine_composed
from finmbs.mbs.leaves import STAGE as LEAF
from finmbs.mbs.leaves import harder_leaves, screened
from finmbs.mbs.programs import child_functions, program_prompt
from finmbs.mbs.solve import document_block, worked_examples
from finmbs.mbs.stages import Stage
from finmbs.records import Decision, TreeNode
from finmbs.resources import render_prompt

STAGE = Stage.COMPOSE


class ComposedParent(WorkedProblem):
    """The teacher's reply: one synthetic parent with its worked solution and answer."""


def combinations(sizes: list[int], limit: int) -> list[tuple[int, ...]]:
    """Up to `limit` distinct index tuples (one version per child), lowest index sum first."""
    return sorted(product(*(range(s) for s in sizes)), key=lambda c: (sum(c), c))[:limit]


def trials(sizes: list[int], nc: int) -> list[tuple[int, ...]]:
    """The Nc trials: the distinct combinations in order, cycled again while fewer than Nc."""
    combos = combinations(sizes, nc)
    return [combos[t % len(combos)] for t in range(nc)]


def compose_messages(ctx: Context, node: TreeNode, chosen: list[TreeNode]) -> list[dict[str, str]]:
    pattern = "\n".join(
        render_prompt("pattern_child", question=c.problem.question, answer=c.problem.answer) for c in node.children
    )
    text = ctx.prompt(
        "compose_parent",
        document=document_block(node.problem),
        parent=node.problem.question,
        parent_solution=node.trace.text if node.trace else "",
        original_children=pattern,
        synthetic_children=worked_examples([(c.problem, c.trace.text if c.trace else "") for c in chosen]),
    )
    children = {f"child_{k}": c.problem.answer for k, c in enumerate(chosen, 1) if c.problem.meta.get("program")}
    return [{"role": "user", "content": program_prompt(ctx, text, node.problem.domain, children)}]


async def compose_trial(
    ctx: Context, node: TreeNode, chosen: list[TreeNode], t: int, ledger: Ledger
) -> TreeNode | None:
    teacher = ctx.teachers[t % len(ctx.teachers)] if ctx.stages.rotate_teachers else ctx.teachers[0]
    [reply] = await ctx.gateway.structured(  # trial t is sample t: a retried combination gets a fresh sample
        teacher,
        reply_model(ctx, ComposedParent),
        role="teacher",
        messages=compose_messages(ctx, node, chosen),
        first_index=t,
    )
    ctx.tick(STAGE)
    if reply is None:
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=f"trial {t}: reply did not parse"))
        return None
    problem = derive(
        node.problem,
        reply,
        id=f"{node.problem.id}.s{t}",
        stage=STAGE,
        tree_path=node.path,
        parent_ids=[c.problem.id for c in chosen],
    )
    functions = child_functions(chosen)
    if functions and "program" in problem.meta:  # its program may call child_k(), child k's program
        problem.meta["program_functions"] = functions
    composed = await verified_node(ctx, problem, ledger, stage=STAGE, path=node.path, mirrors=node.problem.id)
    if composed is not None:
        composed.children = list(chosen)
    return composed


async def run_trials(
    ctx: Context, node: TreeNode, pools: list[list[TreeNode]], chosen: list[tuple[int, ...]], ledger: Ledger
) -> tuple[list[TreeNode], int]:
    """(the synthetic versions of `node`, trials run): trial by trial until one passes verification and
    the alpha_parent screen (finmbs's default); with `stages.compose_all_trials` (the paper profile) every
    trial at once, every passing one kept."""

    def trial(t: int) -> Awaitable[TreeNode | None]:
        return compose_trial(ctx, node, [pool[i] for pool, i in zip(pools, chosen[t])], t, ledger)

    if ctx.stages.compose_all_trials:
        nodes = await asyncio.gather(*(trial(t) for t in range(len(chosen))))
        return await screened(ctx, list(nodes), ctx.stages.alpha_parent, STAGE, ledger), len(chosen)
    for t in range(len(chosen)):
        if versions := await screened(ctx, [await trial(t)], ctx.stages.alpha_parent, STAGE, ledger):
            return versions, t + 1
    return [], len(chosen)


def engine_compose_on(ctx: Context, node: TreeNode) -> bool:
    """`stages.engine_compose`: a math parent is composed by the engine first (`engine_composed`)."""
    return ctx.stages.engine_compose and ctx.config.verify.programs and node.problem.domain == "math"


async def synthesize(ctx: Context, node: TreeNode, ledger: Ledger) -> tuple[list[TreeNode], list[TreeNode]]:
    """(synthetic versions of `node`, synthetic subtrees below it that no version of `node` uses)."""
    if node.is_leaf:
        with in_stage(LEAF):
            return await harder_leaves(ctx, node, ledger), []
    results = await asyncio.gather(*(synthesize(ctx, child, ledger) for child in node.children))
    orphans = [o for _, below in results for o in below]
    missing = [c.problem.id for c, (pool, _) in zip(node.children, results) if not pool]
    pools = [versions for versions, _ in results if versions]
    if missing:
        node.decisions.append(
            Decision(
                stage=STAGE,
                outcome="info",
                data={"missing": missing},
                reason=f"no synthetic version of {missing}" + ("" if pools else ": nothing to compose"),
            )
        )
    if not pools:
        return [], orphans
    versions: list[TreeNode] = []
    if engine_compose_on(ctx, node):
        with in_stage(STAGE):
            composed = await engine_composed(ctx, node, pools, ledger)
            versions = await screened(ctx, composed, ctx.stages.alpha_parent, STAGE, ledger)
    if not versions:  # the teacher's trials, as the paper composes
        chosen = trials([len(p) for p in pools], ctx.stages.Nc)
        with in_stage(STAGE):
            versions, tried = await run_trials(ctx, node, pools, chosen, ledger)
        distinct = len(set(chosen[:tried]))
        node.decisions.append(
            Decision(
                stage=STAGE,
                outcome="info",
                reason=f"kept {len(versions)} of {tried} composition trials ({distinct} distinct combinations; up "
                f"to {len(chosen)})",
            )
        )
    used = {id(c) for v in versions for c in v.children}
    return versions, orphans + [v for pool in pools for v in pool if id(v) not in used]
