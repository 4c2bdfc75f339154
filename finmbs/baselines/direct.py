"""Direct seed synthesis (appendix C, eq. 5): one teacher call per seed with the seed, its verified
trace and answer, writing one problem; the problem is verified by rejection sampling and goes through
the same novelty guard, final calibration and metrics as MBS. Its outputs are not re-grounded unless
`stages.direct_reground` asks for it.

Matched budget (appendix C, table 7): a seed whose `meta["construction_budget"]` is set (the
construction tokens an MBS run spent on it, see `construction_budgets`) gets further direct calls,
teachers in turn, until its own construction tokens reach or exceed that budget.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from finmbs.mbs.candidates import WorkedProblem, asking_for, derive, novel_problems, reply_model, verified_node, written_items
from finmbs.mbs.context import TARGET_ROLE, Context, Ledger, in_stage
from finmbs.mbs.outcome import SeedOutcome, finish, seed_root, synthetic_trees
from finmbs.mbs.programs import program_prompt
from finmbs.mbs.solve import document_block
from finmbs.records import Decision, DecompositionTree, Problem, TreeNode
from finmbs.resources import render_prompt
from finmbs.runs import TREES

STAGE = "direct"
BUDGET_KEY = "construction_budget"
PROBLEMS_PER_CALL = 1  # eq. 5 samples one (problem, trace, answer) per call
MAX_CALLS = 1000  # a safety stop for the matched-budget loop


class DirectProblems(BaseModel):
    problems: list[WorkedProblem] = Field(min_length=1)

    _written = field_validator("problems", mode="before")(written_items)


async def direct_call(ctx: Context, root: TreeNode, r: int, ledger: Ledger) -> list[TreeNode]:
    """Call r: teacher r mod |T| (its sample r div |T|) writes one problem, verified by rejection sampling."""
    teacher = ctx.teachers[r % len(ctx.teachers)]
    seed = root.problem
    text = render_prompt(
        "direct_synthesis", n=PROBLEMS_PER_CALL, document=document_block(seed), question=seed.question,
        solution=root.trace.text if root.trace else "", answer=seed.answer,
    )
    asked = asking_for(reply_model(ctx, DirectProblems), "problems", PROBLEMS_PER_CALL, PROBLEMS_PER_CALL)
    [reply] = await ctx.gateway.structured(teacher, asked, role="teacher", first_index=r // len(ctx.teachers),
                                           messages=[{"role": "user", "content": program_prompt(ctx, text, seed.domain)}])
    ctx.tick(STAGE)
    problems = [
        derive(seed, w, id=f"{seed.id}.x{r}v{s}", stage=STAGE, tree_path="0", parent_ids=[seed.id], method="direct")
        for s, w in enumerate(reply.problems[:PROBLEMS_PER_CALL] if reply else [])
    ]
    fresh = novel_problems(ctx, problems, lambda _: [("seed", seed)], ledger)  # before any trace
    nodes = [await verified_node(ctx, p, ledger, stage=STAGE, path="0", mirrors=seed.id) for p in fresh]
    kept = [n for n in nodes if n is not None]
    reason = f"call {r} ({teacher.name}): {len(kept)} of {len(problems)} verified" + ("" if reply else " (reply did not parse)")
    root.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason, data={"call": r}))
    return kept


async def grow_seed_direct(seed: Problem, ctx: Context) -> SeedOutcome:
    """Direct synthesis for one seed; `decomposition` holds only the root (the seed's verified trace)."""
    ctx, ledger = ctx.for_seed(), Ledger(seed.id)
    root = await seed_root(ctx, seed, ledger)
    if root is None:
        return await finish(ctx, seed, None, [], ledger.rejected[-1].reason, ledger)
    budget = int(seed.meta.get(BUDGET_KEY) or 0)
    with in_stage(STAGE):
        nodes = await direct_call(ctx, root, 0, ledger)
        calls = 1
        while ctx.construction_tokens() < budget and calls < MAX_CALLS:
            nodes += await direct_call(ctx, root, calls, ledger)
            calls += 1
    tree = DecompositionTree(seed_id=seed.id, root=root)
    return await finish(ctx, seed, tree, synthetic_trees(seed.id, nodes), None, ledger,
                        reground=ctx.stages.direct_reground)


def construction_budgets(run: str | Path) -> dict[str, int]:
    """Per-seed construction tokens (every role but the target policy) of a finished run folder."""
    budgets = {}
    for path in sorted((Path(run) / TREES).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        tokens = data.get("tokens", {})
        budgets[data["seed"]["id"]] = sum(n for role, n in tokens.items() if role != TARGET_ROLE)
    if not budgets:
        raise ValueError(f"no grown seeds in {run} ({TREES}/*.json): give the folder of a finished MBS run")
    return budgets


def with_budgets(seeds: list[Problem], budgets: dict[str, int]) -> list[Problem]:
    """The seeds, each carrying its matched construction budget (seeds the run did not grow get none)."""
    return [s.model_copy(update={"meta": {**s.meta, BUDGET_KEY: budgets[s.id]}}) if s.id in budgets else s for s in seeds]
