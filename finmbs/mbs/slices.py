"""Decomposition from the program (`stages.decompose_from_program`, finmbs's, not in the paper).

A node's verified program already holds a decomposition: its intermediate results. The program is cut
by data flow (Python `ast`, top-level statements): for each intermediate variable the final `answer`
depends on, its backward slice is the statements it needs (the inputs and the steps before it), in
program order, ending `answer = <variable>`. A slice is offered only when it computes something (a
given such as `price = 9` or `rate = quote(...)`, or a copy `x = y`, is no step), when it is not the
whole computation (what is left after it only copies or rounds the variable: `answer = round(total)`),
and, once run in the sandbox, when its value is not the parent's answer. Each offered slice becomes one
child: the teacher only states it as a self-contained problem whose answer is the slice's value
(prompts/decompose_slice.txt), and the child's verified answer must be that value.

A node with no program, a program that does not compute its answer, or no usable slice is decomposed
from prose (prompts/decompose.txt), with the reason recorded on its decision (`data.prose_fallback`).
"""

from __future__ import annotations

import ast
import asyncio
import re
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, Field

from finmbs.config import Endpoint
from finmbs.mbs.candidates import WorkedProblem, reply_model, with_program
from finmbs.mbs.context import Context
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.programs import figure_spans, program_prompt, programs_on, run_for, same
from finmbs.mbs.solve import document_block
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Problem
from finmbs.resources import render_prompt
from finmbs.verify.skeleton import SIMPLE, Flow, assigned, loaded, stored

STAGE = Stage.DECOMPOSE
CHECK = Check.SLICE  # the rejection check of a child whose answer is not its slice's value
ANSWER = "answer"
# calls that only convert or round a value: `answer = round(total, 2)` computes no new step
FORMATTING = frozenset({"int", "float", "round", "abs", "floor", "ceil", "trunc", "Fraction", "Decimal"})


class Slice(BaseModel):
    """One intermediate variable of a program with its backward slice: `source` (the statements it needs,
    ending `answer = name`), `at` (the index of the top-level statement defining it), and, once run,
    `value` (what the slice gives, as text)."""

    name: str
    source: str
    at: int
    value: str | None = None


def _called(node: ast.AST) -> set[str]:
    """The names used as the function of a call (`quote(...)`, `round(...)`, `child_1()`) or as the module
    of one (`math` in `math.ceil(...)`)."""
    names = set()
    for n in ast.walk(node):
        func = n.func if isinstance(n, ast.Call) else None
        if isinstance(func, ast.Attribute):
            func = func.value
        if isinstance(func, ast.Name):
            names.add(func.id)
    return names


def _value(stmt: ast.stmt) -> ast.expr | None:
    return stmt.value if isinstance(stmt, SIMPLE) else None


def _single_target(stmt: ast.stmt) -> str | None:
    """The one name a simple assignment binds (`x = ...`, `x: float = ...`, `x += ...`), else None."""
    names = assigned(stmt)
    return names[0] if len(names) == 1 and len(getattr(stmt, "targets", names)) == 1 else None


OPERATIONS = (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Subscript)


def _is_input(stmt: ast.stmt) -> bool:
    """A statement that states a given rather than computing a step: a value with no operation over no
    variable (`price = 9`, `rate = quote("2.0%", 0.02)`, `x = child_1()`), an import. `half = 46 / 2`
    computes (a step the teacher worked out by hand, `width = (46 / 2 - 5) / 2`, is one)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    value = _value(stmt)
    if value is None or isinstance(stmt, ast.AugAssign):
        return False
    return not (loaded(value) - _called(value)) and not any(isinstance(n, OPERATIONS) for n in ast.walk(value))


def _is_copy(stmt: ast.stmt) -> bool:
    """A statement that only copies, converts or rounds one variable (`answer = total`, `n = int(x)`,
    `answer = round(cost, 2)`, `answer = math.ceil(bags)`): no step of its own."""
    value = _value(stmt)
    if value is None or isinstance(stmt, ast.AugAssign):
        return False
    while isinstance(value, ast.Call):
        if _call_name(value) not in FORMATTING or not value.args:
            return False
        if any(not isinstance(a, ast.Constant) for a in value.args[1:]):
            return False
        value = value.args[0]
    return isinstance(value, ast.Name)


def _works(stmt: ast.stmt) -> bool:
    """A statement that computes a step: neither a given nor a copy."""
    return not _is_input(stmt) and not _is_copy(stmt)


def program_slices(source: str) -> list[Slice]:
    """The slices of `source` a decomposition may offer (before they are run), nearest the final answer
    first (the final step's own operands, then the steps before them), in program order among equals;
    empty when the program does not parse, binds no answer at the top level, or has no intermediate step
    (`answer = 8 - 3`)."""
    try:
        body = ast.parse(source).body
    except (SyntaxError, ValueError):
        return []
    final = [i for i, s in enumerate(body) if ANSWER in stored(s)]
    if not final:
        return []
    flow = Flow(body)
    last = final[-1]
    whole = {j for j in flow.closure(last) if _works(body[j])}
    slices = []
    for j, _ in sorted(flow.distances(last).items(), key=lambda item: (item[1], item[0])):
        name = _single_target(body[j])
        if j == last or name is None or not _works(body[j]):
            continue
        needed = flow.closure(j)
        if {k for k in needed if _works(body[k])} == whole:
            continue  # the whole computation: what follows it only copies or rounds it
        lines = [ast.unparse(body[k]) for k in sorted(needed)]
        if unknowns := _solved_unknowns(body, needed, j):
            # `solution = solve(...)` gives a dict: each unknown it solves is a step of its own
            slices.extend(
                Slice(name=f"{name}[{u}]", source="\n".join([*lines, f"{ANSWER} = {name}[{u}]"]), at=j)
                for u in unknowns
            )
            continue
        if name != ANSWER:
            lines.append(f"{ANSWER} = {name}")
        slices.append(Slice(name=name, source="\n".join(lines), at=j))
    return slices


SOLVERS = frozenset({"solve"})  # the sandbox's linear equations (finmbs.verify.algebra)
SYMBOL_MAKERS = frozenset({"symbols", "Symbol"})


def _call_name(value: ast.expr | None) -> str:
    """The function a call calls by name (`solve(...)`, `sympy.solve(...)`), else ''."""
    if not isinstance(value, ast.Call):
        return ""
    func = value.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _solved_unknowns(body: list[ast.stmt], needed: set[int], j: int) -> list[str]:
    """The variables holding symbols (bound by `symbols(...)` among the statements `needed`) when statement
    `j` is `name = solve(...)`, in binding order; [] otherwise."""
    if _call_name(_value(body[j])) not in SOLVERS:
        return []
    found: list[str] = []
    for k in sorted(needed):
        if isinstance(body[k], ast.Assign) and _call_name(body[k].value) in SYMBOL_MAKERS:
            for target in body[k].targets:
                elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                found.extend(e.id for e in elements if isinstance(e, ast.Name) and e.id not in found)
    return found


def parent_over_children(source: str, slices: list[Slice]) -> str:
    """`source` with the statement defining each slice's variable replaced by a call of its child's
    function (`name = child_k()`, k counting from 1 in `slices`' order): the parent's program over its
    children, the rest of it as written. An unknown a `solve` gave (`solution[x]`) is set from its child
    right after that statement, which stays (it gives the other unknowns)."""
    body = ast.parse(source).body
    lines = []
    for i, statement in enumerate(body):
        mine = [(k, s) for k, s in enumerate(slices, 1) if s.at == i]
        set_after = [f"{s.name} = child_{k}()" for k, s in mine if "[" in s.name]
        replaced = [f"{s.name} = child_{k}()" for k, s in mine if "[" not in s.name]
        lines.extend(replaced or [ast.unparse(statement)])
        lines.extend(set_after)
    return "\n".join(lines)


async def node_program(ctx: Context, problem: Problem) -> tuple[Problem, str | None]:
    """(`problem` with a program that computes its answer in meta.program, None), or (`problem`, why there
    is none): its own program (a verified child's), else one the teachers write for it without seeing the
    answer (`labels.program_to_answer`)."""
    written, why = await program_to_answer(ctx, problem)
    return (problem, why) if why else (written, None)


async def usable_slices(ctx: Context, problem: Problem) -> tuple[list[Slice], str | None]:
    """The slices of `problem`'s program (meta.program) a decomposition offers, each run in the sandbox
    with its value, at most `stages.K`: one that fails to run, gives the parent's answer, or gives the
    value of a slice before it is left out. ([], why) when none is left."""
    found = program_slices(problem.meta.get("program") or "")
    if not found:
        return [], "its program has no intermediate step to slice"
    results = await asyncio.gather(*(run_for(problem, s.source) for s in found))
    kept: list[Slice] = []
    dropped: list[str] = []
    for candidate, result in zip(found, results):
        if len(kept) >= ctx.stages.K:
            break
        if not result.ok:
            dropped.append(f"{candidate.name}: {result.error}")
        elif await same(ctx, problem, result.answer or "", problem.answer):
            dropped.append(f"{candidate.name} is the answer ({result.answer})")
        elif any([await same(ctx, problem, result.answer or "", k.value or "") for k in kept]):
            dropped.append(f"{candidate.name} repeats a value ({result.answer})")
        else:
            kept.append(candidate.model_copy(update={"value": result.answer}))
    if not kept:
        return [], "no slice of its program is usable: " + "; ".join(dropped)
    return kept, None


ASK_CHARS = 300  # a final question sentence is far shorter; the bound closes a constrained reply


class SliceAsk(BaseModel):
    """The teacher's reply with `stages.slice_asks`: the one question sentence that asks for a slice's quantity."""

    ask: str = Field(min_length=8, max_length=ASK_CHARS, description="one question sentence, ending with ?")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9$(\"'])")


_ASKS = re.compile(r"(?:Compute|Find|Calculate|Determine|Work out|What|How|Which)\b")


def ask_split(question: str) -> tuple[str, str, str] | None:
    """(the question's context, its final ask, what follows the ask), or None when it has no ask after at
    least one sentence of context. The ask is the last sentence ending with a question mark, or else the
    last one that asks ("Compute ...", "Find ..."); a sentence after it (a unit, a format) is kept."""
    sentences = _SENTENCE_END.split(question.strip())
    at = next((i for i in range(len(sentences) - 1, -1, -1) if sentences[i].rstrip().endswith("?")), None)
    if at is None:
        at = next((i for i in range(len(sentences) - 1, -1, -1) if _ASKS.match(sentences[i])), None)
    if not at:  # no ask, or nothing before it
        return None
    return " ".join(sentences[:at]), sentences[at], " ".join(sentences[at + 1 :])


_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> set[Fraction]:
    """The numbers `text` writes, each digit run alone ("1/4" is 1 and 4, as a program writes them; not
    `novelty.math_numbers`, which reads it as one fraction)."""
    return {Fraction(m.group().replace(",", "")) for m in _NUMBER.finditer(text)}


def _literals(source: str) -> set[Fraction]:
    """The numbers a program writes, with each one's percentage reading (20 for 0.2 and 0.2 for 20)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            value = Fraction(str(node.value))
            found |= {value, value * 100, value / 100}
    return found


def slice_context(context: str, source: str) -> str:
    """The sentences of `context` a slice needs: each one that states a number the slice's program uses,
    and each one that states no number; a sentence whose numbers the slice never uses is left out (a
    small teacher, shown them, solves the whole problem instead of the slice)."""
    used = _literals(source)
    sentences = _SENTENCE_END.split(context.strip())
    return " ".join(s for s in sentences if not (found := _numbers(s)) or found & used)


async def slice_ask(
    ctx: Context, teacher: Endpoint, problem: Problem, piece: Slice, attempt: int, split: tuple[str, str, str]
) -> WorkedProblem | None:
    """`stages.slice_asks`: the slice's subproblem as the node's context and a new final question sentence
    the teacher writes for the slice's quantity; its program is the slice itself, its answer the slice's
    value. None when the reply does not parse, is no sentence, is the node's own ask again, or states the
    value it asks for."""
    context, final, after = split
    context = slice_context(context, piece.source)
    text = render_prompt(
        "decompose_slice_ask",
        document=document_block(problem),
        context=context,
        final=final,
        step=piece.source,
        variable=piece.name,
        value=piece.value,
    )
    [reply] = await ctx.gateway.structured(  # attempt a is sample a, as a prose proposal's
        teacher, SliceAsk, role="teacher", messages=[{"role": "user", "content": text}], first_index=attempt
    )
    ctx.tick(STAGE)
    ask = re.sub(r"([?.])[?.]+$", r"\1", " ".join(reply.ask.split())) if reply is not None else ""  # "pay??"
    if not ask.endswith(("?", ".")) or ask.casefold() == " ".join(final.split()).casefold():
        return None  # no sentence, or the node's own ask (one that means it in other words: its trace disagrees)
    if _numbers(piece.value or "") & (_numbers(ask) - _numbers(context)):
        return None  # it states its own answer ("... packs for the needs of 78 students?", 78 packs)
    return with_program(WorkedProblem).model_validate(
        {
            "question": " ".join(part for part in (context, ask, after) if part),
            "solution": f"The step computes {piece.name}:\n{piece.source}",
            "answer": piece.value,
            "program": piece.source,
        }
    )


async def slice_problem(
    ctx: Context, teacher: Endpoint, problem: Problem, piece: Slice, attempt: int
) -> WorkedProblem | None:
    """`teacher`'s statement of `piece` as a self-contained problem whose answer is its value (with its
    program, `verify.programs`); None when the reply does not parse. With `stages.slice_asks`, the node's
    question with only its final question sentence written anew (`slice_ask`)."""
    if ctx.stages.slice_asks and (split := ask_split(problem.question)):
        return await slice_ask(ctx, teacher, problem, piece, attempt, split)
    text = render_prompt(
        "decompose_slice",
        document=document_block(problem),
        question=problem.question,
        step=piece.source,
        variable=piece.name,
        value=piece.value,
    )
    spans = figure_spans(ctx, problem)
    [parsed] = await ctx.gateway.structured(  # attempt a is sample a, as a prose proposal's
        teacher,
        reply_model(ctx, WorkedProblem, spans),
        role="teacher",
        messages=[{"role": "user", "content": program_prompt(ctx, text, problem.domain, spans=spans)}],
        first_index=attempt,
    )
    ctx.tick(STAGE)
    return parsed


async def off_slice(ctx: Context, child: Problem, piece: Slice) -> str | None:
    """Why `child`'s answer is not its slice's value, or None."""
    if await same(ctx, child, child.answer, piece.value or ""):
        return None
    return f"its answer {child.answer!r} is not its slice's value {piece.value} ({piece.name})"


def from_program(ctx: Context) -> bool:
    return ctx.stages.decompose_from_program and programs_on(ctx)


def slice_data(slices: list[Slice]) -> list[dict[str, Any]]:
    """What an attempt's decision records of the slices it offered."""
    return [s.model_dump() for s in slices]
