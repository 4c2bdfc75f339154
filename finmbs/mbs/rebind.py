"""Re-grounding by rebinding (`stages.reground_rebind`, finmbs's, not in the paper).

A synthetic tree whose root the finance operators built (meta.finance_op: the operator, the engine's terms
and each quoted figure with its role, context and provision name) is re-grounded on an unseen agreement d'
without a teacher re-writing it:

1. the clause: d''s chunks that the seed passage and the seed's concept find (`reground.document_chunks`,
   then their small-to-big windows), in rank order, the first holding a figure for every quote;
2. the figure: among that clause's own figure spans (`verify.spans.candidate_spans`, as `verify.quote_spans`
   lists them), those in the quote's role (an add-on over the same base, a rate, a day count), scored by the
   words their context shares with the seed figure's; one outside the role's plausible range
   (`finance_operators.RANGES`) is rejected with both values named;
3. the problem: the operator built again over the new figures and the stored terms (`finance_operators.build`),
   its program run on d' (each quote verbatim in d', checked by `quote()` in the sandbox) to the engine's exact
   value; the question names d''s company (the entity is d''s company) and the provision by the seed's name
   when d' uses its words, else by d''s defined term before the figure (template first), checked for its role;
4. the checks: number slots, the mechanical grounding / leakage rules (`Regrounder.leak`), the round trip
   (k teacher programs from the question and d' alone, one computing the answer), and with
   `stages.reground_screen` the weakest-student screen. With `stages.prose_tally` the teacher's prose traces
   are tallied at final calibration if it qualifies, as on every engine-computed problem, and decide nothing.

Every failure (no analogous clause, no figure of the needed kind, a figure out of range, no name, a failed
check) is one counted rejection naming the document (`data.check`: rebind, slots, leakage, round_trip,
screen), never an exception that stops the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from finmbs.ingest import Index
from finmbs.mbs import engine_leaves as engine
from finmbs.mbs import finance_operators as fo
from finmbs.mbs import program_operators as ops
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.finance_leaves import computed
from finmbs.mbs.finance_terms import short_name
from finmbs.mbs.leaves import weakest_screen
from finmbs.mbs.reground import document_chunks, locate, stored_snippet, windows
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Chunk, Decision, Document, Problem, Snippet, SyntheticTree, Trace, TreeNode
from finmbs.verify.spans import candidate_spans

FRESH_META = ("round_trip", "round_trip_answers", "prose_traces", "difficulty")  # measured again on d', not copied
STAGE = Stage.REGROUND
REBIND = "rebind"  # the rejection check of a rebinding that found no clause, figure or name
CLAUSE_CHUNKS = 8  # chunks of d' searched for the analogous clause
_WORD = re.compile(r"[a-z][a-z\-]{3,}")
_STOP = frozenset("with that this such from than then each other shall have been which their there upon under".split())


def on(ctx: Context, tree: SyntheticTree) -> bool:
    """Whether `tree` is re-grounded by rebinding: the switch is on and its root the finance operators built."""
    return bool(ctx.stages.reground_rebind and tree.root.problem.meta.get("finance_op"))


@dataclass(frozen=True)
class Wanted:
    """One quote of the seed problem to fill on d': its variable, role, base, context and provision name."""

    name: str
    text: str
    value: Fraction
    role: str
    base: str | None
    context: str
    provision: str

    @classmethod
    def of(cls, row: dict[str, Any]) -> Wanted:
        return cls(
            row["name"], row["text"], Fraction(row["value"]), row.get("role") or "", row.get("base"),
            row.get("context", ""), row.get("provision", ""),
        )  # fmt: skip


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def choose(passage: str, wanted: Wanted, doc_id: str) -> tuple[fo.QuotedFigure | None, str | None]:
    """(the figure of `passage` that fills `wanted`, None) or (None, why none does, naming the document): the
    spans in its role and base, in its plausible range, best by the words their context shares with the
    seed figure's context and provision name."""
    spans = candidate_spans(passage)
    if not spans:
        return None, f"{doc_id}: the clause states no figure that parses as a number"
    in_role = [
        f
        for f in (fo.span_figure(passage, s, wanted.name) for s in spans)
        if f.role == wanted.role and (wanted.role != fo.ADD_ON or f.base == wanted.base)
    ]
    if not in_role:
        return None, f"{doc_id}: no figure of the needed kind ({fo.role_words(wanted.role)}) in the clause"
    seed_words = words(wanted.context) | words(wanted.provision)
    scored = sorted(in_role, key=lambda f: (-len(words(f.context) & seed_words), f.start))
    best = scored[0]
    low, high = fo.RANGES.get(wanted.role, (Fraction(0), Fraction(10**12)))
    if not low < best.value <= high and not (wanted.role == fo.DAY_COUNT and best.value == low):
        return None, (
            f"{doc_id}: rebinding {wanted.name} would put {best.text!r} = {float(best.value):g} outside its plausible "
            f"range {float(low):g}..{float(high):g} (the seed's {wanted.text!r} = {float(wanted.value):g})"
        )
    if not words(best.context) & seed_words:
        return None, f"{doc_id}: no figure whose clause shares a word with the seed's ({wanted.text!r})"
    return best, None


NAMED_FIT = 5  # a clause whose own name for the figure shares a word with the seed's provision name


def fit(passage: str, figure: fo.QuotedFigure, wanted: Wanted) -> int:
    """How well a figure of a candidate clause fits the seed's: the words its context shares with the seed
    figure's context and provision name, and NAMED_FIT more when the clause's own name for it (its defined
    term or heading) shares a word with the seed's provision name ("Post-Default Rate", "Default Rate")."""
    seed_words = words(wanted.context) | words(wanted.provision)
    own = fo.engine_name(passage, figure) or ""
    named = bool(words(own) & (words(wanted.provision) - {"rate", "provision"}))
    return len(words(figure.context) & seed_words) + (NAMED_FIT if named else 0)


def provision(passage: str, wanted: Wanted, figure: fo.QuotedFigure) -> tuple[str | None, str]:
    """(the provision's name on d', why none): d''s own defined term or heading before the figure ("the
    Post-Default Rate"), else the seed's name when d' uses its words; each checked for its role."""
    own = fo.engine_name(passage, figure)
    if own and not (why := fo.role_error(own, figure.role or "", figure.base)):
        return own, ""
    seed = wanted.provision
    key = re.sub(r"^the\s+", "", seed, flags=re.I).lower()
    if seed and key in " ".join(passage.split()).lower():
        if not (why := fo.role_error(seed, figure.role or "", figure.base)):
            return seed, ""
        return None, why
    return None, (why if own else "the clause defines no term before the figure")


def clause_chunks(index: Index, doc: Document, seed: Problem, concept: str | None) -> list[Chunk]:
    """d''s candidate clauses: the chunks the seed passage and concept find (rank order), then their windows."""
    seed_text = seed.snippet.text if seed.snippet else seed.question
    chunks = document_chunks(index, doc.doc_id, seed_text, CLAUSE_CHUNKS, concept)
    return chunks + [w for w in windows(index, chunks) if w.chunk_id not in {c.chunk_id for c in chunks}]


def clause(
    index: Index, doc: Document, seed: Problem, concept: str | None, wanted: list[Wanted]
) -> tuple[Snippet | None, list[fo.QuotedFigure], list[str]]:
    """(d', the figures filling `wanted` in it, []) for the candidate clause that fills every quote and fits
    the seed's best (`fit`; on a tie the better ranked), or (None, [], the reasons each clause failed)."""
    reasons: list[str] = []
    text = index.document_text(doc.doc_id)
    fits: list[tuple[int, int, Chunk, list[fo.QuotedFigure]]] = []
    for rank, chunk in enumerate(clause_chunks(index, doc, seed, concept)):
        found, why = [], None
        for w in wanted:
            figure, why = choose(chunk.text, w, doc.doc_id)
            if figure is None:
                break
            found.append(figure)
        if why:
            reasons.append(why)
            continue
        fits.append((-sum(fit(chunk.text, f, w) for f, w in zip(found, wanted)), rank, chunk, found))
    for _, _, chunk, found in sorted(fits, key=lambda f: (f[0], f[1])):  # the best fit first, then rank
        if (
            chunk.char_start is not None
            and chunk.char_end is not None
            and text[chunk.char_start : chunk.char_end] == chunk.text
        ):
            start = with_term(text, chunk.char_start, min(f.start for f in found))
            snippet = stored_snippet(doc, text, start, chunk.char_end, chunk)
            shift = chunk.char_start - start  # the figures' places in d', which may start before the chunk
            found = [replace(f, start=f.start + shift) for f in found]
        else:
            snippet = locate(index, doc, chunk.text)
        if snippet is not None:
            return snippet, found, []
        reasons.append(f"{doc.doc_id}: the clause is not the stored document's text")
    return None, [], reasons or [f"{doc.doc_id}: no clause found"]


TERM_LOOKBACK = 120  # characters before a clause searched for the term it defines


def with_term(text: str, start: int, figure_at: int) -> int:
    """Where d' starts: the clause's start, or, when the clause names no defined term before its figure and
    the document's text just before it ends with one ("“ Post-Default Rate ”" on the line above its
    definition), that term's start, so the question's name for the provision is in d'."""
    if fo.TERM.search(text[start : start + figure_at]):
        return start
    before = text[max(0, start - TERM_LOOKBACK) : start]
    found = list(fo.TERM.finditer(before))
    if found and not before[found[-1].end() :].strip(" \n\t:,."):
        return max(0, start - TERM_LOOKBACK) + found[-1].start()
    return start


def most_told(reasons: list[str]) -> str:
    """The reason to record: a range violation first (both values named), else the most frequent one."""
    ranged = [r for r in reasons if "plausible range" in r]
    return ranged[0] if ranged else max(set(reasons), key=reasons.count)


async def rebound(
    ctx: Context,
    index: Index,
    seed: Problem,
    tree: SyntheticTree,
    doc: Document,
    slot: int,
    concept: str | None,
    regrounder: Any,
    ledger: Ledger,
) -> SyntheticTree | None:
    """`tree`'s root rebound onto `doc` (module docstring); None with the counted reason on `ledger`."""
    root = tree.root.problem
    spec = root.meta["finance_op"]
    rows = spec.get("figures") or []
    wanted = [Wanted.of(r) for r in rows if r.get("role") in (fo.ADD_ON, fo.RATE)]
    attempt = root.model_copy(
        update={"id": f"{root.id}.b{slot}", "meta": {**root.meta, "document": doc.doc_id, "regrounded_from": root.id}}
    )

    def reject(reason: str, check: str = REBIND) -> None:
        ledger.reject(attempt, STAGE, reason, check=check, document=doc.doc_id, operator=spec.get("operator"))

    if not wanted or not spec.get("terms"):
        reject(f"{doc.doc_id}: the tree's root has no rate to rebind")
        return None
    snippet, figures, reasons = clause(index, doc, seed, concept, wanted)
    if snippet is None:
        reject(f"no analogous clause: {most_told(reasons)}")
        return None
    names = []
    for w, figure in zip(wanted, figures):
        name, why = provision(snippet.text, w, figure)
        if name is None:
            reject(f"{doc.doc_id}: no name for the provision of {figure.text!r}: {why}")
            return None
        names.append(name)
    terms = fo.terms_of(spec, fo.day_count(snippet.text))
    built = fo.build(spec["operator"], figures, terms)
    if isinstance(built, ops.Refusal):
        reject(f"{doc.doc_id}: {built.reason}")
        return None
    if why := await computed(built, snippet.text):
        reject(f"{doc.doc_id}: {why}")
        return None
    built.names = names
    company = doc.company or ""
    question = built.question(short_name(company) or doc.title or doc.doc_id)
    problem = attempt.model_copy(
        update={
            "id": f"{root.id}.g{slot}t{tree.index}",
            "question": question,
            "answer": built.answer or "",
            "snippet": snippet,
            "entity": company or None,
            "provenance": root.provenance.model_copy(update={"stage": STAGE, "parent_ids": [root.id]}),
            "meta": {
                **{k: v for k, v in root.meta.items() if k not in FRESH_META},
                "program": built.program(),
                "program_answer": built.answer,
                "finance_op": built.spec(),
                "document": doc.doc_id,
                "regrounded_from": root.id,
                "regrounded_by": REBIND,
                "teacher_solution": fo.worked(built),  # the engine's steps: what the leakage rules read
                "rebound": {w.text: f.text for w, f in zip(wanted, figures)},
            },
        }
    )
    attempt = problem

    if why := engine.slots(question, fo.as_built(built, question)):
        reject(f"{doc.doc_id}: {why}", Check.SLOTS)
        return None
    grounding = regrounder.grounding_for(doc, snippet, company)
    if why := regrounder.leak(problem, grounding):
        reject(why, "leakage")
        return None
    hits, k = await engine.round_trip(ctx, problem)
    problem.meta["round_trip"] = f"{hits} of {k}"
    if hits == 0:
        reject(
            f"{doc.doc_id}: wording not solvable: none of {k} teacher programs gives {problem.answer}", Check.ROUND_TRIP
        )
        return None
    pairs = ", ".join(f"{w.text!r} -> {f.text!r}" for w, f in zip(wanted, figures))
    reason = (
        f"grounded on {doc.doc_id} by rebinding {pairs}; "
        f"computed by the engine's program on d'; round trip {hits} of {k}"
    )
    trace = Trace(text=f"```python\n{built.program()}\n```", answer=problem.answer, model=engine.ENGINE, verified=True)
    node = TreeNode(
        problem=problem,
        path=tree.root.path,
        mirrors=tree.root.mirrors,
        trace=trace,
        decisions=[Decision(stage=STAGE, outcome="accepted", reason=reason)],
    )
    alpha = {"leaf": ctx.stages.alpha_leaf, "compose": ctx.stages.alpha_parent}.get(root.provenance.stage)
    if ctx.stages.reground_screen and alpha is not None:
        if not await weakest_screen(ctx, node, alpha, STAGE, ledger, check=Check.SCREEN, document=doc.doc_id):
            return None
    return SyntheticTree(seed_id=tree.seed_id, index=tree.index, root=node, grounding=snippet, entity=company or None)
