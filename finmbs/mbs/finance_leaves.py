"""Finance leaf hardening by the engine's finance operators (`stages.finance_operators`, finmbs's, not in
the paper): the finance branch of `finmbs.mbs.engine_leaves`.

From a finance leaf whose program (its own, or one the teachers write for it: `labels.program_to_answer`)
quotes a rate of its passage, the engine builds harder problems itself (`finmbs.mbs.finance_operators`:
the rate applied to a principal over days, the backward questions, a second period, two figures of one
passage), runs each program in the sandbox on the leaf's passage and keeps its value as the label only when
it is the value the engine computed exactly. The model only names the provision the quoted figure comes
from (prompts/finance_figure_name.txt, one call per figure), checked to hold no figure and to fit the
figure's role (`finance_operators.role_error`: a margin added to a benchmark is never named as a
benchmark); a name that fails falls back to the engine's own (the passage's defined term before the figure).

Each text then passes the number-slot check (it states exactly the engine's inputs: never the quoted
figure's value, nor the answer) and the round trip (`engine_leaves.round_trip`: k teacher programs from the
question and passage alone, at least one computing the engine's answer): solvability is measured on the
problem, not on the teacher's prose arithmetic. The prose traces are still drawn and tallied for the
variants the screen keeps (`leaves.engine_hardened`). Each kept variant records meta.finance_op, what
re-grounding by rebinding needs (`finmbs.mbs.rebind`).
"""

from __future__ import annotations

import asyncio
from fractions import Fraction

from finmbs.mbs import engine_leaves as engine
from finmbs.mbs import finance_operators as fo
from finmbs.mbs import program_operators as ops
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.finance_terms import FactName, short_name
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.programs import mended
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Decision, Problem, Trace, TreeNode
from finmbs.resources import render_prompt
from finmbs.verify.program import run_program_async
from finmbs.verify.spans import candidate_spans

STAGE = Stage.LEAF
# the mildest first: the leaf is a lookup the target already solves
PLAN = (
    "finance:all_in_rate",
    "finance:applied",
    "finance:backward:principal",
    "finance:second_period",
    "finance:backward:days",
)
TWO = "finance:two_figures"
HALF_CENT = Fraction(1, 200)


def on(ctx: Context, problem: Problem) -> bool:
    """Whether the engine's finance operators harden `problem` (finance, with programs and a passage)."""
    return (
        ctx.stages.finance_operators
        and ctx.config.verify.programs
        and problem.domain == "finance"
        and problem.snippet is not None
    )


def company_of(problem: Problem) -> str:
    """How the question names the company: its entity without the legal form ("Brown-Forman")."""
    return short_name(problem.entity or "") or "the borrower"


def second_figure(passage: str, first: fo.QuotedFigure) -> fo.QuotedFigure | None:
    """Another rate of the passage in the same role as `first` (a grid's other level), for `two_figures`."""
    for span in candidate_spans(passage):
        if span.text == first.text or span.kind != "percent":
            continue
        figure = fo.span_figure(passage, span, "other")
        if figure.role == first.role and figure.base == first.base and figure.value != first.value:
            return figure
    return None


async def provision_name(
    ctx: Context, problem: Problem, passage: str, figure: fo.QuotedFigure, question: str
) -> tuple[str | None, str, list[str]]:
    """(the name, who named it, why names failed): the teacher's words when they pass `role_error` and name
    the term whose definition holds the figure (`passage_name_error`), else the engine's
    (`finance_operators.engine_name`) when it passes `role_error`; None when neither passes."""
    failed: list[str] = []
    prompt = render_prompt(
        "finance_figure_name",
        company=company_of(problem),
        passage=passage,
        figure=figure.text,
        context=figure.context,
        role=fo.role_words(figure.role or ""),
        question=question,
    )
    [reply] = await ctx.gateway.structured(
        ctx.teachers[0], FactName, role="teacher", messages=[{"role": "user", "content": prompt}], temperature=0.0
    )
    ctx.tick(STAGE)
    if reply is None:
        failed.append("the teacher's name did not parse")
    else:
        name = reply.name.strip().rstrip(".").strip('"')
        if why := fo.role_error(name, figure.role or "", figure.base) or fo.passage_name_error(name, passage, figure):
            failed.append(f"the teacher's name: {why}")
        else:
            return name, ctx.teachers[0].name, failed
    own = fo.engine_name(passage, figure)
    if own and not (why := fo.role_error(own, figure.role or "", figure.base)):
        return own, engine.ENGINE, failed
    failed.append(f"the engine's name {own!r}: {why}" if own else "the passage defines no term before the figure")
    return None, "", failed


async def computed(built: fo.FinanceBuilt, passage: str) -> str | None:
    """Run `built`'s program on `passage` in the sandbox; its answer is filled in. Why not when it fails or its
    value is not the engine's exact one (to within half a cent: the program rounds in floating point)."""
    result = await run_program_async(built.program(), passage)
    if not result.ok or result.value is None:
        return f"the engine's program fails: {result.error}"
    if abs(Fraction(result.value) - built.expect) > HALF_CENT:
        return f"the engine's program gives {result.value}, the engine computes {float(built.expect)}"
    built.answer = fo.answer_of(built, built.expect)
    return None


def finance_variant(leaf: Problem, built: fo.FinanceBuilt, id: str, question: str, named_by: str) -> Problem:
    """The engine-authored problem for `built` (as `engine_leaves.variant`), with who named its provision and
    meta.finance_op (what rebinding needs)."""
    problem = engine.variant(leaf, fo.as_built(built, question), id, question, worded_by=engine.ENGINE)
    problem.meta.update(named_by=named_by, finance_op=built.spec())
    return problem


async def finance_variant_node(
    ctx: Context,
    leaf: TreeNode,
    built: fo.FinanceBuilt | ops.Refusal,
    names: dict[str, tuple[str | None, str, list[str]]],
    id: str,
    ledger: Ledger,
) -> TreeNode | None:
    """One built operator named, worded, slot-checked and round-tripped; None with the rejection on `ledger`."""

    def refuse(operator: str, why: str) -> None:
        ledger.reject(engine.refused(leaf.problem, id, operator), STAGE, f"{operator}: {why}", check=Check.OPERATOR)

    if isinstance(built, ops.Refusal):
        return refuse(built.operator, built.reason)
    passage = leaf.problem.snippet.text if leaf.problem.snippet else ""
    if why := await computed(built, passage):
        return refuse(built.operator, why)
    wanted = [names[f.text] for f in built.figures[: built.named]]  # by figure: two_figures names the higher first
    if any(n is None for n, _, _ in wanted):
        return refuse(built.operator, "no name for the provision: " + "; ".join(f for _, _, fs in wanted for f in fs))
    built.names = [n for n, _, _ in wanted if n]
    text = built.question(company_of(leaf.problem))
    problem = finance_variant(leaf.problem, built, id, text, ", ".join(dict.fromkeys(by for _, by, _ in wanted)))
    if failed := [f for _, _, fs in wanted for f in fs]:
        problem.meta["naming_failed"] = failed
    if why := engine.slots(text, fo.as_built(built, text)):
        ledger.reject(problem, STAGE, why, check=Check.SLOTS, operator=built.operator)
        return None
    hits, k = await engine.round_trip(ctx, problem)
    problem.meta["round_trip"] = f"{hits} of {k}"
    if hits == 0:
        reason = f"wording not solvable: none of {k} programs the teacher wrote from the text gives {problem.answer}"
        ledger.reject(problem, STAGE, reason, check=Check.ROUND_TRIP, operator=built.operator)
        return None
    trace = Trace(text=f"```python\n{built.program()}\n```", answer=problem.answer, model=engine.ENGINE, verified=True)
    reason = f"{built.operator}: computed by the engine's program over the quoted figure; round trip {hits} of {k}"
    decision = Decision(stage=STAGE, outcome="accepted", reason=reason, data={"program_answer": problem.answer})
    return TreeNode(problem=problem, trace=trace, path=leaf.path, mirrors=leaf.problem.id, decisions=[decision])


async def finance_leaves(
    ctx: Context, leaf: TreeNode, ledger: Ledger, found: tuple[Problem, str | None] | None = None
) -> list[TreeNode]:
    """The leaf's variants by the engine's finance operators, each once, checked (module docstring); the
    novelty guard, structure check and weakest-student screen are the caller's (`leaves.engine_hardened`).
    `found`: what `labels.program_to_answer` gave for the leaf already (the structure check's), else it is
    asked."""
    passage = leaf.problem.snippet.text if leaf.problem.snippet else ""
    problem, why = found or await program_to_answer(ctx, leaf.problem)
    usable = []
    if not why:
        usable = [f for f in fo.quoted_figures(mended(ctx, problem.meta["program"]), passage) if fo.usable(f) is None]
        why = "" if usable else "its program quotes no rate of its passage the operators apply"
    if why:
        leaf.decisions.append(Decision(stage=STAGE, outcome="info", reason=f"finance operators not applied: {why}"))
        return []
    figure = usable[0]
    terms = fo.terms_for(leaf.problem.id, figure.value, fo.day_count(passage))
    other = second_figure(passage, figure)
    plan = PLAN + ((TWO,) if other else ())
    builts = [fo.build(name, [figure] + ([other] if other and name == TWO else []), terms) for name in plan]
    probe = next((b for b in builts if isinstance(b, fo.FinanceBuilt)), None)
    asked = probe.question(company_of(leaf.problem), ["[NAME]", "[NAME]"]) if probe else ""
    names = {figure.text: await provision_name(ctx, leaf.problem, passage, figure, asked)}
    if other:
        names[other.text] = await provision_name(ctx, leaf.problem, passage, other, asked)
    leaf.decisions.append(
        Decision(
            stage=STAGE,
            outcome="info",
            reason=f"finance operators in order {', '.join(plan)} over {figure.text!r} ({figure.role}, {figure.base})",
            data={"operators": list(plan), "figure": figure.text, "names": {t: n for t, (n, _, _) in names.items()}},
        )
    )
    nodes = await asyncio.gather(
        *(finance_variant_node(ctx, leaf, b, names, f"{leaf.problem.id}.f{i}", ledger) for i, b in enumerate(builts))
    )
    kept = [n for n in nodes if n is not None]
    for node in kept:
        node.problem.meta["source_accuracy"] = leaf.student_accuracy.get(ctx.weakest.name)
    return kept
