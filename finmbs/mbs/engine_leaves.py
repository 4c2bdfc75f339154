"""Leaf hardening by the engine's program operators (`stages.program_operators`, finmbs's, not in the paper).

Stage 3 asks a teacher for harder variants of a leaf; a small teacher writes back the leaf or the
prompt's example. Here the engine builds each variant itself (`finmbs.mbs.program_operators`) from the
leaf's verified program: it first draws the leaf's givens again (`resampled`, so no variant copies its
source's wording), then applies each operator of its plan once (`backward`, one or two added steps),
and the sandbox runs the new program to the new answer. The label is the engine's program's value. The
model words at most one clause (an added step's new final question, prompts/engine_clause.txt; with
`stages.clause_wording`), and every worded text, the model's or the engine's template, must pass two
checks before the variant goes on to the rules every variant meets (novelty guard, structure,
weakest-student screen; later quality control and calibration):

- number slots (`slots`): the text states exactly the values it must (the givens, each as often as the
  engine's text does, in digits or ordinary words) and nothing else, so neither the answer nor an
  intermediate value; a model clause that fails falls back to the engine's template, and so does one that
  not every round-trip program solves to the label;
- round trip (`round_trip`): k programs written by the teacher from the worded text alone (one batched
  call, `programs.drawn_runs`, so a program that computes nothing counts for nothing); at least one must
  compute the engine's answer, else the wording is not solvable.

With `stages.prose_tally` the teacher's prose traces are drawn for the variants that qualify at final
calibration (`prose_tally`, called by `outcome.calibrate_nodes`) and their tally is recorded
(`meta.prose_traces`), but they do not decide: the program proves the label and the round trip shows the
text is solvable. The plan's order comes from the weakest student's measured accuracy on the leaf
(which the screen measured): a leaf it solves more often than not gets the backward question first (the
hardest change), others the milder added steps first. `chained` (when the run has another math seed) comes
last; with `stages.chained_fallback` it is held back, and built only when the plan's variants keep none
through the weakest-student screen (`leaves.engine_hardened`). Each operator that cannot apply is one
counted rejection (check `operator`).
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from finmbs.mbs import program_operators as ops
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.programs import drawn_runs, mended, program_request, same
from finmbs.mbs.stages import Check, Stage
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Decision, Problem, Provenance, Trace, TreeNode
from finmbs.resources import render_prompt
from finmbs.verify.program import run_program_async
from finmbs.verify.skeleton import skeleton

STAGE = Stage.LEAF
ENGINE = "engine"
BACKWARD, ADDED, TWO, CHAINED = "backward", "added_step", "two_steps", "chained"
COMPOSED = "composed"  # a decomposed parent over a harder version of one child (`engine_composed`)
# an added step twice, by two different operations of the catalogue, the milder ones first
PLAN_EASY = (BACKWARD, ADDED, ADDED, TWO)  # a leaf the weakest student mostly solves: the hardest change first
PLAN_HARD = (ADDED, ADDED, BACKWARD, TWO)


class WordedAsk(BaseModel):
    """The model's reply for an added step: the new final question."""

    ask: str = Field(min_length=1, max_length=400)


def on(ctx: Context, problem: Problem) -> bool:
    """Whether the engine's operators harden `problem` (math, with programs; finance has its own branch,
    finmbs/mbs/finance_leaves.py, which leaf synthesis asks apart)."""
    return ctx.stages.program_operators and ctx.config.verify.programs and problem.domain == "math"


def plan(ctx: Context, leaf: TreeNode) -> tuple[str, ...]:
    """The operators for `leaf`, in the order the engine tries them (module docstring)."""
    acc = leaf.student_accuracy.get(ctx.weakest.name)
    return PLAN_EASY if acc is not None and acc > 0.5 else PLAN_HARD


def slots(text: str, built: ops.Built) -> str | None:
    """Why `text` fails the number-slot check for `built` (None: it passes)."""
    stated = ops.stated_values(text)
    missing, extra = built.states - stated, stated - built.states
    if not missing and not extra:
        return None
    parts = []
    if missing:
        parts.append("does not state " + ", ".join(ops.literal(v) for v in sorted(missing.elements())))
    if extra:
        withheld = [v for v in extra if v in built.withholds]
        parts.append(
            "states "
            + ", ".join(ops.literal(v) for v in sorted(extra.elements()))
            + (f" (withheld: {', '.join(ops.literal(v) for v in withheld)})" if withheld else "")
        )
    return "number slots: the text " + "; ".join(parts)


def variant(leaf: Problem, built: ops.Built, id: str, question: str, *, worded_by: str, stage: str = STAGE) -> Problem:
    """The engine-authored problem for `built` worded as `question`, made from `leaf` at `stage`."""
    return Problem(
        id=id,
        question=question,
        answer=built.answer or "",
        domain=leaf.domain,
        snippet=leaf.snippet,
        entity=leaf.entity,
        provenance=Provenance(
            seed_id=leaf.provenance.seed_id or leaf.id,
            method="mbs",
            stage=stage,
            tree_path=leaf.provenance.tree_path,
            parent_ids=[leaf.id],
        ),
        meta={
            "data_source": f"finmbs/{leaf.domain}",
            "operator": built.operator,
            "authored_by": ENGINE,
            "worded_by": worded_by,
            "program": built.program,
            "program_answer": built.answer,
            "verify_programs": True,
            "skeleton": skeleton(built.program),
            "operator_details": built.details,
        },
    )


def refused(leaf: Problem, id: str, operator: str, stage: str = STAGE) -> Problem:
    """A stand-in for an operator that could not apply at `stage` (its rejection row names the leaf and
    operator)."""
    return leaf.model_copy(
        update={
            "id": id,
            "meta": {"operator": operator, "authored_by": ENGINE, "source": leaf.id},
            "provenance": leaf.provenance.model_copy(update={"stage": stage, "parent_ids": [leaf.id]}),
        }
    )


async def leaf_source(
    ctx: Context, leaf: TreeNode, found: tuple[Problem, str | None] | None = None
) -> tuple[ops.Source | None, str]:
    """The leaf as the operators start from it: (question, program that computes its answer, answer).
    `found`: what `program_to_answer` gave for the leaf already (the structure check's), else it is asked."""
    problem, why = found or await program_to_answer(ctx, leaf.problem)
    if why:
        return None, f"no program computes its answer: {why}"
    return ops.Source(problem.question, mended(ctx, problem.meta["program"]), problem.answer), ""


async def computed(built: ops.Built) -> str | None:
    """Run `built`'s program in the sandbox: its answer is filled in; why not when it fails or gives
    another value than the engine expects."""
    result = await run_program_async(built.program)
    if not result.ok:
        return f"the engine's program fails: {result.error}"
    if built.expect is not None and ops.answer_value(result.answer or "") != built.expect:
        return f"the engine's program gives {result.answer}, the operator expects {ops.literal(built.expect)}"
    built.answer = result.answer
    return None


async def resampled_instance(ctx: Context, key: str, source: ops.Source) -> tuple[ops.Source, dict]:
    """`source` with its givens drawn again (`stages.engine_resamples` draws at most, seeded by `key`): the
    first draw whose every intermediate value stays admissible, run to its new answer; `source` itself when
    none does."""
    tried = []
    for attempt in range(ctx.stages.engine_resamples):
        built = ops.resampled(source, key, attempt)
        if isinstance(built, ops.Refusal):
            return source, {"resampled": False, "why": built.reason}
        result = await run_program_async(ops.admissibility_program(built.program, source.program))
        if result.ok and result.answer is not None:
            return ops.Source(built.question, built.program, result.answer), {
                "resampled": True,
                "attempt": attempt,
                **built.details,
            }
        tried.append(result.error or "no answer")
    return source, {"resampled": False, "why": "; ".join(tried[-2:])}


def build(name: str, source: ops.Source, key: str) -> list[ops.Built | ops.Refusal]:
    """Operator `name` on `source`: its candidates in the order to try them. An added step tries the mild
    operations of the catalogue first (`ops.MILD`: an amount added or taken away, a split, a repeat), then
    the percents, each group in an order drawn from `key` (the leaf's id)."""
    if name == BACKWARD:
        found = ops.givens(source.question, source.program)
        return [ops.backward(source, g) for g in found] or [ops.Refusal(BACKWARD, "no given to ask for")]
    rng = ops.rng_for(f"{key}:{name}")
    mild = [s for s in ops.STEPS if s.name in ops.MILD]
    other = [s for s in ops.STEPS if s.name not in ops.MILD]
    rng.shuffle(mild)
    rng.shuffle(other)
    steps = mild + other
    if name == ADDED:
        return [ops.added_step(source, step, key) for step in steps]
    return [ops.two_steps(source, a, b, key) for a, b in zip(steps, steps[1:] + steps[:1])]


async def first_built(name: str, source: ops.Source, key: str, nth: int = 0) -> ops.Built | ops.Refusal:
    """The `nth` (from 0) candidate of operator `name` whose program the sandbox runs to the expected
    answer: a plan that names an operator twice gets two different ones."""
    reasons = []
    for candidate in build(name, source, key):
        if isinstance(candidate, ops.Refusal):
            reasons.append(candidate.reason)
            continue
        if (why := await computed(candidate)) is None:
            if nth == 0:
                return candidate
            nth -= 1
            continue
        reasons.append(why)
    return ops.Refusal(name, "; ".join(dict.fromkeys(reasons)) or "no other candidate")


def peer_for(ctx: Context, problem: Problem) -> Problem | None:
    """The seed `chained` takes its first question from: the run's next math seed after `problem`'s own
    (in the seeds file's order, wrapping round); None when the run has no other."""
    seeds = [p for p in ctx.peers if p.domain == "math"]
    ids = [p.id for p in seeds]
    own = problem.provenance.seed_id or problem.id
    if own not in ids or len(seeds) < 2:
        return None
    return seeds[(ids.index(own) + 1) % len(seeds)]


async def chained_built(ctx: Context, leaf: Problem, instance: ops.Source) -> ops.Built | ops.Refusal:
    """`chained`: the peer seed (`peer_for`, its givens drawn again too, so neither seed's wording is copied)
    asked first, its answer standing for one given of `instance` (`chain`)."""
    peer = peer_for(ctx, leaf)
    if peer is None:
        return ops.Refusal(CHAINED, "no other math seed in the run")
    written, why = await program_to_answer(ctx, peer)
    if why:
        return ops.Refusal(CHAINED, f"the seed {peer.id} it would start from has no program: {why}")
    first, _ = await resampled_instance(
        ctx, peer.id, ops.Source(peer.question, mended(ctx, written.meta["program"]), peer.answer)
    )
    return await chain(first, peer.id, instance)


async def chain(first: ops.Source, first_id: str, instance: ops.Source) -> ops.Built | ops.Refusal:
    """`first` asked first, its answer standing for one given of `instance`: the first given (in the order
    `ops.givens` finds them) for which every intermediate value of `instance` stays admissible with that
    answer, run to the new answer. `first_id` is recorded as details.first."""
    value = ops.answer_value(first.answer)
    reasons = []
    for given in ops.givens(instance.question, instance.program):
        built = ops.chained(first, instance, given)
        if isinstance(built, ops.Refusal) or value is None:
            reasons.append(built.reason if isinstance(built, ops.Refusal) else "no answer")
            continue
        second = ops.substituted(instance.program, dict.fromkeys(given.at, ops.literal(value * given.scale)))
        check = await run_program_async(ops.admissibility_program(second, instance.program))
        if not check.ok or check.answer is None:
            reasons.append(f"{ops.written(given.number, given.number.value)} as {first.answer}: {check.error}")
            continue
        built.expect = ops.answer_value(check.answer)
        built.details["first"] = first_id
        if (why := await computed(built)) is None:
            return built
        reasons.append(why)
    return ops.Refusal(CHAINED, "; ".join(dict.fromkeys(reasons)) or "no given to chain into")


async def worded(ctx: Context, built: ops.Built) -> tuple[str, str, list[str]]:
    """(text, who worded it, why earlier wordings failed): the model's clause when it passes the slot check,
    else the engine's template (checked by the caller)."""
    failed: list[str] = []
    if built.clause is None or not ctx.stages.clause_wording:
        return built.question, ENGINE, failed
    clause = built.clause
    prompt = render_prompt(
        "engine_clause",
        what=clause.what,
        numbers=", ".join(ops.literal(v) for v in clause.new_givens) or "none",
        body=clause.body,
        ask=clause.ask,
    )
    [reply] = await ctx.gateway.structured(
        ctx.teachers[0], WordedAsk, role="teacher", messages=[{"role": "user", "content": prompt}]
    )
    ctx.tick(STAGE)
    if reply is None:
        failed.append("the model's clause did not parse")
    else:
        text = f"{clause.body} {reply.ask.strip()}"
        if not reply.ask.strip().endswith("?"):
            failed.append(f"the model's clause asks nothing: {reply.ask.strip()[:80]!r}")
        elif why := slots(text, built):
            failed.append(f"the model's clause: {why}")
        else:
            return text, ctx.teachers[0].name, failed
    return built.question, ENGINE, failed


async def round_trip(ctx: Context, problem: Problem, every: bool = False) -> tuple[int, int]:
    """(how many of the teacher programs written from the text alone compute the answer, how many were
    drawn): k in one batched call, or with `stages.round_trip_stop` one at a time until one computes it
    (the same rule, at least one of up to k: sample i is the batched call's sample i); `every`: all k
    drawn whatever they give. What the programs that ran gave is recorded as meta.round_trip_answers."""
    k = ctx.stages.round_trip_k
    bare = problem.model_copy(update={"meta": {}})
    request = program_request(ctx, bare, equations=True)
    if request is None:
        return 0, k
    one_by_one = ctx.stages.round_trip_stop and not every
    hits, answers, drawn = 0, [], 0
    while drawn < k and not (one_by_one and hits):
        n = 1 if one_by_one else k
        for _, run in await drawn_runs(ctx, bare, request, n=n, first_index=drawn):
            answers.append(run.answer)
            if await same(ctx, problem, run.answer or "", problem.answer):
                hits += 1
        drawn += n
    problem.meta["round_trip_answers"] = answers  # what the programs that ran gave, for reading a miss
    return hits, drawn


async def engine_variant(
    ctx: Context, leaf: TreeNode, name: str, source: ops.Source, id: str, ledger: Ledger, nth: int = 0
) -> TreeNode | None:
    """One operator on the leaf's instance, worded and checked; None with the rejection on `ledger`."""
    key = leaf.problem.id
    built = await (chained_built(ctx, leaf.problem, source) if name == CHAINED else first_built(name, source, key, nth))
    if isinstance(built, ops.Refusal):
        ledger.reject(refused(leaf.problem, id, name), STAGE, f"{name}: {built.reason}", check=Check.OPERATOR)
        return None
    return await checked_node(ctx, leaf, built, id, ledger, stage=STAGE)


async def checked_node(
    ctx: Context, origin: TreeNode, built: ops.Built, id: str, ledger: Ledger, *, stage: str
) -> TreeNode | None:
    """`built` worded (`worded`) and checked by number slots and the round trip: the engine-authored node, a
    synthetic version of `origin` at `stage`, its worked solution the engine's program; None with the
    rejection on `ledger`."""
    text, by, failed = await worded(ctx, built)
    while True:
        problem = variant(origin.problem, built, id, text, worded_by=by, stage=stage)
        if why := slots(text, built):
            ledger.reject(problem, stage, why, check=Check.SLOTS, operator=built.operator)
            return None
        hits, k = await round_trip(ctx, problem, every=by != ENGINE)
        if by == ENGINE or hits == k:
            break
        # a model's clause must be solved to the label by every program: one that misreads it can be solved
        # by the same misreading ("the total cost before adding the additional $140", labelled total + 140,
        # 1 of 3 in GSM8K); else the engine's template, checked again
        answers = problem.meta.get("round_trip_answers", [])  # absent when no program could be requested
        failed.append(f"the model's clause: round trip {hits} of {k}, not all; its programs gave {answers}")
        text, by = built.question, ENGINE
    if failed:
        problem.meta["wording_failed"] = failed
    problem.meta["round_trip"] = f"{hits} of {k}"
    if hits == 0:
        reason = f"wording not solvable: none of {k} programs the teacher wrote from the text gives {problem.answer}"
        ledger.reject(problem, stage, reason, check=Check.ROUND_TRIP, operator=built.operator)
        return None
    trace = Trace(text=f"```python\n{built.program}\n```", answer=problem.answer, model=ENGINE, verified=True)
    reason = f"{built.operator}: computed by the engine's program; round trip {hits} of {k}; worded by {by}"
    decision = Decision(stage=stage, outcome="accepted", reason=reason, data={"program_answer": problem.answer})
    return TreeNode(problem=problem, trace=trace, path=origin.path, mirrors=origin.problem.id, decisions=[decision])


def parent_source(ctx: Context, parent: Problem) -> ops.Source | None:
    """A decomposed parent as the engine composes over it: its question, its own program (the one verified
    before decomposition, meta.own_program; else its program when that calls no child), its answer."""
    own = parent.meta.get("own_program")
    if not own and not parent.meta.get("program_functions"):
        own = parent.meta.get("program")
    return ops.Source(parent.question, mended(ctx, own), parent.answer) if isinstance(own, str) and own else None


async def engine_composed(ctx: Context, node: TreeNode, pools: list[list[TreeNode]], ledger: Ledger) -> list[TreeNode]:
    """`stages.engine_compose`: synthetic versions of a decomposed `node` the engine composes from its
    children's synthetic versions, before any teacher trial (compose.py). Each child version that has a
    program of its own (the engine's variants, and verified teacher variants), up to stages.Nc of them, is
    asked first and its answer stands for one given of the parent's own program (`chain`): the parent over
    its harder child, every intermediate value kept admissible. Each is worded and checked as an engine
    variant (`checked_node`: slots, round trip); a kept version has that child version as its child. The
    alpha_parent screen is the caller's."""
    compose = Stage.COMPOSE
    instance = parent_source(ctx, node.problem)
    if instance is None:
        reason = "engine composition not applied: the parent has no program of its own"
        node.decisions.append(Decision(stage=compose, outcome="info", reason=reason))
        return []
    versions = [
        v
        for pool in pools
        for v in pool
        if isinstance(v.problem.meta.get("program"), str) and not v.problem.meta.get("program_functions")
    ][: ctx.stages.Nc]
    kept = []
    for t, version in enumerate(versions):
        child = version.problem
        first = ops.Source(child.question, mended(ctx, child.meta["program"]), child.answer)
        id = f"{node.problem.id}.e{t}"
        built = await chain(first, child.id, instance)
        if isinstance(built, ops.Refusal):
            reason = f"{COMPOSED}: {child.id} into the parent: {built.reason}"
            ledger.reject(refused(node.problem, id, COMPOSED, compose), compose, reason, check=Check.OPERATOR)
            continue
        built.operator = COMPOSED
        built.details["child_operator"] = child.meta.get("operator")
        if composed := await checked_node(ctx, node, built, id, ledger, stage=compose):
            composed.children = [version]
            kept.append(composed)
    reason = f"engine composition: {len(kept)} of {len(versions)} child versions chained into the parent passed"
    node.decisions.append(Decision(stage=compose, outcome="info", reason=reason, data={"engine": True}))
    return kept


async def prose_tally(ctx: Context, node: TreeNode) -> None:
    """The teacher's prose traces on an engine variant that qualified, drawn as for any problem
    (`teacher_trace`) and recorded as `meta.prose_traces`; they decide nothing (the program proves the
    label). A verifying trace becomes the node's worked solution in place of the engine's program."""
    trace, why = await teacher_trace(ctx, node.problem)
    node.problem.meta["prose_traces"] = f"verified by {trace.model}" if trace else why
    if trace is not None:
        node.trace = trace


def operators_for(ctx: Context, leaf: TreeNode, fallback: bool = False) -> tuple[str, ...]:
    """The operators `engine_leaves` applies to `leaf`, in order: the plan, and `chained` when the run has
    another math seed; with `stages.chained_fallback`, `chained` alone on the fallback call (made when the
    plan's variants kept none) and never before it."""
    chained = (CHAINED,) if peer_for(ctx, leaf.problem) else ()
    if not ctx.stages.chained_fallback:
        return () if fallback else plan(ctx, leaf) + chained
    return chained if fallback else plan(ctx, leaf)


async def engine_leaves(
    ctx: Context,
    leaf: TreeNode,
    ledger: Ledger,
    found: tuple[Problem, str | None] | None = None,
    *,
    fallback: bool = False,
) -> list[TreeNode]:
    """The leaf's variants by the engine's operators (`operators_for`), each once, checked (module
    docstring); the novelty guard, structure check and weakest-student screen are the caller's. `found`: as
    for `leaf_source`. `fallback`: the operators held back until the plan's variants kept none."""
    order = operators_for(ctx, leaf, fallback)
    if not order:
        return []
    source, why = await leaf_source(ctx, leaf, found)
    if source is None:
        if not fallback:
            reason = f"engine operators not applied: {why}"
            leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=reason))
        return []
    instance, drawn = await resampled_instance(ctx, leaf.problem.id, source)
    first = len(plan(ctx, leaf)) if fallback else 0  # ids stay apart from the plan's variants
    leaf.decisions.append(
        Decision(
            stage=STAGE,
            outcome="info",
            reason=f"engine operators {'held back, ' if fallback else ''}in order {', '.join(order)}"
            + (f" on the leaf with new givens {drawn.get('givens')}" if drawn.get("resampled") else " on the leaf"),
            data={"operators": list(order), "instance": drawn, "instance_question": instance.question},
        )
    )
    nodes = await asyncio.gather(
        *(
            engine_variant(ctx, leaf, name, instance, f"{leaf.problem.id}.e{first + i}", ledger, order[:i].count(name))
            for i, name in enumerate(order)
        )
    )
    kept = [n for n in nodes if n is not None]
    for node in kept:
        node.problem.meta["source_accuracy"] = leaf.student_accuracy.get(ctx.weakest.name)
        if drawn.get("resampled"):
            node.problem.meta["resampled"] = drawn.get("givens")
    return kept


FUNNEL = ("attempted", "built", "worded", "round_trip", "screened", "goldilocks", "qualified")


def reached(stage: str, data: dict) -> int:
    """How far along `FUNNEL` an engine variant rejected at `stage` (with `data`) got: the index of the
    last step it passed."""
    check = data.get("check")
    if check == Check.OPERATOR:
        return 0
    if check == Check.SLOTS:
        return 1
    if check == Check.ROUND_TRIP:
        return 2
    if stage in (Stage.LEAF, Stage.NOVELTY, Stage.COMPOSE):  # structure, novelty guard, the weakest screen
        return 3
    difficulty = data.get("difficulty") or {}
    return 5 if stage == Stage.CALIBRATE and difficulty.get("band") == "goldilocks" else 4


def operator_funnel(qualified: list[Problem], rejected: list[tuple[Problem, str, dict]]) -> dict[str, dict]:
    """Per operator of the engine, how many variants reached each step of `FUNNEL`, and the target's mean
    pass rate on their sources before (the weakest student's screen, when it is the target) and on the
    variants at calibration after. Counted over the variants that ended in rejected.jsonl (`rejected`:
    (problem, stage, data)) or among the qualified; a variant kept inside a tree and composed is neither."""
    rows: dict[str, list[int]] = {}
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}

    def track(problem: Problem, last: int, difficulty: dict | None) -> None:
        op = problem.meta.get("operator")
        if problem.meta.get("authored_by") != ENGINE or not isinstance(op, str):
            return
        # a math operator's row is its name (added_step:percent_of -> added_step); a finance one's keeps its
        # operator (finance:applied, finance:backward:days -> finance:backward)
        op = ":".join(op.split(":")[:2]) if op.startswith("finance:") else op.split(":")[0]
        row = rows.setdefault(op, [0] * len(FUNNEL))
        for i in range(last + 1):
            row[i] += 1
        if (b := problem.meta.get("source_accuracy")) is not None:
            before.setdefault(op, []).append(float(b))
        if difficulty and difficulty.get("n"):
            after.setdefault(op, []).append(difficulty["k"] / difficulty["n"])

    for problem, stage, data in rejected:
        track(problem, reached(stage, data), data.get("difficulty") if stage == Stage.CALIBRATE else None)
    for problem in qualified:
        track(problem, len(FUNNEL) - 1, problem.meta.get("difficulty"))

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    return {
        op: {
            **dict(zip(FUNNEL, row)),
            "target_before": mean(before.get(op, [])),
            "target_after": mean(after.get(op, [])),
        }
        for op, row in rows.items()
    }
