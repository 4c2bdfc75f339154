"""Stage 2 (section 3.3): top-down decomposition with verified children and the effectivity test.

At each node the students are evaluated weakest -> strongest; the evaluated student is the
strongest one with zero accuracy on the node (a node the weakest student already solves needs no
scaffold and stays a leaf). The teacher proposes K easier subproblems; each is rejection-sampled;
the evaluated student is re-sampled N times on the node with the verified children as worked
examples. Effective when conditioned accuracy > unconditioned accuracy. Otherwise the teacher is
re-prompted with the failed attempts as negative context, up to Nd retries; a node whose
decomposition stays ineffective is dropped. Recurse on each child up to depth D.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from finmbs.config import Endpoint
from finmbs.mbs.candidates import WorkedProblem, derive, verified_node
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.solve import document_block, student_accuracy
from finmbs.records import Decision, TreeNode
from finmbs.resources import render_prompt

STAGE = "decompose"


class Decomposition(BaseModel):
    """The teacher's reply: the parent's key skills and K easier subproblems."""

    skills: list[str] = Field(default_factory=list)
    subproblems: list[WorkedProblem] = Field(min_length=1)


async def evaluated_student(ctx: Context, node: TreeNode) -> tuple[Endpoint, float] | None:
    """The strongest zero-accuracy student, evaluating weakest -> strongest; None if the weakest solves it."""
    chosen = None
    for student in reversed(ctx.students):
        acc = await student_accuracy(ctx, student, node.problem)
        node.student_accuracy[student.name] = acc
        if acc > 0:
            break
        chosen = (student, acc)
    return chosen


def failed_context(failed: list[tuple[list[WorkedProblem], str]]) -> str:
    """Earlier ineffective decompositions, as negative context for a re-prompt."""
    if not failed:
        return ""
    blocks = [
        render_prompt(
            "failed_decomposition",
            subproblems="\n".join(f"- {w.question} (answer: {w.answer})" for w in subs) or "- (no usable reply)",
            reason=reason,
        )
        for subs, reason in failed
    ]
    return "\n".join([render_prompt("decompose_failed_intro"), *blocks])


async def propose(ctx: Context, node: TreeNode, attempt: int, failed: list) -> Decomposition | None:
    teacher = ctx.teachers[attempt % len(ctx.teachers)]
    text = render_prompt(
        "decompose", K=ctx.stages.K, document=document_block(node.problem), question=node.problem.question,
        solution=node.trace.text if node.trace else "", answer=node.problem.answer, failed=failed_context(failed),
    )
    [parsed] = await ctx.gateway.structured(
        teacher, Decomposition, role="teacher", messages=[{"role": "user", "content": text}]
    )
    ctx.tick(STAGE)
    return parsed


async def verified_children(ctx: Context, node: TreeNode, proposal: Decomposition, attempt: int, ledger: Ledger):
    candidates = [
        derive(node.problem, worked, id=f"{node.problem.id}.d{attempt}c{k}", stage=STAGE,
               tree_path=f"{node.path}.{k}", parent_ids=[node.problem.id])
        for k, worked in enumerate(proposal.subproblems[: ctx.stages.K])
    ]
    nodes = await asyncio.gather(
        *(verified_node(ctx, c, ledger, stage=STAGE, path=c.provenance.tree_path) for c in candidates)
    )
    return [n for n in nodes if n is not None]


async def decompose(ctx: Context, node: TreeNode, ledger: Ledger, depth: int = 0) -> bool:
    """Grow `node`'s decomposition subtree in place; False when the node is dropped."""
    if depth >= ctx.stages.D:
        node.decisions.append(Decision(stage=STAGE, outcome="info", reason=f"leaf: depth limit D={ctx.stages.D}"))
        return True
    chosen = await evaluated_student(ctx, node)
    if chosen is None:
        weakest = ctx.weakest.name
        reason = f"leaf: weakest student {weakest} already solves it (accuracy {node.student_accuracy[weakest]:.3f})"
        node.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason))
        return True
    student, base = chosen
    failed: list[tuple[list[WorkedProblem], str]] = []
    for attempt in range(ctx.stages.Nd + 1):
        data = {"attempt": attempt, "student": student.name, "unconditioned": base}
        proposal = await propose(ctx, node, attempt, failed)
        children = await verified_children(ctx, node, proposal, attempt, ledger) if proposal else []
        if proposal is None:
            reason = "teacher reply did not parse as a decomposition"
        elif not children:
            reason = "no subproblem verified"
        else:
            examples = [(c.problem, c.trace.text) for c in children if c.trace]
            cond = await student_accuracy(ctx, student, node.problem, examples=examples)
            node.conditioned_accuracy[student.name] = cond
            data.update(conditioned=cond, children=[c.problem.id for c in children], skills=proposal.skills)
            if cond > base:
                reason = f"effective: {student.name} accuracy {base:.3f} -> {cond:.3f} with {len(children)} children"
                node.decisions.append(Decision(stage=STAGE, outcome="accepted", reason=reason, data=data))
                node.children = children
                break
            reason = f"ineffective: {student.name} accuracy {base:.3f} -> {cond:.3f} when conditioned"
            for child in children:
                ledger.reject(child.problem, "effectivity", reason)
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=reason, data=data))
        failed.append((proposal.subproblems if proposal else [], reason))
    else:
        reason = f"no effective decomposition after {ctx.stages.Nd} retries"
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=reason))
        return False
    kept = await asyncio.gather(*(decompose(ctx, child, ledger, depth + 1) for child in node.children))
    for child, keep in zip(node.children, kept):
        if not keep:
            ledger.reject(child.problem, STAGE, child.decisions[-1].reason, node=child.model_dump(mode="json"))
    node.children = [child for child, keep in zip(node.children, kept) if keep]
    return True
