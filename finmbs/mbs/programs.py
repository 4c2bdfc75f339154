"""Answers proven by programs (`verify.programs`, finmbs's layer, not in the paper; docs/programs.md).

With it on, every teacher-written candidate (seed variant, subproblem, composed parent, direct-baseline
problem) carries a small Python program that computes its answer; finance programs bind document
figures with `quote(text, value)` checked against the passage. The paper's trace rule still holds
underneath. The decision, for a candidate with stated answer A whose program gives v:

- the program fails (sandbox rule, quote, non-number): rejected;
- v = A and a teacher trace verifies A: verified;
- v = A and the traces agree on another answer: rejected (program and traces disagree);
- v = A and no trace verifies A: rejected by the trace rule, as without programs ("unverified: ...");
- v != A and a trace verifies A: rejected (program and traces disagree);
- v != A and the traces agree on v (the relabel consensus, or with `stages.relabel` a trace verifying
  v): relabeled to v (`meta.relabeled_from`); without `stages.relabel`: rejected.

Every other rejection here carries `check: program` (counted as `program_rejected`). The problem's meta
records the program, what it gave and the figures it quoted (`program`, `program_answer`, `quotes`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from finmbs.config import Endpoint
from finmbs.llm.embedded import CLOSES_AFTER
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.solve import document_block
from finmbs.mbs.stages import Check, Stage
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Decision, Problem, Trace, TreeNode
from finmbs.resources import render_prompt
from finmbs.verify import verify_answer
from finmbs.verify.program import (
    ProgramResult,
    computes_nothing,
    equation_imports,
    line_breaks,
    printed_answer,
    program_in,
    run_program_async,
)
from finmbs.verify.spans import NAME, Span, bind, candidate_spans, listing

CHECK = Check.PROGRAM  # the rejection check of this layer
# what a program run records in a problem's meta (a re-grounded copy drops them: its program is new)
PROGRAM_META = (
    "program",
    "program_functions",
    "program_answer",
    "program_error",
    "quotes",
    "verify_programs",
    "own_program",
    "program_as_written",
    "program_votes",
    "program_written",
    "program_writer",
    "program_attempts",
)
NO_FIGURES = "the passage states no figure, so no finance program was requested (verify.quote_spans)"
STATED_FIELD = '"answer": "<the final answer alone>"'  # the reply templates' last field, followed by the program's


REPLY_SHAPES = 512  # reply models kept built: one per passage's figures, so a long run must not keep them all
# every program field's schema: the embedded grammar holds the string open until the program binds answer
BINDS_ANSWER = {CLOSES_AFTER: "answer ="}


class WrittenProgram(BaseModel):
    """The teacher's reply when asked for a program alone (a problem that carries none; a decomposed parent's)."""

    # unbounded in the schema (a llama.cpp grammar limit; the sandbox bounds it); held open until it binds answer
    program: str = Field(min_length=1, json_schema_extra=BINDS_ANSWER)


def programs_on(ctx: Context) -> bool:
    return ctx.config.verify.programs


def program_prompt(
    ctx: Context, text: str, domain: str, functions: dict[str, str] | None = None, spans: list[Span] | None = None
) -> str:
    """A teacher prompt asking for a program too (unchanged with programs off): the reply template gains
    the `program` field, and the instructions (finance: quote(), or with `spans` the passage's figures
    to choose among; composition: the children's functions)."""
    if not programs_on(ctx):
        return text
    listed = ", ".join(f"{name}() returns {answer}" for name, answer in (functions or {}).items())
    instructions = render_prompt(
        "program",
        finance=render_prompt("program_figures", figures=listing(spans)).rstrip("\n")
        if spans
        else render_program_finance(domain),
        children=render_prompt("program_children", functions=listed).rstrip("\n") if listed else "",
    )
    text = text.replace(STATED_FIELD, render_prompt("program_field_spans" if spans else "program_field").strip())
    head, sep, tail = text.rpartition("Reply with only one JSON object")
    return f"{head.rstrip()}\n{instructions.strip()}\n\n{sep}{tail}" if sep else text + instructions


def render_equations(ctx: Context) -> str:
    """The offer of linear equations (`verify.program_equations`), or nothing."""
    return render_prompt("program_equations").rstrip("\n") if ctx.config.verify.program_equations else ""


def render_program_finance(domain: str) -> str:
    """The quote() instructions, for finance."""
    return render_prompt("program_finance").rstrip("\n") if domain == "finance" else ""


def quote_spans_on(ctx: Context, problem: Problem) -> bool:
    """Whether `problem`'s program takes document figures by choosing among its passage's spans
    (`verify.quote_spans`, finance with programs)."""
    return programs_on(ctx) and ctx.config.verify.quote_spans and problem.domain == "finance"


class ChosenFigure(BaseModel):
    """One document figure a program uses: the variable it gets and the figure's text as listed."""

    name: str = Field(pattern=NAME.pattern, description="a lower-case Python variable name")
    figure: str = Field(description="one figure's text, exactly as listed")


class SpanProgram(BaseModel):
    """A finance program over chosen document figures (`verify.quote_spans`)."""

    figures: list[ChosenFigure] = Field(min_length=1)
    program: str = Field(min_length=1, json_schema_extra=BINDS_ANSWER)


@lru_cache(maxsize=REPLY_SHAPES)
def chosen_figure(texts: tuple[str, ...]) -> type[ChosenFigure]:
    """`ChosenFigure` whose `figure` is one of `texts` (a JSON-schema enum: a constrained decoder can write
    no other text, and a reply from an unconstrained one with another text does not parse)."""
    return create_model(
        "ChosenFigure",
        __base__=ChosenFigure,
        figure=(Literal[texts], Field(description="one figure's text, exactly as listed")),  # type: ignore[valid-type]
    )


def span_program_reply(spans: list[Span]) -> type[SpanProgram]:
    """`SpanProgram` whose figures are chosen among `spans` (`chosen_figure`), at most one choice per span
    (a small model cannot loop in the list)."""
    return create_model(
        "SpanProgram",
        __base__=SpanProgram,
        figures=(list[chosen_figure(tuple(s.text for s in spans))], Field(min_length=1, max_length=len(spans))),  # type: ignore[misc]
    )


def figure_spans(ctx: Context, problem: Problem, text: str | None = None) -> list[Span]:
    """The figures a teacher-written program for a problem like `problem` chooses among: the spans of
    `text` (default: its passage) with `verify.quote_spans` in finance, else none (quote() by recall)."""
    return candidate_spans(text if text is not None else passage(problem)) if quote_spans_on(ctx, problem) else []


def bound_program(worked: BaseModel, text: str | None) -> tuple[str | None, str | None]:
    """(the program of a worked problem, None): with figures chosen among the spans of `text`, preceded by
    their `name = quote('text', value)` lines (`verify.spans.bind`); (None, why) when a choice cannot bind."""
    program, chosen = getattr(worked, "program", None), getattr(worked, "figures", None)
    if not program or not chosen:
        return program, None
    return span_source(worked, candidate_spans(text))  # type: ignore[arg-type]


def span_source(reply: SpanProgram, spans: list[Span]) -> tuple[str | None, str | None]:
    """(the program with a `name = quote('text', value)` line for each chosen figure before it, None), or
    (None, why not)."""
    return bind([(c.name, c.figure) for c in reply.figures], spans, reply.program)


def child_functions(children: list[TreeNode]) -> dict[str, Any]:
    """child_k -> child k's program (with its own children's functions), for a composed parent's program."""
    functions = {}
    for k, child in enumerate(children, 1):
        source = child.problem.meta.get("program")
        if source:
            own = child.problem.meta.get("program_functions")
            functions[f"child_{k}"] = {"source": source, "functions": own} if own else source
    return functions


def listed_children(children: list[TreeNode], functions: dict[str, Any]) -> str:
    """One line per child function offered to a parent's program: its name, what it returns, its problem."""
    return "\n".join(
        f"- child_{k}() returns {child.problem.answer}; its problem: {child.problem.question}"
        for k, child in enumerate(children, 1)
        if f"child_{k}" in functions
    )


def mended(ctx: Context, source: str) -> str:
    """`source` with the line breaks it lacks added (`verify.program_line_breaks`), the import of the
    linear subset's names it calls (`verify.program_equations`) and its final print made its answer
    (`verify.program_printed_answer`), each when needed and switched on; else as written."""
    verify = ctx.config.verify
    source = (verify.program_line_breaks and line_breaks(source)) or source
    source = (verify.program_equations and equation_imports(source)) or source
    return (verify.program_printed_answer and printed_answer(source)) or source


def with_mends(ctx: Context, problem: Problem) -> Problem:
    """`problem` with its program mended by `mended` (what the teacher wrote kept as
    meta.program_as_written), unchanged when it needs nothing or the mends do not help."""
    source = problem.meta.get("program")
    if not isinstance(source, str) or (fixed := mended(ctx, source)) == source:
        return problem
    return problem.model_copy(update={"meta": {**problem.meta, "program": fixed, "program_as_written": source}})


def passage(problem: Problem) -> str | None:
    return problem.snippet.text if problem.snippet else None


async def run_for(problem: Problem, source: str | None = None) -> ProgramResult:
    """Run the problem's program (or `source`) against its passage, with its children's functions."""
    return await run_program_async(
        source or problem.meta.get("program") or "", passage(problem), functions=problem.meta.get("program_functions")
    )


def recorded(problem: Problem, result: ProgramResult) -> Problem:
    """`problem` with what its program gave in meta (the figures it quoted, for finance)."""
    meta = {**problem.meta, "verify_programs": True, "program_answer": result.answer if result.ok else None}
    if not result.ok:
        meta["program_error"] = result.error
    if result.quotes or problem.domain == "finance":
        meta["quotes"] = [q.model_dump() for q in result.quotes]
    return problem.model_copy(update={"meta": meta})


def quoted(problem: Problem) -> list[dict[str, Any]] | None:
    """The figures the problem's program quoted from its passage, when its program ran; None otherwise
    (leakage rule 5 then reads the question's figures instead)."""
    return problem.meta.get("quotes") if problem.meta.get("program_answer") is not None else None


async def composed_parent(
    ctx: Context, problem: Problem, source: str, functions: dict[str, Any]
) -> tuple[Problem, str | None]:
    """A decomposition's check: `source`, the parent's program over its verified children's functions
    (`child_functions`), run in the sandbox. (`problem` with it recorded as meta.program/program_functions,
    None) when its result is the parent's answer; otherwise (`problem` with what it gave, why not). The
    parent's earlier own program, if any, is kept as meta.own_program (it was checked when the parent was)."""
    written, source = source, mended(ctx, source)
    result = await run_program_async(source, passage(problem), functions=functions)
    meta = {key: v for key, v in problem.meta.items() if key != "program_as_written"}  # the own program's
    meta |= {"program": source, "program_functions": functions}
    if written != source:
        meta["program_as_written"] = written
    if (own := problem.meta.get("program")) and own != source:
        meta["own_program"] = own
    problem = recorded(problem.model_copy(update={"meta": meta}), result)
    if not result.ok:
        return problem, f"parent program failed: {result.error}"
    if not await same(ctx, problem, result.answer or "", problem.answer):
        return problem, f"parent program gives {result.answer}, the parent's answer is {problem.answer!r}"
    return problem, None


async def same(ctx: Context, problem: Problem, a: str, b: str) -> bool:
    """a and b are the same answer under the domain comparer (finance: the judge where it cannot decide)."""
    check = await verify_answer(
        problem.domain, a, b, question=problem.question, gateway=ctx.gateway, judge=ctx.config.roles.judge
    )
    return check.correct


def relabeled(problem: Problem, answer: str, trace: Trace) -> Problem:
    meta = {**problem.meta, "relabeled_from": problem.answer, "teacher_solution": trace.text}
    return problem.model_copy(update={"answer": answer, "meta": meta})


async def agreed(ctx: Context, problem: Problem, result: ProgramResult) -> tuple[Problem, ProgramResult, str | None]:
    """`verify.program_agreement` (k): the problem's program is one of k, the other k - 1 drawn from the
    first teacher without the answer (`program_request`, one batched call); a draw that gives no program,
    or one that fails to run, votes for nothing. (problem, result, None) when more than half of the k give
    one answer: the problem's own program when it is among them; an engine-written program
    (meta.program_written, as in `finmbs verify`) in the minority gives way to the majority's first. The
    tally is recorded as meta.program_votes. (.., why) when no answer has a majority, or when a
    candidate's own program is outvoted: the label is not trusted."""
    k = ctx.config.verify.program_agreement
    bare = problem.model_copy(update={"meta": {m: v for m, v in problem.meta.items() if m not in PROGRAM_META}})
    request = program_request(ctx, bare)
    drawn = await drawn_runs(ctx, bare, request, n=k - 1, first_index=1) if request else []
    votes = [(problem, result)] + [(recorded(written, run), run) for written, run in drawn]
    groups: list[list[tuple[Problem, ProgramResult]]] = []
    for vote in votes:
        for group in groups:
            if await same(ctx, problem, group[0][1].answer or "", vote[1].answer or ""):
                group.append(vote)
                break
        else:
            groups.append([vote])
    tally = "; ".join(f"{group[0][1].answer} x{len(group)}" for group in groups) + f" of {k} programs"
    best = max(groups, key=len)
    if 2 * len(best) <= k:
        return problem, result, f"programs disagree, no majority: {tally}"
    if best is not groups[0]:
        if not problem.meta.get("program_written"):
            return problem, result, f"its program gives {result.answer}, outvoted: {tally}"
        problem, result = best[0]
    return problem.model_copy(update={"meta": {**problem.meta, "program_votes": tally}}), result, None


async def program_node(
    ctx: Context,
    problem: Problem,
    ledger: Ledger,
    *,
    stage: str,
    path: str,
    mirrors: str | None = None,
    relabel: bool | None = None,
    unverified: str | None = None,
    **data: Any,
) -> TreeNode | None:
    """The node for a teacher-written candidate under the program rule (module docstring), or None
    with the rejection on `ledger`; `relabel` (default `stages.relabel`): whether agreeing program and
    traces may relabel it. A program that agrees with the stated answer no trace verifies fails the
    trace rule, not the program: rejected as without programs ("unverified: ...", check `unverified`);
    `data` goes on every rejection."""

    def reject(reason: str, check: str | None = CHECK) -> None:
        ledger.reject(problem, stage, reason, **({"check": check} if check else {}), **data)

    if not problem.meta.get("program"):
        reject(problem.meta.get("program_error") or "no program")
        return None
    problem = with_mends(ctx, problem)
    if computes_nothing(problem.meta["program"]):
        reject("the program computes nothing: it binds the answer to a literal")
        return None
    result = await run_for(problem)
    problem = recorded(problem, result)
    if not result.ok:
        reject(f"program failed: {result.error}")
        return None
    if ctx.config.verify.program_agreement > 1:
        problem, result, disagree = await agreed(ctx, problem, result)
        if disagree:
            reject(disagree)
            return None
    v, stated = result.answer or "", problem.answer
    relabel = ctx.stages.relabel if relabel is None else relabel
    agrees = await same(ctx, problem, v, stated)
    if not agrees and not relabel:
        reject(f"program gives {v}, stated answer {stated!r} (relabeling off)")
        return None
    trace, why = await teacher_trace(ctx, problem, relabel=relabel)
    reason = None
    if trace is not None and not why:  # a trace verifies the stated answer
        if agrees:
            reason = f"answer verified by its program and {trace.model}"
        else:
            reject(
                f"program and traces disagree: program gives {v}, a trace of {trace.model} verifies the stated "
                f"{stated!r}"
            )
            return None
    elif trace is not None:  # the traces agree on another answer
        if await same(ctx, problem, v, trace.answer):
            reason = f"relabeled: stated {stated!r}; its program and all traces of {trace.model} give {trace.answer!r}"
            problem = relabeled(problem, trace.answer, trace)
        else:
            reject(
                f"program and traces disagree: program gives {v}, traces agree on {trace.answer!r} (stated {stated!r})"
            )
            return None
    elif agrees:
        reject(f"unverified: {why}", check=unverified)
        return None
    else:  # relabel on, the program gives another answer: does a trace verify the program's? (cached samples first)
        trace, why_v = await teacher_trace(ctx, problem.model_copy(update={"answer": v}))
        if trace is None:
            reject(f"program gives {v}, stated {stated!r}, no trace verifies either: {why}")
            return None
        reason = f"relabeled: stated {stated!r}; its program gives {v} and a trace of {trace.model} verifies it"
        problem = relabeled(problem, v, trace)
    decision = Decision(stage=stage, outcome="accepted", reason=reason, data={"program_answer": v})
    return TreeNode(problem=problem, trace=trace, path=path, mirrors=mirrors, decisions=[decision])


@dataclass(frozen=True)
class ProgramRequest:
    """A request for a program alone for one problem: the prompt, and the passage's figures to choose among
    (none: quote() by recall, or math)."""

    messages: list[dict[str, str]]
    spans: list[Span] = field(default_factory=list)


def program_request(ctx: Context, problem: Problem, *, equations: bool = False) -> ProgramRequest | None:
    """The request for `problem`'s program, written without seeing its answer; None for a finance passage
    with no figure to choose (`verify.quote_spans`). `equations`: linear equations offered too
    (`verify.program_equations`, on a redraw: `write_program`)."""
    spans = candidate_spans(passage(problem)) if quote_spans_on(ctx, problem) else []
    if quote_spans_on(ctx, problem) and not spans:
        return None
    text = render_prompt(
        "program_write_spans" if spans else "program_write",
        equations=render_equations(ctx) if equations else "",
        finance="" if spans else render_program_finance(problem.domain),
        document=document_block(problem),
        question=problem.question,
        figures=listing(spans),
        problem_rates=problem_rates(problem.question) if spans else "",
    )
    return ProgramRequest(messages=[{"role": "user", "content": text}], spans=spans)


def problem_rates(question: str) -> str:
    """The problem's own percentages with the rates a program writes for them ("4.8% is 0.048"), as the
    passage's figures are listed: read in round trips, the 1.5B added the question's 4.8% as 4.8 to a listed
    0.0575. Empty when the problem states none."""
    rates = [s for s in candidate_spans(question) if s.kind == "percent"]
    if not rates:
        return ""
    shown = "; ".join(f"{s.text} is {s.literal}" for s in dict((s.text, s) for s in rates).values())
    return f"The percentages the problem itself states, as rates: {shown}.\n"


async def drawn_runs(
    ctx: Context, problem: Problem, request: ProgramRequest, *, n: int, first_index: int
) -> list[tuple[Problem, ProgramResult]]:
    """n programs drawn from the first teacher for `request` (`drawn_programs`), each mended and run
    against `problem`'s passage: (`problem` carrying it as meta.program, marked written by that teacher, its
    run) for every draw that ran. A draw that gives no program, computes nothing (prints a number it was
    never asked to compute), or fails to run gives nothing. The one loop behind program agreement and the
    engine's round trip."""
    teacher = ctx.teachers[0]
    runs: list[tuple[Problem, ProgramResult]] = []
    for source, _ in await drawn_programs(ctx, teacher, request, n=n, first_index=first_index):
        if source is None or computes_nothing(source):
            continue
        written = with_mends(ctx, problem.model_copy(update={"meta": {**problem.meta, "program": source}}))
        written = written.model_copy(
            update={"meta": {**written.meta, "program_written": True, "program_writer": teacher.name}}
        )
        if (run := await run_for(written)).ok:
            runs.append((written, run))
    return runs


async def drawn_programs(
    ctx: Context, teacher: Endpoint, request: ProgramRequest, *, n: int, first_index: int
) -> list[tuple[str | None, str | None]]:
    """n programs drawn from `teacher` for `request` in one batched call (samples first_index ..), each
    (source, None) or (None, why there is none)."""
    if request.spans:  # the figures chosen among the passage's spans, the quote() lines written by the engine
        replies = await ctx.gateway.structured(
            teacher,
            span_program_reply(request.spans),
            role="teacher",
            messages=request.messages,
            n=n,
            first_index=first_index,
        )
        drawn = [span_source(r, request.spans) if r is not None else (None, "reply did not parse") for r in replies]
    else:
        # a plain-text reply with a ```python block: inside a JSON string, the program's own quotes ended it
        samples = await ctx.gateway.generate(
            teacher, role="teacher", messages=request.messages, n=n, first_index=first_index
        )
        drawn = [
            (source, None) if (source := program_in(s.text)) is not None else (None, "reply holds no ```python block")
            for s in samples
        ]
    for _ in drawn:
        ctx.tick(Stage.VERIFY)
    return drawn


async def write_program(ctx: Context, problem: Problem, first_index: int = 0) -> Problem:
    """`problem` with a teacher's program in meta.program (unchanged when it has one). The teachers in
    order, the next asked only while the last one's program does not run (its reply did not parse, a
    sandbox rule, a bad quote, no number): meta.program_writer names the teacher whose program is kept,
    meta.program_attempts says why each earlier one failed; when all fail, the last program is kept (the
    verdict rejects it). A program that runs but gives another answer than the stated one is the verdict's
    business, never a reason to ask the next teacher."""
    if problem.meta.get("program"):
        return problem
    # the first draw asks for plain arithmetic; a redraw (the first missed) offers equations too: offered
    # at once, the 1.5B also reached for them where arithmetic does (docs/programs.md)
    request = program_request(ctx, problem, equations=first_index >= 1)
    if request is None:  # nothing to quote: no request (check_label rejects it)
        return problem.model_copy(update={"meta": {**problem.meta, "program_skipped": NO_FIGURES}})
    written, failed = problem, []
    for teacher in ctx.teachers:
        [(source, why)] = await drawn_programs(ctx, teacher, request, n=1, first_index=first_index)
        if source is None:
            failed.append(f"{teacher.name}: {why}")
            continue
        written = problem.model_copy(
            update={
                "meta": {**problem.meta, "program": source, "program_written": True, "program_writer": teacher.name}
            }
        )
        written = with_mends(ctx, written)
        if (result := await run_for(written)).ok:
            break
        failed.append(f"{teacher.name}: program failed: {result.error}")
    if not failed:
        return written
    return written.model_copy(update={"meta": {**written.meta, "program_attempts": failed}})


class Reexecution(BaseModel):
    """A kept problem's recorded program run again: `agree` (its result is the answer under the domain
    comparer), `mismatch`, `undecided` (the finance comparer cannot tell without the judge), `failed`
    (the program no longer runs) or `no_program`."""

    id: str
    outcome: Literal["agree", "mismatch", "undecided", "failed", "no_program"]
    answer: str
    program_answer: str | None = None
    detail: str = ""


async def reexecute(problem: Problem) -> Reexecution:
    """`problem`'s meta.program run again in the sandbox (its passage, its children's functions) and its
    result compared with the answer by the domain comparer alone (no model call)."""
    if not problem.meta.get("program"):
        return Reexecution(id=problem.id, outcome="no_program", answer=problem.answer)
    result = await run_for(problem)
    if not result.ok:
        return Reexecution(id=problem.id, outcome="failed", answer=problem.answer, detail=result.error or "")
    check = await verify_answer(problem.domain, result.answer, problem.answer, question=problem.question)
    outcome = "agree" if check.correct else "undecided" if check.decided_by == "undecided" else "mismatch"
    return Reexecution(
        id=problem.id, outcome=outcome, answer=problem.answer, program_answer=result.answer, detail=check.reason or ""
    )


async def reexecute_all(problems: list[Problem], concurrency: int = 4) -> list[Reexecution]:
    """`reexecute` over `problems`, at most `concurrency` sandboxes at once, in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: Problem) -> Reexecution:
        async with gate:
            return await reexecute(problem)

    return list(await asyncio.gather(*(one(p) for p in problems)))
