"""Quality control before calibration: the paper keeps synthetic problems by "rejection sampling on
quality control, goldilocks and in-budget solvability" and audits them for being "well-posed and its GT
answer is correct" (section 4.1); this is the well-posed half, the teacher trace being the other.

A teacher trace verifies that a synthetic problem's answer follows from *some* reading of it, not
that the problem states everything its solution uses: a small teacher writes "30 students, 20 play
soccer, 15 chess; how many play neither?" and its own traces supply the missing overlap. The judge
reads the question beside the verified solution and rejects a problem that is not well-posed (a
starting quantity the question never states, an ambiguous or double question) before any target
rollout is spent on it. Math only: a finance problem is judged answerable from its passage when it
is re-grounded (`reground.py`).
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict

from finmbs.llm.structured import written_in_order
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.stages import Stage
from finmbs.records import Decision, TreeNode
from finmbs.resources import render_prompt
from finmbs.verify.judge import delimited

STAGE = Stage.QUALITY


class WellPosed(BaseModel):
    """The judge's verdict on one problem: its reasoning first, then the verdict."""

    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    well_posed: bool


def solution_of(node: TreeNode) -> str:
    """The verified solution the judge reads: the verifying trace, else the teacher's written one."""
    return node.trace.text if node.trace else str(node.problem.meta.get("teacher_solution", ""))


async def judge_well_posed(ctx: Context, node: TreeNode) -> WellPosed | None:
    """The judge's verdict on `node` (None when its reply did not parse even after a repair)."""
    problem = node.problem
    text = render_prompt(
        "judge_well_posed", **delimited(question=problem.question, solution=solution_of(node), answer=problem.answer)
    )
    [verdict] = await ctx.gateway.structured(
        ctx.config.roles.judge,
        WellPosed,
        role="judge",
        messages=[{"role": "user", "content": text}],
        temperature=0.0,
        last=True,
    )
    ctx.tick(STAGE)
    return verdict


def quality_on(ctx: Context, direct: bool) -> bool:
    """Whether quality control runs: `quality.enabled` (finmbs's, for MBS output), or for the direct
    baseline `quality.direct` (appendix C rejection-samples direct synthesis "on quality control")."""
    return ctx.config.quality.enabled or (direct and ctx.config.quality.direct)


async def well_posed(ctx: Context, nodes: list[TreeNode], ledger: Ledger, direct: bool = False) -> list[TreeNode]:
    """The nodes the judge finds well-posed; the rest are rejected with the judge's reason. A reply
    that never parses keeps its node (the check is a filter, not a gate a broken judge closes).
    `direct`: the nodes are the direct baseline's."""
    if not quality_on(ctx, direct) or not nodes:
        return nodes
    verdicts = await asyncio.gather(*(judge_well_posed(ctx, node) for node in nodes))
    kept: list[TreeNode] = []
    for node, verdict in zip(nodes, verdicts):
        if verdict is not None and not verdict.well_posed:
            ledger.reject(node.problem, STAGE, f"not well-posed: {verdict.reason.strip()}", check="well_posed")
            continue
        reason = "judge reply unparseable; kept" if verdict is None else f"well-posed: {verdict.reason.strip()}"
        node.decisions.append(Decision(stage=STAGE, outcome="info" if verdict is None else "accepted", reason=reason))
        kept.append(node)
    return kept
