"""Stage 3 (section 3.4, leaf synthesis): N_leaf HARDER variants per leaf, verified, screened on the
weakest student (discard when its accuracy exceeds alpha_leaf), up to R rounds over the teachers.

A round after one that kept nothing is a fresh sample of the next teacher, as in the paper. With
`stages.leaf_feedback` (not in the paper) it also shows the teacher the variants rejected so far, each
with why (restated the leaf, unverified, too easy), as negative context, the way a decomposition retry is
told its failed attempts (section 3.3): off by default, since a teacher shown the copies of its leaf it
had written can write them again. A grounded leaf (finance) is told how a lookup becomes harder while
staying answerable from its passage: a hypothetical input the passage's term is applied to."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import BaseModel, Field, field_validator

from finmbs.mbs.candidates import (
    WorkedProblem,
    asking_for,
    attempt_item,
    derive,
    novel_problems,
    reply_model,
    verified_node,
    written_items,
)
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.programs import program_prompt
from finmbs.mbs.solve import document_block, student_accuracy
from finmbs.mbs.stages import Stage
from finmbs.records import Decision, Problem, TreeNode
from finmbs.resources import render_prompt

STAGE = Stage.LEAF


class LeafVariants(BaseModel):
    variants: list[WorkedProblem] = Field(min_length=1)

    _written = field_validator("variants", mode="before")(written_items)


async def weakest_screen(
    ctx: Context, node: TreeNode, alpha: float, stage: str, ledger: Ledger, **data: object
) -> bool:
    """Keep `node` unless the weakest student's accuracy on it exceeds `alpha` (`data` goes on the rejection)."""
    weakest = ctx.weakest.name
    acc = await student_accuracy(ctx, ctx.weakest, node.problem)
    node.student_accuracy[weakest] = acc
    if acc > alpha:
        ledger.reject(
            node.problem, stage, f"too easy: weakest student {weakest} accuracy {acc:.3f} > alpha {alpha}", **data
        )
        return False
    node.decisions.append(Decision(stage=stage, outcome="accepted", reason=f"{weakest} accuracy {acc:.3f} <= {alpha}"))
    return True


async def screened(
    ctx: Context, nodes: list[TreeNode | None], alpha: float, stage: str, ledger: Ledger
) -> list[TreeNode]:
    """The verified nodes that pass the weakest-student screen."""
    verified = [n for n in nodes if n is not None]
    keep = await asyncio.gather(*(weakest_screen(ctx, n, alpha, stage, ledger) for n in verified))
    return [n for n, k in zip(verified, keep) if k]


def rejected_variants(leaf: TreeNode, ledger: Ledger) -> str:
    """The negative context of a retry round: every variant of `leaf` rejected so far, with why."""
    prefix = f"{leaf.problem.id}.h"
    lines = [
        attempt_item(r.problem.question, r.problem.answer, "rejected", r.brief)
        for r in ledger.rejected
        if r.problem.id.startswith(prefix)
    ]
    return render_prompt("leaf_failed", variants="\n".join(lines)) if lines else ""


def leaf_prompt(ctx: Context, leaf: TreeNode, ledger: Ledger) -> str:
    return render_prompt(
        "leaf_harder",
        n=ctx.stages.N_leaf,
        document=document_block(leaf.problem),
        question=leaf.problem.question,
        solution=leaf.trace.text if leaf.trace else "",
        answer=leaf.problem.answer,
        grounded=render_prompt("leaf_grounded") if leaf.problem.snippet and ctx.stages.leaf_grounded else "",
        failed=rejected_variants(leaf, ledger) if ctx.stages.leaf_feedback else "",
    )


@dataclass
class LeafRound:
    """One round's variants of a leaf: the teacher asked, all it wrote, those the novelty guard let through
    (before any trace), and whether the reply parsed."""

    teacher: str
    written: list[Problem]
    fresh: list[Problem]
    parsed: bool


async def leaf_round(ctx: Context, leaf: TreeNode, ledger: Ledger, r: int) -> LeafRound:
    """Round r of `leaf`: teacher r writes N_leaf variants (sample r: with one teacher a round is a fresh
    sample), and the restatements among them are rejected onto `ledger`."""
    params = ctx.stages
    teacher = ctx.teachers[r % len(ctx.teachers)]
    [reply] = await ctx.gateway.structured(
        teacher,
        asking_for(reply_model(ctx, LeafVariants), "variants", params.N_leaf, params.N_leaf),
        role="teacher",
        messages=[
            {"role": "user", "content": program_prompt(ctx, leaf_prompt(ctx, leaf, ledger), leaf.problem.domain)}
        ],
        first_index=r,
    )
    ctx.tick(STAGE)
    written = [
        derive(
            leaf.problem,
            v,
            id=f"{leaf.problem.id}.h{r}v{s}",
            stage=STAGE,
            tree_path=leaf.path,
            parent_ids=[leaf.problem.id],
        )
        for s, v in enumerate(reply.variants[: params.N_leaf] if reply else [])
    ]
    fresh = novel_problems(ctx, written, lambda _: [("source", leaf.problem)], ledger)
    return LeafRound(teacher=teacher.name, written=written, fresh=fresh, parsed=reply is not None)


async def harder_leaves(ctx: Context, leaf: TreeNode, ledger: Ledger) -> list[TreeNode]:
    """Synthetic versions of one leaf; round r asks teacher r, until a round keeps a variant."""
    for r in range(ctx.stages.R):
        round_ = await leaf_round(ctx, leaf, ledger, r)
        nodes = await asyncio.gather(
            *(verified_node(ctx, c, ledger, stage=STAGE, path=leaf.path, mirrors=leaf.problem.id) for c in round_.fresh)
        )
        kept = await screened(ctx, list(nodes), ctx.stages.alpha_leaf, STAGE, ledger)
        reason = f"round {r} ({round_.teacher}): kept {len(kept)} of {len(round_.written)} variants"
        if not round_.parsed:
            reason += " (reply did not parse)"
        leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"round": r}))
        if kept:
            return kept
    return []
