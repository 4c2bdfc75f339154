"""Stage 2 (section 3.3): top-down decomposition with verified children and the effectivity test.

At each node the students are evaluated weakest -> strongest until one scores > 0; S_n is the
students evaluated with zero accuracy (weakest up to the strongest with zero accuracy, the
"evaluated student"). A node the weakest student already solves needs no scaffold and stays a leaf;
at the root this is its own outcome, a seed too easy for the student pool (`too_easy`), kept as a leaf
with `stages.easy_seeds: leaf` (finmbs's), decomposed like any other with S_n = {the weakest student}
with `decompose` (the paper, which decomposes every verified seed). The teacher
proposes K easier subproblems; with `stages.answer_leaks` (finmbs's; the paper has no such check) a
subproblem that reveals its parent's answer (its answer is the parent's, its question or worked solution
states it) is rejected with its reason and form, the others are rejection-sampled. Every S in S_n is
re-sampled N times on the node with the verified children as worked examples; effective when
conditioning raises accuracy for at least one S in S_n. Otherwise the teacher is re-prompted with the
failed attempts as negative context, up to Nd retries; a node
whose decomposition stays ineffective is dropped. Recurse on each child up to depth D; a node whose
children are all dropped there is dropped too (it would otherwise stand as a leaf the weakest student
fails, and at the root its harder variants would count as the seed's MBS descendants).

With `stages.decompose_from_program` (finmbs's, with `verify.programs`) the subproblems come from the
node's program rather than from prose: one per slice of it (finmbs/mbs/slices.py), each stated by the
teacher as a problem whose answer is the slice's value; a child whose answer is not that value is
rejected (check `slice`), and the parent's program over its children is its own program with each
slice replaced by its child's function. A node with no program or no usable slice is decomposed from
prose, each attempt's decision saying why (`data.prose_fallback`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from pydantic import BaseModel, ConfigDict, Field, field_validator

from finmbs.config import Endpoint
from finmbs.llm.structured import written_in_order
from finmbs.mbs.candidates import (
    WorkedProblem,
    asking_for,
    attempt_item,
    derive,
    reply_model,
    verified_node,
    written_items,
)
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.novelty import revealing
from finmbs.mbs.programs import CHECK as PROGRAM_CHECK
from finmbs.mbs.programs import (
    WrittenProgram,
    child_functions,
    composed_parent,
    figure_spans,
    listed_children,
    program_prompt,
    programs_on,
    render_program_finance,
)
from finmbs.mbs.slices import CHECK as SLICE_CHECK
from finmbs.mbs.slices import (
    Slice,
    from_program,
    node_program,
    off_slice,
    parent_over_children,
    slice_data,
    slice_problem,
    usable_slices,
)
from finmbs.mbs.solve import document_block, student_accuracy
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Decision, Problem, TreeNode
from finmbs.resources import render_prompt

STAGE = Stage.DECOMPOSE
ANSWER_LEAK = Check.ANSWER_LEAK  # the rejection check of a subproblem revealing its parent's answer


class Decomposition(BaseModel):
    """The teacher's reply: the parent's key skills (identified first) and K easier subproblems."""

    model_config = ConfigDict(json_schema_extra=written_in_order)

    skills: list[str] = Field(default_factory=list)
    subproblems: list[WorkedProblem] = Field(min_length=1)

    _written = field_validator("subproblems", mode="before")(written_items)


async def evaluated_students(ctx: Context, node: TreeNode) -> list[Endpoint]:
    """S_n: evaluating weakest -> strongest, the students with zero accuracy up to the first that
    scores (its last member is the evaluated student); empty when the weakest solves the node."""
    evaluated = []
    for student in reversed(ctx.students):
        acc = await student_accuracy(ctx, student, node.problem)
        node.student_accuracy[student.name] = acc
        if acc > 0:
            break
        evaluated.append(student)
    return evaluated


Failed = tuple[list[tuple[WorkedProblem, str]], str]  # (subproblems with what became of each, why the attempt failed)


def failed_context(failed: list[Failed]) -> str:
    """Earlier ineffective decompositions, as negative context for a re-prompt: each subproblem with
    what became of it (revealed the parent's answer, unverified, verified), and why the attempt failed."""
    if not failed:
        return ""
    blocks = [
        render_prompt(
            "failed_decomposition",
            subproblems="\n".join(attempt_item(w.question, w.answer, "outcome", outcome) for w, outcome in subs)
            or "- (no usable reply)",
            reason=reason,
        )
        for subs, reason in failed
    ]
    return "\n".join([render_prompt("decompose_failed_intro"), *blocks])


def outcomes(
    node: TreeNode, attempt: int, proposal: Decomposition | None, children: list[TreeNode], ledger: Ledger
) -> list[tuple[WorkedProblem, str]]:
    """Each subproblem of the proposal that was considered, with what became of it (from the seed's ledger)."""
    why = {r.problem.id: r.reason for r in ledger.rejected if r.stage == STAGE}
    verified = {c.problem.id for c in children}
    result = []
    for k, worked in enumerate(proposal.subproblems if proposal else []):
        if (i := child_id(node, attempt, k)) in why or i in verified:
            result.append((worked, f"rejected: {why[i]}" if i in why else "verified"))
    return result


def fewest_children(k: int) -> int:
    """Appendix E asks for "two or three" subproblems: the schema asks for at least two (K permitting);
    the first K that do not reveal the parent's answer are taken (`without_leaks`)."""
    return min(2, k)


def attempt_teacher(ctx: Context, attempt: int) -> Endpoint:
    """The teacher of decomposition attempt `attempt` (rotating with `stages.rotate_teachers`)."""
    return ctx.teachers[attempt % len(ctx.teachers)] if ctx.stages.rotate_teachers else ctx.teachers[0]


async def propose(ctx: Context, node: TreeNode, attempt: int, failed: list) -> Decomposition | None:
    teacher = attempt_teacher(ctx, attempt)
    text = ctx.prompt(
        "decompose",
        K=ctx.stages.K,
        document=document_block(node.problem),
        question=node.problem.question,
        solution=node.trace.text if node.trace else "",
        answer=node.problem.answer,
        failed=failed_context(failed),
    )
    spans = figure_spans(ctx, node.problem)
    [parsed] = await ctx.gateway.structured(  # attempt a is sample a: a retry never replays an earlier sample
        teacher,
        asking_for(reply_model(ctx, Decomposition, spans), "subproblems", fewest_children(ctx.stages.K)),
        role="teacher",
        messages=[{"role": "user", "content": program_prompt(ctx, text, node.problem.domain, spans=spans)}],
        first_index=attempt,
    )
    ctx.tick(STAGE)
    return parsed


async def propose_slices(
    ctx: Context, node: TreeNode, slices: list[Slice], attempt: int
) -> tuple[Decomposition | None, list[Slice]]:
    """`stages.decompose_from_program`: one subproblem per slice of the node's program, each stated by the
    attempt's teacher, with the slices they state in the same order (a slice whose reply did not parse
    is left out); (None, []) when no reply parsed."""
    teacher = attempt_teacher(ctx, attempt)
    replies = await asyncio.gather(*(slice_problem(ctx, teacher, node.problem, s, attempt) for s in slices))
    stated = [(reply, piece) for reply, piece in zip(replies, slices) if reply is not None]
    if not stated:
        return None, []
    return Decomposition(subproblems=[r for r, _ in stated]), [piece for _, piece in stated]


async def on_slice(ctx: Context, children: list[Problem], slices: dict[str, Slice], ledger: Ledger) -> list[Problem]:
    """The children whose answer is their slice's value (`slices`: child id -> its slice); each other one
    is rejected, saying which value it missed (check `slice`)."""
    kept = []
    for child in children:
        if child.id in slices and (why := await off_slice(ctx, child, slices[child.id])):
            ledger.reject(child, STAGE, why, check=SLICE_CHECK)
            continue
        kept.append(child)
    return kept


def without_leaks(
    node: TreeNode,
    candidates: list[Problem],
    ledger: Ledger,
    forms: Collection[str],
    limit: int | None = None,
    shown: dict[str, str] | None = None,
) -> list[Problem]:
    """The subproblems that do not reveal the parent's answer in one of `forms` (`stages.answer_leaks`,
    finmbs's: the paper has no such check), the first `limit` of them; the others looked at are rejected,
    each with its form (`data.form`, counted per form in metrics.json). `shown`: per child id, the worked
    solution students will read beside it (its verified trace)."""
    kept: list[Problem] = []
    for child in candidates:
        if limit is not None and len(kept) >= limit:
            break
        if found := revealing(child, node.problem, forms, shown=(shown or {}).get(child.id, "")):
            form, why = found
            ledger.reject(child, STAGE, why, check=ANSWER_LEAK, form=form)
            continue
        kept.append(child)
    return kept


def child_id(node: TreeNode, attempt: int, k: int) -> str:
    return f"{node.problem.id}.d{attempt}c{k}"


def sliced_ids(node: TreeNode, attempt: int, slices: list[Slice]) -> dict[str, Slice]:
    """Child id -> the slice its subproblem states (subproblem k states slice k)."""
    return {child_id(node, attempt, k): piece for k, piece in enumerate(slices)}


async def verified_children(
    ctx: Context,
    node: TreeNode,
    proposal: Decomposition,
    attempt: int,
    ledger: Ledger,
    slices: list[Slice] | None = None,
):
    """The proposal's subproblems that do not reveal the parent's answer and are verified, at most K. From
    the program (`slices`, one per subproblem), a child's answer must also be its slice's value: its stated
    answer before any trace, its verified answer after."""
    candidates = [
        derive(
            node.problem,
            worked,
            id=child_id(node, attempt, k),
            stage=STAGE,
            tree_path=f"{node.path}.{k}",
            parent_ids=[node.problem.id],
        )
        for k, worked in enumerate(proposal.subproblems)
    ]
    # K children, leaks skipped. With relabel a stated answer is no label yet (small teachers state wrong
    # ones): before any trace only the question is checked, and every child's answer once it is verified
    of_slice = sliced_ids(node, attempt, slices or [])
    candidates = await on_slice(ctx, candidates, of_slice, ledger)
    forms = ctx.stages.answer_leaks
    stated = [f for f in forms if f != "answer"] if ctx.stages.relabel else forms
    candidates = without_leaks(node, candidates, ledger, stated, limit=ctx.stages.K)
    nodes = await asyncio.gather(
        *(verified_node(ctx, c, ledger, stage=STAGE, path=c.provenance.tree_path) for c in candidates)
    )
    verified = [n for n in nodes if n is not None]
    on = {p.id for p in await on_slice(ctx, [n.problem for n in verified], of_slice, ledger)}  # relabeled ones
    verified = [n for n in verified if n.problem.id in on]
    # before any student sees them: the children, and the traces shown with them as worked examples
    traces = {n.problem.id: n.trace.text for n in verified if n.trace}
    kept = {p.id for p in without_leaks(node, [n.problem for n in verified], ledger, forms, shown=traces)}
    return [n for n in verified if n.problem.id in kept]


async def parent_program(
    ctx: Context, node: TreeNode, children: list[TreeNode], attempt: int
) -> tuple[Problem, str | None]:
    """`verify.programs` (finmbs's): the teacher writes the parent's program over its verified children's
    programs (child_1(), child_2() ..., shown with their answers; not the parent's answer), run in the
    sandbox with theirs. (the parent with the program recorded, None) when it computes the parent's
    verified answer; otherwise (the parent, why not): the attempt is rejected."""
    functions = child_functions(children)
    text = render_prompt(
        "program_parent",
        children=listed_children(children, functions),
        finance=render_program_finance(node.problem.domain),
        document=document_block(node.problem),
        question=node.problem.question,
    )
    [reply] = await ctx.gateway.structured(  # attempt a is sample a, as the proposal's
        attempt_teacher(ctx, attempt),
        WrittenProgram,
        role="teacher",
        messages=[{"role": "user", "content": text}],
        first_index=attempt,
    )
    ctx.tick(STAGE)
    if reply is None:
        return node.problem, "parent program: the teacher's reply did not parse"
    return await composed_parent(ctx, node.problem, reply.program, functions)


async def sliced_parent(
    ctx: Context, parent: Problem, children: list[TreeNode], slices: dict[str, Slice]
) -> tuple[Problem, str | None]:
    """From the program: the parent's program (meta.program) with each verified child's slice replaced by a
    call of its function, run with the children's programs (no teacher call); as `parent_program`, (the
    parent with it recorded, None) when it computes the parent's answer, else (the parent, why not)."""
    source = parent_over_children(parent.meta["program"], [slices[c.problem.id] for c in children])
    return await composed_parent(ctx, parent, source, child_functions(children))


async def program_plan(ctx: Context, node: TreeNode) -> tuple[Problem, list[Slice], str | None]:
    """`stages.decompose_from_program`: (the node's problem with its program, the slices to offer, None), or
    (its problem, [], why it is decomposed from prose); switched off, (its problem, [], None)."""
    if not from_program(ctx):
        return node.problem, [], None
    problem, why = await node_program(ctx, node.problem)
    slices: list[Slice] = []
    if why is None:
        slices, why = await usable_slices(ctx, problem)
    return (problem, slices, None) if why is None else (node.problem, [], why)


def parent_program_data(parent: Problem) -> dict:
    """What a decomposition attempt records of its parent program (its source, what it gave or why it failed)."""
    meta = parent.meta
    return {
        "parent_program": meta.get("program"),
        "parent_program_answer": meta.get("program_answer"),
        **({"parent_program_error": meta["program_error"]} if meta.get("program_error") else {}),
    }


def solved_leaf(ctx: Context, node: TreeNode, depth: int) -> Decision:
    """The decision for a node the weakest student already solves; at the root, a seed too easy."""
    weakest = ctx.weakest.name
    acc = f"accuracy {node.student_accuracy[weakest]:.3f}"
    if depth == 0:
        return Decision(
            stage=STAGE,
            outcome="info",
            data={"too_easy": True},
            reason=f"seed too easy: weakest student {weakest} already solves it ({acc}); kept as a leaf",
        )
    return Decision(stage=STAGE, outcome="info", reason=f"leaf: weakest student {weakest} already solves it ({acc})")


def easy_seed(ctx: Context, node: TreeNode) -> Decision:
    """`stages.easy_seeds: decompose` (the paper): the decision for a seed the weakest student already
    solves, decomposed like any other with S_n = {the weakest student}, the one student evaluated."""
    weakest = ctx.weakest.name
    return Decision(
        stage=STAGE,
        outcome="info",
        data={"too_easy": True},
        reason=f"seed too easy: weakest student {weakest} already solves it (accuracy "
        f"{node.student_accuracy[weakest]:.3f}); decomposed like any other, S_n = [{weakest}]",
    )


async def effectivity(
    ctx: Context, node: TreeNode, students: list[Endpoint], children: list[TreeNode]
) -> dict[str, float]:
    """acc_cond(S, p | children) for every S in S_n (N samples each)."""
    examples = [(c.problem, c.trace.text) for c in children if c.trace]
    accs = await asyncio.gather(*(student_accuracy(ctx, s, node.problem, examples=examples) for s in students))
    cond = {s.name: acc for s, acc in zip(students, accs)}
    node.conditioned_accuracy.update(cond)
    return cond


def effect(base: dict[str, float], cond: dict[str, float]) -> str:
    return ", ".join(f"{name} {base[name]:.3f} -> {acc:.3f}" for name, acc in cond.items())


async def decompose(ctx: Context, node: TreeNode, ledger: Ledger, depth: int = 0) -> bool:
    """Grow `node`'s decomposition subtree in place; False when the node is dropped."""
    if depth >= ctx.stages.D:
        node.decisions.append(Decision(stage=STAGE, outcome="info", reason=f"leaf: depth limit D={ctx.stages.D}"))
        return True
    students = await evaluated_students(ctx, node)
    if not students and (depth > 0 or ctx.stages.easy_seeds == "leaf"):
        node.decisions.append(solved_leaf(ctx, node, depth))
        return True
    if not students:  # the paper decomposes every verified seed: S_n is the one student evaluated, the weakest
        node.decisions.append(easy_seed(ctx, node))
        students = [ctx.weakest]
    base = {s.name: node.student_accuracy[s.name] for s in students}
    programmed, slices, fallback = await program_plan(ctx, node)
    failed: list[Failed] = []
    for attempt in range(ctx.stages.Nd + 1):
        data = {
            "attempt": attempt,
            "student": students[-1].name,
            "students": list(base),
            "unconditioned": base[students[-1].name],
        }
        if slices:  # finmbs's: one subproblem per slice of the node's program
            proposal, offered = await propose_slices(ctx, node, slices, attempt)
            data.update(from_program=True, slices=slice_data(offered))
        else:
            proposal, offered = await propose(ctx, node, attempt, failed), []
            data.update({"prose_fallback": fallback} if fallback else {})
        children = await verified_children(ctx, node, proposal, attempt, ledger, offered) if proposal else []
        parent, why = node.problem, None
        if children and offered:  # the parent's program over its children, from the program's own text
            parent, why = await sliced_parent(ctx, programmed, children, sliced_ids(node, attempt, offered))
            data.update(parent_program_data(parent))
        elif children and programs_on(ctx):  # finmbs's: the children compose to the parent's answer
            parent, why = await parent_program(ctx, node, children, attempt)
            data.update(parent_program_data(parent))
        if proposal is None:
            reason = "teacher reply did not parse as a decomposition"
        elif not children:
            reason = "no subproblem verified"
        elif why:
            reason = why
            data["check"] = PROGRAM_CHECK
            for child in children:
                ledger.reject(child.problem, STAGE, reason, check=PROGRAM_CHECK)
        else:
            cond = await effectivity(ctx, node, students, children)
            data.update(
                conditioned=cond[students[-1].name],
                conditioned_by_student=cond,
                children=[c.problem.id for c in children],
                skills=proposal.skills,
            )
            if any(cond[name] > base[name] for name in cond):
                reason = f"effective: {effect(base, cond)} with {len(children)} children"
                node.decisions.append(Decision(stage=STAGE, outcome="accepted", reason=reason, data=data))
                node.problem, node.children = parent, children
                break
            reason = f"ineffective: {effect(base, cond)} when conditioned"
            for child in children:
                ledger.reject(child.problem, Stage.EFFECTIVITY, reason)
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=reason, data=data))
        failed.append((outcomes(node, attempt, proposal, children, ledger), reason))
    else:
        reason = f"no effective decomposition after {ctx.stages.Nd} retries"
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=reason))
        return False
    kept = await asyncio.gather(*(decompose(ctx, child, ledger, depth + 1) for child in node.children))
    for child, keep in zip(node.children, kept):
        if not keep:
            ledger.reject(child.problem, STAGE, child.decisions[-1].reason, node=child.model_dump(mode="json"))
    node.children = [child for child, keep in zip(node.children, kept) if keep]
    if not node.children:  # its decomposition is gone: no scaffold, and no leaf (the weakest student fails it)
        reason = "dropped: every child of its effective decomposition was dropped"
        node.decisions.append(Decision(stage=STAGE, outcome="rejected", reason=reason))
        return False
    return True
