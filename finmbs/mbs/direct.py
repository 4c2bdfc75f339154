"""Direct seed synthesis (appendix C, eq. 5 with prompt E): one teacher call per seed with the seed,
its verified trace and answer, asking for several problems (`stages.N_direct`: prompt E asks for
"diverse ... problems", the paper gives no count); each problem is verified by rejection sampling and
goes through what MBS output goes through: the novelty guard, re-grounding with its leakage check and
answerability judge in finance (`stages.direct_reground`, on by default as SPEC asks; the paper is
silent on it), quality control (`quality.direct`: on in the paper profile too, as appendix C
rejection-samples direct synthesis "on quality control"), final calibration and the same metrics.
The paper profile asks for one problem per call (`N_direct: 1`): eq. 5 samples one problem per call,
and table 7's direct row evaluates 64 candidates from 64 seeds.

Matched budget (appendix C, table 7): a seed whose `meta["construction_budget"]` is set (what an MBS
run spent on constructing that seed's problems, `finmbs.runs.construction_budgets`) gets further direct calls,
teachers in turn, until its own spending reaches or exceeds that budget. Like is compared with like:
on both sides the tokens counted (prompt once per request plus every sample's completion, cached
calls included) are those of every model call made before re-grounding, novelty, quality control and
calibration (`BUDGET_STAGES` out): teacher traces, decomposition with its students, leaf synthesis and
composition for MBS; teacher traces and direct synthesis with its verification for direct. The
re-grounding, quality control and calibration that follow are paid by each method for its own output.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from finmbs.mbs.candidates import (
    WorkedProblem,
    asking_for,
    derive,
    novel_problems,
    reply_model,
    verified_node,
    written_items,
)
from finmbs.mbs.context import Context, Ledger, in_stage
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
from finmbs.mbs.programs import figure_spans, program_prompt
from finmbs.mbs.solve import document_block
from finmbs.mbs.stages import Stage
from finmbs.records import Decision, DecompositionTree, Problem, TreeNode

STAGE = Stage.DIRECT
BUDGET_KEY = "construction_budget"
# stages whose tokens a matched budget does not count, on either side (paid for each method's own output)
BUDGET_STAGES_OUT = frozenset({Stage.REGROUND, Stage.QUALITY, Stage.CALIBRATE})
MAX_CALLS = 1000  # a safety stop for the matched-budget loop


def budget_tokens(stages: dict[str, dict[str, float]]) -> int:
    """The tokens a matched budget counts, from per-stage usage (a tree file's `stages`, or a live seed's)."""
    return int(sum(c.get("tokens", 0) for stage, c in stages.items() if stage not in BUDGET_STAGES_OUT))


class DirectProblems(BaseModel):
    problems: list[WorkedProblem] = Field(min_length=1)

    _written = field_validator("problems", mode="before")(written_items)


async def direct_call(ctx: Context, root: TreeNode, r: int, ledger: Ledger) -> list[TreeNode]:
    """Call r: teacher r mod |T| (its sample r div |T|; with rotate_teachers off, T1's sample r) writes
    N_direct problems, each verified by rejection sampling."""
    count = ctx.stages.N_direct
    if ctx.stages.rotate_teachers:
        teacher, sample = ctx.teachers[r % len(ctx.teachers)], r // len(ctx.teachers)
    else:
        teacher, sample = ctx.teachers[0], r
    seed = root.problem
    text = ctx.prompt(
        "direct_synthesis",
        n=count,
        document=document_block(seed),
        question=seed.question,
        solution=root.trace.text if root.trace else "",
        answer=seed.answer,
    )
    spans = figure_spans(ctx, seed)
    asked = asking_for(reply_model(ctx, DirectProblems, spans), "problems", count, count)
    [reply] = await ctx.gateway.structured(
        teacher,
        asked,
        role="teacher",
        first_index=sample,
        messages=[{"role": "user", "content": program_prompt(ctx, text, seed.domain, spans=spans)}],
    )
    ctx.tick(STAGE)
    problems = [
        derive(seed, w, id=f"{seed.id}.x{r}v{s}", stage=STAGE, tree_path="0", parent_ids=[seed.id], method="direct")
        for s, w in enumerate(reply.problems[:count] if reply else [])
    ]
    since = len(ledger.rejected)
    fresh = novel_problems(ctx, problems, lambda _: [("seed", seed)], ledger)  # before any trace
    ledger.mark_roots(since)  # each is a root candidate, counted in the rates like MBS's
    nodes = [await verified_node(ctx, p, ledger, stage=STAGE, path="0", mirrors=seed.id) for p in fresh]
    kept = [n for n in nodes if n is not None]
    reason = f"call {r} ({teacher.name}): {len(kept)} of {len(problems)} verified" + (
        "" if reply else " (reply did not parse)"
    )
    root.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"call": r}))
    return kept


async def grow_seed_direct(seed: Problem, ctx: Context) -> SeedOutcome:
    """Direct synthesis for one seed; `decomposition` holds only the root (the seed's verified trace)."""
    ctx, ledger = ctx.for_seed(), Ledger(seed.id)
    root = await seed_root(ctx, seed, ledger)
    if root is None:
        return outcome(ctx, seed, None, [], ledger, dropped=ledger.rejected[-1].reason)
    budget = int(seed.meta.get(BUDGET_KEY) or 0)
    with in_stage(STAGE):
        nodes = await direct_call(ctx, root, 0, ledger)
        calls = 1
        while budget_tokens(ctx.stage_usage()) < budget and calls < MAX_CALLS:
            nodes += await direct_call(ctx, root, calls, ledger)
            calls += 1
    tree = DecompositionTree(seed_id=seed.id, root=root)
    synthetic = synthetic_trees(seed.id, nodes)
    grounded = await regrounded(ctx, seed, synthetic, ledger, on=ctx.stages.direct_reground)
    trees = synthetic + (grounded or [])
    nodes = guarded(ctx, seed, synthetic if grounded is None else grounded, problems_by_id(seed, tree, trees), ledger)
    nodes = await quality_checked(ctx, seed, nodes, ledger, direct=True)
    roots, others = await calibrated(ctx, nodes, ledger)
    return outcome(ctx, seed, tree, trees, ledger, roots=roots, others=others)


def with_budgets(seeds: list[Problem], budgets: dict[str, int]) -> list[Problem]:
    """The seeds, each carrying its matched construction budget (seeds the run did not grow get none)."""
    return [
        s.model_copy(update={"meta": {**s.meta, BUDGET_KEY: budgets[s.id]}}) if s.id in budgets else s for s in seeds
    ]
