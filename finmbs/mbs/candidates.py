"""Teacher-written candidate problems: the JSON shape teachers reply with, and turning a reply
into a verified tree node (rejection-sampled like a seed, section 3.3)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from pydantic import BaseModel, Field, create_model, field_validator

from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.novelty import STAGE as NOVELTY
from finmbs.mbs.novelty import restated, unworkable
from finmbs.mbs.programs import BINDS_ANSWER, REPLY_SHAPES, bound_program, chosen_figure, program_node, programs_on
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Decision, Problem, Provenance, TreeNode
from finmbs.verify.spans import Span

# A final answer is a number or a short exact value. The bound is part of the JSON schema, so a constrained
# teacher must close the answer (unbounded, a teacher can write its real subproblems inside the answer string).
ANSWER_CHARS = 200


class WorkedProblem(BaseModel):
    """A teacher-written problem with its worked solution and one final answer."""

    question: str = Field(min_length=1)
    solution: str = Field(min_length=1, description="the worked solution, step by step, before the answer")
    answer: str = Field(min_length=1, max_length=ANSWER_CHARS, description="the final answer alone")

    @field_validator("question", "solution", "answer")
    @classmethod
    def _written(cls, value: str) -> str:
        """A field copied from the prompt's reply template ("...", "<the final answer alone>") is no content."""
        if placeholder(value):
            raise ValueError(f"a placeholder, not content: {value.strip()[:40]!r}")
        return value

    @field_validator("answer")
    @classmethod
    def _an_answer(cls, value: str) -> str:
        """An answer made of the reply's own JSON or markdown is no content: a constrained 1.5B teacher
        closed its list inside the answer string (a closing bracket, a code fence, an opening brace), and a
        judge asked whether a trace's 45 matches that said yes; so it must not parse."""
        if serialization(value):
            raise ValueError(f"the reply's serialization, not an answer: {value.strip()[:40]!r}")
        return value


@lru_cache(maxsize=REPLY_SHAPES)
def with_program(reply: type[BaseModel], figures: tuple[str, ...] = ()) -> type[BaseModel]:
    """`reply` with every worked problem in it (itself, or the items of its list fields) carrying
    `program` too (`verify.programs`): the Python that computes its answer, ending `answer = ...`; with
    `figures` (the passage's spans, `verify.quote_spans`), first the document figures it uses, each named
    and chosen among those texts (`bound_program` writes their quote() lines)."""
    if issubclass(reply, WorkedProblem):
        # no max_length: llama.cpp refuses a grammar that repeats a string rule thousands of times (the whole
        # reply then goes unconstrained); the sandbox bounds a program's length (verify/program.py PROGRAM_CHARS)
        program = (
            str,
            Field(
                min_length=1,
                description="Python that computes the answer and ends by binding answer",
                json_schema_extra=BINDS_ANSWER,
            ),
        )
        chosen = (
            # none is allowed: a subproblem may use only figures its question states (plain numbers then)
            {"figures": (list[chosen_figure(figures)], Field(max_length=len(figures)))}  # type: ignore[misc]
            if figures
            else {}
        )
        return create_model(reply.__name__, __base__=reply, __module__=reply.__module__, **chosen, program=program)
    fields = {}
    for name, info in reply.model_fields.items():
        args = getattr(info.annotation, "__args__", ())
        if getattr(info.annotation, "__origin__", None) is list and args and issubclass(args[0], WorkedProblem):
            fields[name] = (list[with_program(args[0], figures)], info)  # type: ignore[valid-type]
    return create_model(reply.__name__, __base__=reply, __module__=reply.__module__, **fields)


def reply_model(ctx: Context, reply: type[BaseModel], spans: list[Span] | None = None) -> type[BaseModel]:
    """The reply shape a teacher is asked for: with programs when `verify.programs` is on, their document
    figures chosen among `spans` when there are any (`programs.figure_spans`)."""
    return with_program(reply, tuple(s.text for s in spans or ())) if programs_on(ctx) else reply


def placeholder(value: object) -> bool:
    """A field copied from a reply template: no word character, or a whole `<...>`."""
    text = str(value).strip()
    return not re.search(r"[^\W_]", text) or (text.startswith("<") and text.endswith(">"))


def serialization(answer: object) -> bool:
    """An answer that is a piece of the reply's serialization: a markdown code fence, or a bracket closed
    before one is opened ('}', ']}'). Answers with brackets are still answers: '[0, 1)', '(2, 3]', a set."""
    text = str(answer)
    if "```" in text:
        return True
    depth = 0
    for char in text:
        depth += (char in "([{") - (char in ")]}")
        if depth < 0:
            return True
    return False


def written_items(items: object) -> object:
    """A list of worked problems without the items copied from the reply template (`{"question": "...",
    "solution": "...", "answer": "..."}` after real ones) or whose answer is the reply's serialization:
    small teachers append the template's item to a list they have filled; the real items are kept, and a
    list of such items alone still fails."""
    if not isinstance(items, list):
        return items

    def copied(item: object) -> bool:
        return (
            isinstance(item, dict)
            and bool(item)
            and (all(placeholder(v) for v in item.values()) or serialization(item.get("answer", "")))
        )

    real = [i for i in items if not copied(i)]
    return real or items


@lru_cache(maxsize=REPLY_SHAPES)
def asking_for(reply: type[BaseModel], items: str, at_least: int, at_most: int | None = None) -> type[BaseModel]:
    """`reply` whose JSON schema asks for `at_least` (up to `at_most`) worked problems in its list field
    `items`, so a constrained teacher writes them all (unconstrained, a teacher asked for two can stop after
    one); parsing still takes any non-empty list, since a placeholder item is dropped after."""
    bounds = {"minItems": at_least, **({"maxItems": at_most} if at_most is not None else {})}
    item = reply.model_fields[items].annotation.__args__[0]  # WorkedProblem, or with its program
    field = (list[item], Field(min_length=1, json_schema_extra=bounds))  # type: ignore[valid-type]
    return create_model(reply.__name__, __base__=reply, __module__=reply.__module__, **{items: field})


def attempt_item(question: str, answer: str, label: str, text: str) -> str:
    """One earlier attempt in a retry prompt's negative context (a subproblem or a variant, what became of it)."""
    return f"- question: {question}\n  answer: {answer}\n  {label}: {text}"


def derive(
    origin: Problem,
    worked: WorkedProblem,
    *,
    id: str,
    stage: str,
    tree_path: str,
    parent_ids: list[str],
    method: str = "mbs",
) -> Problem:
    """A new problem descended from `origin` (same domain, snippet and entity until re-grounded); a
    worked problem's program (`verify.programs`) goes to meta.program, its chosen figures bound."""
    program, why = bound_program(worked, origin.snippet.text if origin.snippet else None)
    return Problem(
        id=id,
        question=worked.question.strip(),
        answer=worked.answer.strip(),
        domain=origin.domain,
        snippet=origin.snippet,
        entity=origin.entity,
        provenance=Provenance(
            seed_id=origin.provenance.seed_id or origin.id,
            method=method,
            stage=stage,
            tree_path=tree_path,
            parent_ids=parent_ids,
        ),
        meta={
            "data_source": f"finmbs/{origin.domain}",
            "teacher_solution": worked.solution,
            **({"program": program} if program else {}),
            **({"program_error": why} if why else {}),
        },
    )


def novel_problems(
    ctx: Context, problems: list[Problem], others: Callable[[Problem], list[tuple[str, Problem]]], ledger: Ledger
) -> list[Problem]:
    """The novelty guard: the problems that restate none of `others(problem)` (its seed, its sources) nor
    an earlier kept one of `problems` (a sibling); each other one is rejected with its reason."""
    if not ctx.config.novelty.enabled:
        return problems
    kept: list[Problem] = []
    for problem in problems:
        if why := restated(problem, [*others(problem), *(("sibling", k) for k in kept)], ctx.config.novelty):
            ledger.reject(problem, NOVELTY, why)
            continue
        kept.append(problem)
    return kept


async def verified_node(
    ctx: Context, problem: Problem, ledger: Ledger, *, stage: str, path: str, mirrors: str | None = None
) -> TreeNode | None:
    """A node for `problem` when a teacher trace verifies its answer; otherwise a recorded rejection
    (also, without a trace, when the question gives its own answer away or the answer is a sentence)."""
    if ctx.config.novelty.unworkable and (bad := unworkable(problem)):
        ledger.reject(problem, stage, bad[1], check=bad[0])
        return None
    if programs_on(ctx):  # finmbs's layer: its program must compute the answer too (finmbs/mbs/programs.py)
        return await program_node(ctx, problem, ledger, stage=stage, path=path, mirrors=mirrors)
    trace, why = await teacher_trace(ctx, problem, relabel=ctx.stages.relabel)
    if trace is None:
        ledger.reject(problem, stage, f"unverified: {why}")
        return None
    reason = f"answer verified by {trace.model}"
    if why:  # relabeled by agreeing traces (stages.relabel)
        problem = problem.model_copy(
            update={
                "answer": trace.answer,
                "meta": {**problem.meta, "relabeled_from": problem.answer, "teacher_solution": trace.text},
            }
        )
        reason = why
    decision = Decision(stage=stage, outcome="accepted", reason=reason)
    return TreeNode(problem=problem, trace=trace, path=path, mirrors=mirrors, decisions=[decision])
