"""Auditing labels with programs (`finmbs verify FILE`): any problem file, each problem's stated answer
checked by the same rule as a synthetic candidate (finmbs/mbs/programs.py with `verify.programs`,
the teacher-trace rule alone without). A problem that carries no program (meta.program) gets one
from the teachers, written without seeing the stated answer: the first teacher, then the next while a
program fails to run (up to every configured teacher); each failed attempt is recorded. With
`verify.quote_spans`, a finance program takes the passage's figures by choosing among its candidate spans
(finmbs/verify/spans.py), and a passage with none gets no request: the problem is rejected as skipped."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, Field

from finmbs.mbs.candidates import verified_node
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.programs import CHECK, passage, programs_on, quote_spans_on, run_for, same, write_program
from finmbs.mbs.stages import Progress, Stage
from finmbs.records import Problem
from finmbs.verify.finance import compare, figures
from finmbs.verify.program import computes_nothing, refusal
from finmbs.verify.spans import candidate_spans

STAGE = Stage.VERIFY
Outcome = Literal["verified", "relabeled", "rejected", "refused"]  # refused: a row that cannot be run


class LabelCheck(BaseModel):
    """One problem's verdict: verified, relabeled (answer is the new label) or rejected, and why."""

    id: str
    outcome: Outcome
    reason: str
    check: str | None = None  # a rejection's check: "program" for the program layer's
    stated: str
    answer: str | None = None
    program: str | None = None
    program_written: bool = False
    program_writer: str | None = None  # the teacher whose written program was kept
    program_attempts: list[str] = Field(default_factory=list)  # each written program that failed, and why
    program_skipped: str | None = None  # why no program was requested (a finance passage with no figure)
    program_answer: str | None = None
    program_error: str | None = None
    quotes: list[dict[str, Any]] = Field(default_factory=list)
    problem: Problem


def lookup_program(ctx: Context, problem: Problem) -> Problem | None:
    """`verify.lookup_programs`: for a finance problem whose answer is one figure its passage states (one
    candidate span of the same kind and value, written once in the passage: "2%" and "two percent (2%)"),
    the problem with the engine's program `answer = quote('two percent (2%)', 0.02)`, recorded as written
    by the engine (meta.program_writer); else None. A lookup's program is the quote itself, and the 1.5B
    often cannot write even that ("answer = 0.02 + 0.005 = 0.025")."""
    if not (ctx.config.verify.lookup_programs and quote_spans_on(ctx, problem)):
        return None
    stated = figures(problem.answer)
    text = passage(problem)
    if len(stated) != 1 or not text:
        return None
    kind = stated[0].kind
    found = [
        s
        for s in candidate_spans(text)
        if (s.kind == kind or {s.kind, kind} <= {"number", "count"})
        and compare(str(s.literal), problem.answer).verdict == "equal"
        and text.count(s.text) == 1
    ]
    if len(found) != 1:
        return None
    meta = {**problem.meta, "program": f"answer = quote({found[0].text!r}, {found[0].literal})"}
    return problem.model_copy(update={"meta": meta | {"program_written": True, "program_writer": "engine (lookup)"}})


async def program_to_answer(ctx: Context, problem: Problem) -> tuple[Problem, str | None]:
    """(`problem` with a program that runs to its answer, None), or (`problem` with the last program
    tried, why none does). Its own program (a verified child's) is the only one tried; a problem without
    one gets the teachers' (`write_program`, written without seeing the answer), drawn again up to
    `verify.program_samples` times while it fails to run or gives another answer, then the engine's lookup
    program where the answer is a figure of the passage (`lookup_program`). For a node whose answer
    is verified already, where the program serves its structure (slices, the source skeleton): a search
    for a program, not a check of the answer."""
    own = bool(problem.meta.get("program"))
    written, why = problem, "none was written"
    tries: list[Problem | None] = [problem] if own else [None] * ctx.config.verify.program_samples
    if not own and (lookup := lookup_program(ctx, problem)):
        tries.append(lookup)  # after the teachers' draws: the engine's own, for a figure the passage states
    for attempt, given in enumerate(tries):
        written = given or await write_program(ctx, problem, first_index=attempt)
        source = written.meta.get("program") or ""
        if not source:
            why = "no program: " + (
                written.meta.get("program_skipped")
                or "; ".join(written.meta.get("program_attempts") or [])
                or "none was written"
            )
        elif computes_nothing(source):
            why = "its program computes nothing"
        elif not (result := await run_for(written)).ok:
            why = f"its program failed: {result.error}"
        elif not await same(ctx, written, result.answer or "", problem.answer):
            why = f"its program gives {result.answer}, the answer is {problem.answer!r}"
        else:
            return written, None
    return written, why


async def check_label(ctx: Context, problem: Problem) -> LabelCheck:
    """The verdict on one problem's stated answer; "refused", with its reason, for a row whose program cannot
    be run at all (`finmbs.verify.program.refusal`: not text, too long or too deep, a bad function name)."""
    if programs_on(ctx):
        if why := refusal(problem.meta.get("program"), problem.meta.get("program_functions")):
            reason = f"refused: {why}"
            return LabelCheck(id=problem.id, outcome="refused", reason=reason, stated=problem.answer, problem=problem)
        problem = await write_program(ctx, problem)
    ledger = Ledger(problem.id)
    if skipped := problem.meta.get("program_skipped"):
        ledger.reject(problem, STAGE, f"skipped: {skipped}", check=CHECK)
        node = None
    else:
        node = await verified_node(ctx, problem, ledger, stage=STAGE, path="0")
    final = node.problem if node else ledger.rejected[-1].problem
    meta = final.meta
    check = ledger.rejected[-1].data.get("check") if node is None else None
    if node is None:
        outcome, reason, answer = "rejected", ledger.rejected[-1].reason, None
    else:
        relabeled = "relabeled_from" in meta
        outcome, reason, answer = ("relabeled" if relabeled else "verified"), node.decisions[-1].reason, final.answer
    return LabelCheck(
        id=problem.id,
        outcome=outcome,
        reason=reason,
        check=check,
        stated=problem.answer,
        answer=answer,
        program=meta.get("program"),
        program_written=bool(meta.get("program_written")),
        program_writer=meta.get("program_writer"),
        program_attempts=meta.get("program_attempts") or [],
        program_skipped=meta.get("program_skipped"),
        program_answer=meta.get("program_answer"),
        program_error=meta.get("program_error"),
        quotes=meta.get("quotes") or [],
        problem=final,
    )


async def check_labels(ctx: Context, problems: list[Problem], concurrency: int) -> list[LabelCheck]:
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: Problem) -> LabelCheck:
        async with gate:
            result = await check_label(ctx, problem)
        ctx.tick(Progress.PROBLEMS)
        return result

    return list(await asyncio.gather(*(one(p) for p in problems)))
