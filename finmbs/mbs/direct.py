"""Direct seed synthesis (appendix C, eq. 5 with prompt E): one teacher call per seed with the seed,
its verified trace and answer, asking for several problems (`stages.N_direct`: prompt E asks for
"diverse ... problems", the paper gives no count); each problem is verified by rejection sampling and
goes through what MBS output goes through: the novelty guard, re-grounding with its leakage check and
answerability judge in finance (`stages.direct_reground`, on by default as SPEC asks), quality
control, final calibration and the same metrics.

Matched budget (appendix C, table 7): a seed whose `meta["construction_budget"]` is set (what an MBS
run spent on constructing that seed's problems, `construction_budgets`) gets further direct calls,
teachers in turn, until its own spending reaches or exceeds that budget. Like is compared with like:
on both sides the tokens counted (prompt once per request plus every sample's completion, cached
calls included) are those of every model call made before re-grounding, novelty, quality control and
calibration (`BUDGET_STAGES` out): teacher traces, decomposition with its students, leaf synthesis and
composition for MBS; teacher traces and direct synthesis with its verification for direct. The
re-grounding, quality control and calibration that follow are paid by each method for its own output.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from finmbs.mbs.candidates import WorkedProblem, asking_for, derive, novel_problems, reply_model, verified_node, written_items
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.outcome import SeedOutcome, finish, seed_root, synthetic_trees
from finmbs.mbs.programs import program_prompt
from finmbs.mbs.solve import document_block
from finmbs.records import Decision, DecompositionTree, Problem, TreeNode
from finmbs.runs import DONE, METRICS, SEEDS, TREES, file_name, read_jsonl
from finmbs.resources import render_prompt

STAGE = "direct"
BUDGET_KEY = "construction_budget"
# stages whose tokens a matched budget does not count, on either side (paid for each method's own output)
BUDGET_STAGES_OUT = frozenset({"reground", "quality", "calibrate"})
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
    text = render_prompt(
        "direct_synthesis", n=count, document=document_block(seed), question=seed.question,
        solution=root.trace.text if root.trace else "", answer=seed.answer,
    )
    asked = asking_for(reply_model(ctx, DirectProblems), "problems", count, count)
    [reply] = await ctx.gateway.structured(teacher, asked, role="teacher", first_index=sample,
                                           messages=[{"role": "user", "content": program_prompt(ctx, text, seed.domain)}])
    ctx.tick(STAGE)
    problems = [
        derive(seed, w, id=f"{seed.id}.x{r}v{s}", stage=STAGE, tree_path="0", parent_ids=[seed.id], method="direct")
        for s, w in enumerate(reply.problems[:count] if reply else [])
    ]
    since = len(ledger.rejected)
    fresh = novel_problems(ctx, problems, lambda _: [("seed", seed)], ledger)  # before any trace
    for rejection in ledger.rejected[since:]:  # each is a root candidate, counted in the rates like MBS's
        rejection.data["root"] = True
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
        while budget_tokens(ctx.stage_usage()) < budget and calls < MAX_CALLS:
            nodes += await direct_call(ctx, root, calls, ledger)
            calls += 1
    tree = DecompositionTree(seed_id=seed.id, root=root)
    return await finish(ctx, seed, tree, synthetic_trees(seed.id, nodes), None, ledger,
                        reground=ctx.stages.direct_reground)


def construction_budgets(run: str | Path) -> dict[str, int]:
    """Per-seed matched-budget tokens (`budget_tokens`) of a finished MBS run folder; a folder that is
    no finished MBS run (no metrics, another method, a seed without its done marker) is a ValueError."""
    root = Path(run)
    where = f"--match-budget {run}"
    if not root.is_dir():
        raise ValueError(f"{where}: no such run folder")
    metrics, seeds_file = root / METRICS, root / SEEDS
    if not metrics.is_file() or not seeds_file.is_file():
        raise ValueError(f"{where}: not a run folder of `finmbs grow` (no {METRICS} or {SEEDS})")
    method = json.loads(metrics.read_text(encoding="utf-8")).get("method")
    if method != "mbs":
        raise ValueError(f"{where}: a run of method {method!r}; give the folder of a finished MBS run")
    ids = [row["id"] for row in read_jsonl(seeds_file)]
    def finished(seed_id: str) -> bool:
        return (root / DONE / file_name(seed_id)).exists() and (root / TREES / f"{file_name(seed_id)}.json").exists()

    unfinished = [i for i in ids if not finished(i)]
    if not ids or unfinished:
        shown = ", ".join(unfinished[:3]) + (f" (+{len(unfinished) - 3} more)" if len(unfinished) > 3 else "")
        raise ValueError(f"{where}: the run is not finished ({len(unfinished)} of {len(ids)} seeds not done: "
                         f"{shown or 'no seeds'}); rerun its grow command to finish it first")
    budgets = {}
    for i in ids:
        data = json.loads((root / TREES / f"{file_name(i)}.json").read_text(encoding="utf-8"))
        budgets[data["seed"]["id"]] = budget_tokens(data.get("stages", {}))
    return budgets


def with_budgets(seeds: list[Problem], budgets: dict[str, int]) -> list[Problem]:
    """The seeds, each carrying its matched construction budget (seeds the run did not grow get none)."""
    return [s.model_copy(update={"meta": {**s.meta, BUDGET_KEY: budgets[s.id]}}) if s.id in budgets else s for s in seeds]
