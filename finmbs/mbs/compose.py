"""Stage 4 (section 3.4): bottom-up composition of synthetic parents, propagated to the root.

Up to Nc child-combination trials per parent: each picks one synthetic version per child
(combinations in order of increasing index sum; when the pools hold fewer than Nc combinations, the
trials cycle through them again, each retry a fresh teacher sample). The teacher composes a parent
with the original (parent with its verified solution, children) configuration as the pattern (the
dependency pattern lives in the parent's solution, appendix E). Candidates are verified and discarded
when the weakest student's accuracy exceeds alpha_parent; every passing trial becomes a synthetic
version of the node.
"""

from __future__ import annotations

import asyncio
from itertools import product


from finmbs.mbs.candidates import WorkedProblem, derive, reply_model, verified_node
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.leaves import STAGE as LEAF, harder_leaves, screened
from finmbs.mbs.programs import child_functions, program_prompt
from finmbs.mbs.solve import document_block, worked_examples
from finmbs.records import Decision, TreeNode
from finmbs.resources import render_prompt

STAGE = "compose"


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
    text = render_prompt(
        "compose_parent", document=document_block(node.problem), parent=node.problem.question,
        parent_solution=node.trace.text if node.trace else "", original_children=pattern,
        synthetic_children=worked_examples([(c.problem, c.trace.text if c.trace else "") for c in chosen]),
    )
    children = {f"child_{k}": c.problem.answer for k, c in enumerate(chosen, 1) if c.problem.meta.get("program")}
    return [{"role": "user", "content": program_prompt(ctx, text, node.problem.domain, children)}]


async def compose_trial(
    ctx: Context, node: TreeNode, chosen: list[TreeNode], t: int, ledger: Ledger
) -> TreeNode | None:
    teacher = ctx.teachers[t % len(ctx.teachers)]
    [reply] = await ctx.gateway.structured(  # trial t is sample t: a retried combination gets a fresh sample
        teacher, reply_model(ctx, ComposedParent), role="teacher", messages=compose_messages(ctx, node, chosen),
        first_index=t,
    )
    ctx.tick(STAGE)
    if reply is None:
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=f"trial {t}: reply did not parse"))
        return None
    problem = derive(node.problem, reply, id=f"{node.problem.id}.s{t}", stage=STAGE, tree_path=node.path,
                     parent_ids=[c.problem.id for c in chosen])
    functions = child_functions(chosen)
    if functions and "program" in problem.meta:  # its program may call child_k(), child k's program
        problem.meta["program_functions"] = functions
    composed = await verified_node(ctx, problem, ledger, stage=STAGE, path=node.path, mirrors=node.problem.id)
    if composed is not None:
        composed.children = list(chosen)
    return composed


async def synthesize(ctx: Context, node: TreeNode, ledger: Ledger) -> tuple[list[TreeNode], list[TreeNode]]:
    """(synthetic versions of `node`, synthetic subtrees below it that no version of `node` uses)."""
    if node.is_leaf:
        with in_stage(LEAF):
            return await harder_leaves(ctx, node, ledger), []
    results = await asyncio.gather(*(synthesize(ctx, child, ledger) for child in node.children))
    pools = [versions for versions, _ in results]
    orphans = [o for _, below in results for o in below]
    missing = [c.problem.id for c, pool in zip(node.children, pools) if not pool]
    if missing:
        node.decisions.append(Decision(stage=STAGE, outcome="info", reason=f"no synthetic version of {missing}"))
        return [], orphans + [v for pool in pools for v in pool]
    chosen = trials([len(p) for p in pools], ctx.stages.Nc)
    with in_stage(STAGE):
        nodes = await asyncio.gather(
            *(compose_trial(ctx, node, [pool[i] for pool, i in zip(pools, combo)], t, ledger)
              for t, combo in enumerate(chosen))
        )
        versions = await screened(ctx, list(nodes), ctx.stages.alpha_parent, STAGE, ledger)
    distinct = len(set(chosen))
    node.decisions.append(Decision(
        stage=STAGE, outcome="info",
        reason=f"kept {len(versions)} of {len(chosen)} composition trials ({distinct} distinct combinations)",
    ))
    used = {id(c) for v in versions for c in v.children}
    return versions, orphans + [v for pool in pools for v in pool if id(v) not in used]
