"""Stage 3 (section 3.4, leaf synthesis): N_leaf HARDER variants per leaf, verified, screened on the
weakest student (discard when its accuracy exceeds alpha_leaf), up to R rounds over the teachers.

A round after one that kept nothing is a fresh sample of the next teacher, as in the paper. With
`stages.leaf_feedback` (not in the paper) it also shows the teacher the variants rejected so far, each
with why (restated the leaf, unverified, too easy), as negative context, the way a decomposition retry is
told its failed attempts (section 3.3): off by default, since a teacher shown the copies of its leaf it
had written can write them again. A grounded leaf (finance) is told how a lookup becomes harder while
staying answerable from its passage: a hypothetical input the passage's term is applied to.

finmbs's own, off in the paper profile: with `stages.leaf_operators` each variant is asked for by one
named mutation operator (finmbs/mbs/operators.py, prompts/operators/DOMAIN.yaml), one teacher call per
variant, never the same operator twice for one leaf, and the variant records it as meta.operator. With
`novelty.structure` (and `verify.programs`) a variant whose program has its source's skeleton
(finmbs/verify/skeleton.py) is rejected before any trace, counted as the same structure: the source is
the leaf's own program, or one the teachers write for it (a seed kept as a leaf has none); a variant
that passes records meta.structure: "new", or "unmeasured" when either program has no skeleton. A
teacher that ignores its operator is not asked again for it: the rejection is the outcome."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import BaseModel, Field, field_validator

from finmbs.config import Endpoint
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
from finmbs.mbs.engine_leaves import engine_leaves
from finmbs.mbs.engine_leaves import on as engine_on
from finmbs.mbs.finance_leaves import finance_leaves
from finmbs.mbs.finance_leaves import on as finance_on
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.novelty import STAGE as NOVELTY
from finmbs.mbs.novelty import similarity
from finmbs.mbs.operators import Operator, catalogue, operator_block, rotation
from finmbs.mbs.programs import figure_spans, mended, program_prompt, programs_on
from finmbs.mbs.solve import document_block, student_accuracy
from finmbs.mbs.stages import Check, Stage
from finmbs.records import ROOT_PATH, Decision, Problem, TreeNode
from finmbs.resources import render_prompt
from finmbs.verify.skeleton import skeleton

STAGE = Stage.LEAF
NEW, UNMEASURED = "new", "unmeasured"  # meta.structure of a variant that passed the structure check


class LeafVariants(BaseModel):
    variants: list[WorkedProblem] = Field(min_length=1)

    _written = field_validator("variants", mode="before")(written_items)


class OperatorVariant(WorkedProblem):
    """The teacher's reply to one operator: one variant of the leaf."""


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


def leaf_prompt(ctx: Context, leaf: TreeNode, ledger: Ledger, operator: Operator | None = None) -> str:
    """The leaf prompt: N_leaf harder variants (the paper), or one variant by `operator`."""
    fields = dict(
        document=document_block(leaf.problem),
        question=leaf.problem.question,
        solution=leaf.trace.text if leaf.trace else "",
        answer=leaf.problem.answer,
        grounded=render_prompt("leaf_grounded") if leaf.problem.snippet and ctx.stages.leaf_grounded else "",
        failed=rejected_variants(leaf, ledger) if ctx.stages.leaf_feedback else "",
    )
    if operator is not None:
        return render_prompt("leaf_operator", operator=operator_block(operator, programs_on(ctx)), **fields)
    return ctx.prompt("leaf_harder", n=ctx.stages.N_leaf, **fields)


@dataclass
class LeafRound:
    """One round's variants of a leaf: the teacher asked, all it wrote, those the novelty guard let through
    (before any trace), and how many of its replies did not parse."""

    teacher: str
    written: list[Problem]
    fresh: list[Problem]
    unparsed: int


@dataclass
class LeafPlan:
    """What a leaf's rounds share: the operators in the order its variants take them (None: the paper's
    "harder" prompt), and the structure check's source skeleton (`checked`: novelty.structure is on;
    `source` None: the leaf's program has no skeleton, so nothing is measured), and the leaf's program as
    `labels.program_to_answer` found it for that check (`found`: (problem, why not), None when the check
    did not look), handed on to the engine's operators so they do not run it again."""

    operators: list[Operator] | None = None
    checked: bool = False
    source: str | None = None
    found: tuple[Problem, str | None] | None = None


def structure_on(ctx: Context) -> bool:
    return ctx.config.novelty.structure and programs_on(ctx)


async def source_skeleton(ctx: Context, leaf: TreeNode) -> tuple[str | None, tuple[Problem, str | None]]:
    """The skeleton of `leaf`'s program: its own (a verified child's), else one the teachers write for it
    (`labels.program_to_answer`), used only when it runs and gives the leaf's answer.
    How it was had is a decision on the leaf. Returned with what `program_to_answer` gave."""
    how = "its own program" if leaf.problem.meta.get("program") else "a program the teachers wrote for it"
    found = await program_to_answer(ctx, leaf.problem)
    problem, why = found
    source = problem.meta.get("program")
    shape = None
    if not why:
        shape = skeleton(mended(ctx, source or "")) or None
        why = None if shape else "its program has no skeleton"
    reason = f"structure check: source {how}" + (f", not used: {why}; variants unmeasured" if why else "")
    leaf.decisions.append(
        Decision(stage=STAGE, outcome="info", reason=reason, data={"source_program": source, "skeleton": shape})
    )
    return shape, found


async def leaf_plan(ctx: Context, leaf: TreeNode) -> LeafPlan:
    operators = rotation(leaf.problem.id, catalogue(leaf.problem.domain)) if ctx.stages.leaf_operators else None
    if not structure_on(ctx):
        return LeafPlan(operators=operators)
    shape, found = await source_skeleton(ctx, leaf)
    return LeafPlan(operators=operators, checked=True, source=shape, found=found)


def structure_checked(
    ctx: Context, leaf: TreeNode, problems: list[Problem], plan: LeafPlan, ledger: Ledger
) -> list[Problem]:
    """The variants whose program differs in structure from the source's (`novelty.structure`); each
    other one is a counted rejection (check `structure`). A kept variant records meta.structure."""
    if not plan.checked:
        return problems
    kept = []
    for problem in problems:
        shape = skeleton(mended(ctx, problem.meta.get("program") or ""))
        if plan.source is not None and shape == plan.source:
            ledger.reject(
                problem,
                NOVELTY,
                f"same structure as its source {leaf.problem.id}: its program computes the answer by the same "
                f"operations and data flow, only its figures or names differ ({shape})",
                check=Check.STRUCTURE,
                operator=problem.meta.get("operator"),
            )
            continue
        structure = NEW if plan.source is not None and shape is not None else UNMEASURED
        kept.append(problem.model_copy(update={"meta": {**problem.meta, "structure": structure, "skeleton": shape}}))
    return kept


async def harder_variants(
    ctx: Context, leaf: TreeNode, ledger: Ledger, r: int, teacher: Endpoint
) -> tuple[list[WorkedProblem | None], list[str | None]]:
    """Round r's variants as the paper asks for them: N_leaf harder ones in one reply."""
    n, spans = ctx.stages.N_leaf, figure_spans(ctx, leaf.problem)
    prompt = program_prompt(ctx, leaf_prompt(ctx, leaf, ledger), leaf.problem.domain, spans=spans)
    [reply] = await ctx.gateway.structured(
        teacher,
        asking_for(reply_model(ctx, LeafVariants, spans), "variants", n, n),
        role="teacher",
        messages=[{"role": "user", "content": prompt}],
        first_index=r,
    )
    ctx.tick(STAGE)
    variants = list(reply.variants[:n]) if reply else [None]
    return variants, [None] * len(variants)


async def operator_variants(
    ctx: Context, leaf: TreeNode, ledger: Ledger, r: int, teacher: Endpoint, operators: list[Operator]
) -> tuple[list[WorkedProblem | None], list[str | None]]:
    """Round r's variants by operators: one teacher call per operator, each naming its operator."""

    spans = figure_spans(ctx, leaf.problem)

    async def one(operator: Operator) -> WorkedProblem | None:
        prompt = program_prompt(ctx, leaf_prompt(ctx, leaf, ledger, operator), leaf.problem.domain, spans=spans)
        [reply] = await ctx.gateway.structured(
            teacher,
            reply_model(ctx, OperatorVariant, spans),
            role="teacher",
            messages=[{"role": "user", "content": prompt}],
            first_index=r,
        )
        ctx.tick(STAGE)
        return reply

    return list(await asyncio.gather(*(one(o) for o in operators))), [o.name for o in operators]


async def leaf_round(ctx: Context, leaf: TreeNode, ledger: Ledger, r: int, plan: LeafPlan | None = None) -> LeafRound:
    """Round r of `leaf`: teacher r writes N_leaf variants (sample r: with one teacher a round is a fresh
    sample), by the plan's operators for this round when it has them; the restatements among them, and
    with the structure check the variants of the source's structure, are rejected onto `ledger`."""
    plan = plan or LeafPlan()
    n = ctx.stages.N_leaf
    teacher = ctx.teachers[r % len(ctx.teachers)]
    if plan.operators is None:
        variants, names = await harder_variants(ctx, leaf, ledger, r, teacher)
    else:
        variants, names = await operator_variants(ctx, leaf, ledger, r, teacher, plan.operators[r * n : (r + 1) * n])
    written = []
    for s, (variant, name) in enumerate(zip(variants, names)):
        if variant is None:
            continue
        problem = derive(
            leaf.problem,
            variant,
            id=f"{leaf.problem.id}.h{r}v{s}",
            stage=STAGE,
            tree_path=leaf.path,
            parent_ids=[leaf.problem.id],
        )
        if name is not None:
            problem.meta["operator"] = name
        written.append(problem)
    fresh = novel_problems(ctx, written, lambda _: [("source", leaf.problem)], ledger)
    fresh = [p for p in fresh if not copied_example(ctx, p, ledger)]
    fresh = structure_checked(ctx, leaf, fresh, plan, ledger)
    return LeafRound(teacher=teacher.name, written=written, fresh=fresh, unparsed=sum(v is None for v in variants))


def copied_example(ctx: Context, problem: Problem, ledger: Ledger) -> bool:
    """Whether the variant of an operator restates that operator's worked example (before or after) instead
    of changing the leaf: rejected onto `ledger` (novelty), whatever its answer, since the example is the
    prompt's, not a problem about this leaf."""
    name = problem.meta.get("operator")
    operator = next((o for o in catalogue(problem.domain) if o.name == name), None) if name else None
    if operator is None or not ctx.config.novelty.enabled:
        return False
    for side in (operator.before, operator.after):
        if (score := similarity(problem.question, side.question)) >= ctx.config.novelty.max_similarity:
            reason = f"copies the worked example of operator {name}: text similarity {score:.2f}"
            ledger.reject(problem, NOVELTY, f"{reason} >= {ctx.config.novelty.max_similarity}", operator=name)
            return True
    return False


async def engine_screened(
    ctx: Context, leaf: TreeNode, ledger: Ledger, plan: LeafPlan, built: list[TreeNode]
) -> list[TreeNode]:
    """The engine's variants `built` of `leaf` that pass the novelty guard, the structure check and the
    weakest-student screen."""
    nodes = {n.problem.id: n for n in built}
    fresh = novel_problems(ctx, [n.problem for n in built], lambda _: [("source", leaf.problem)], ledger)
    fresh = structure_checked(ctx, leaf, fresh, plan, ledger)
    for problem in fresh:
        nodes[problem.id].problem = problem
    if screen_at_calibration(ctx, leaf):
        reason = "weakest-student screen left to final calibration: the weakest student is the target"
        for problem in fresh:
            nodes[problem.id].decisions.append(Decision(stage=STAGE, outcome="info", reason=reason))
        return [nodes[p.id] for p in fresh]
    return await screened(ctx, [nodes[p.id] for p in fresh], ctx.stages.alpha_leaf, STAGE, ledger)


def screen_at_calibration(ctx: Context, leaf: TreeNode) -> bool:
    """`stages.screen_at_calibration`: the engine's math variants of a seed kept as a leaf are synthetic roots,
    calibrated next by the target on fresh rollouts. When the weakest student is the target (same model,
    sampling and budget L) and alpha_leaf rejects only a rate of 1 (N of N), its screen is the test
    calibration's stale band applies again; it is skipped. A leaf below a root (its variants composed first)
    or a finance leaf (re-grounded first) is screened as always."""
    stages, weakest, target = ctx.stages, ctx.weakest, ctx.config.roles.target
    sampled = ("model", "api_base", "temperature", "chat", "extra")
    same = all(getattr(weakest, k) == getattr(target, k) for k in sampled) and weakest.max_tokens == stages.L
    only_all = stages.alpha_leaf >= (stages.N - 1) / stages.N
    root = leaf.path == ROOT_PATH and leaf.problem.domain != "finance"
    return stages.screen_at_calibration and same and only_all and root


async def engine_hardened(ctx: Context, leaf: TreeNode, ledger: Ledger, plan: LeafPlan) -> list[TreeNode]:
    """`stages.program_operators`: the leaf's variants the engine builds (finmbs/mbs/engine_leaves.py), through
    the rules every variant meets: the novelty guard, the structure check and the weakest-student screen."""
    finance = leaf.problem.domain == "finance"
    built = await (finance_leaves if finance else engine_leaves)(ctx, leaf, ledger, found=plan.found)
    kept = await engine_screened(ctx, leaf, ledger, plan, built)
    if not kept and not finance:  # `stages.chained_fallback`: the operators held back until now
        built += (more := await engine_leaves(ctx, leaf, ledger, found=plan.found, fallback=True))
        kept = await engine_screened(ctx, leaf, ledger, plan, more)
    reason = f"engine operators: kept {len(kept)} of {len(built)} variants that passed their checks"
    leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"engine": True}))
    return kept


async def harder_leaves(ctx: Context, leaf: TreeNode, ledger: Ledger) -> list[TreeNode]:
    """Synthetic versions of one leaf: first the engine's own (`stages.program_operators`, math), then,
    when it keeps none, round r asks teacher r, until a round keeps a variant (or, by operators, until
    every operator of the catalogue was asked once)."""
    ctx.tick(STAGE)  # the progress line's stage: a too-easy seed comes here from its traces
    plan = await leaf_plan(ctx, leaf)
    engine = engine_on(ctx, leaf.problem) or finance_on(ctx, leaf.problem)
    if engine and (kept := await engine_hardened(ctx, leaf, ledger, plan)):
        return kept
    for r in range(ctx.stages.R):
        if plan.operators is not None and r * ctx.stages.N_leaf >= len(plan.operators):
            reason = f"round {r}: not asked, each of the {len(plan.operators)} operators was asked once"
            leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"round": r}))
            break
        round_ = await leaf_round(ctx, leaf, ledger, r, plan)
        nodes = await asyncio.gather(
            *(verified_node(ctx, c, ledger, stage=STAGE, path=leaf.path, mirrors=leaf.problem.id) for c in round_.fresh)
        )
        kept = await screened(ctx, list(nodes), ctx.stages.alpha_leaf, STAGE, ledger)
        reason = f"round {r} ({round_.teacher}): kept {len(kept)} of {len(round_.written)} variants"
        if round_.unparsed:
            reason += (
                " (reply did not parse)" if plan.operators is None else f" ({round_.unparsed} replies did not parse)"
            )
        if plan.operators is not None:
            asked = plan.operators[r * ctx.stages.N_leaf : (r + 1) * ctx.stages.N_leaf]
            reason += f"; operators {', '.join(o.name for o in asked)}"
        leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"round": r}))
        if kept:
            return kept
    return []
