"""Stage 5 (section 3.4 "Grounding on new documents", appendices D and E): re-grounding synthetic
trees of a finance seed on unseen documents.

Retrieve the top Kd documents most like the seed's document summary, never the seed's own document
(by doc id, source path or content hash); from each the teacher copies an analogous passage d' and
names an analogous entity e'. A passage not found verbatim (whitespace aside) in the stored document
text is rejected; with `stages.extract: select` the teacher chooses d' among numbered excerpts instead,
so d' is the document's own text by construction (and costs a few tokens, not a copy); with
`stages.extract: retrieve` d' is the most relevant excerpt and e' the document's company, no teacher asked. Each
synthetic tree is then re-grounded on d' with every node threaded around e'
(one teacher call per tree), shown with the seed entity already named e' and each seed term that has an
analogue in d' already given d's name (`leakage.rename`; a reply that writes the seed's name again is
renamed too, recorded in meta.renamed); every new node passes the mechanical grounding / leakage check
(`leakage.py`) and then the judge, who confirms it is answerable from d' alone. Then it is verified
like every other node: a teacher trace by rejection sampling over the teacher pool against its new
answer (stage 1), and the weakest-student screen its stage requires (alpha_leaf for a leaf variant,
alpha_parent for a composed parent). Nodes that fail are rejected with their reason (`data.check`:
extract, verbatim, reply, leakage, judge, verify, screen); the survivors form new SyntheticTrees
(`grounding`, `entity` set) that go on to final calibration.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from finmbs.ingest import Index, find_verbatim, outermost, shared_index
from finmbs.ingest.concepts import named_concept
from finmbs.ingest.store import RRF_K
from finmbs.llm.structured import written_in_order
from finmbs.mbs.candidates import WorkedProblem, reply_model
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.leakage import Grounding, analogue, entity_name, entity_renames, holds, quoted_terms, rename, term_words
from finmbs.mbs.leaves import weakest_screen
from finmbs.mbs.novelty import unworkable
from finmbs.mbs.programs import (
    PROGRAM_META,
    bound_program,
    figure_spans,
    program_node,
    program_prompt,
    programs_on,
    quoted,
    recorded,
    run_for,
    with_mends,
)
from finmbs.mbs.stages import Check, Stage
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Chunk, Decision, Document, Problem, Provenance, Snippet, SyntheticTree, TreeNode, shown_path
from finmbs.resources import render_prompt, resource_dir
from finmbs.verify.judge import delimited

STAGE = Stage.REGROUND
EXCERPT_CHUNKS = 6


class Extraction(BaseModel):
    """The teacher's reply to step 1 (`stages.extract: copy`): e' and d' copied from the new document."""

    entity: str = ""
    passage: str = ""


class Selection(BaseModel):
    """The teacher's reply to step 1 (`stages.extract: select`): e' and the numbers of the excerpts that hold d'."""

    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    entity: str = ""
    excerpts: list[int] = Field(default_factory=list)


def path_first(schema: dict) -> None:
    """`json_schema_extra` of GroundedNode: a constrained teacher names the node it re-grounds before writing it."""
    properties = schema.get("properties", {})
    schema["properties"] = {"path": properties["path"], **{k: v for k, v in properties.items() if k != "path"}}
    schema["required"] = list(schema["properties"])


class GroundedNode(WorkedProblem):
    model_config = ConfigDict(json_schema_extra=path_first)

    path: str


class GroundedTree(BaseModel):
    """The teacher's reply to step 2: every node of the tree, re-grounded."""

    nodes: list[GroundedNode] = Field(min_length=1)


class ProvisionName(BaseModel):
    """The teacher's name for the provision a seed asks about (`stages.reground_concept`, no concepts.yaml entry)."""

    provision: str = ""


class Answerability(BaseModel):
    """The judge's verdict on one re-grounded problem."""

    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    answerable: bool
    supported: bool = True


@dataclass
class NewGround:
    """An accepted re-grounding target: slot k (retrieval rank), its document, d' and e'."""

    slot: int
    document: Document
    snippet: Snippet
    entity: str
    truncated: str | None = None  # reground_document: whole: how the document shown was cut, if it was


# 1. the seed's own document and the unseen ones ----------------------------------------------
def _file_sha(source_path: str | None) -> str | None:
    """Content hash of the seed's source file when it can be found (as given, or in the checkout)."""
    if not source_path:
        return None
    for path in (Path(source_path), resource_dir("corpora").parent / source_path):
        if path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def seed_documents(index: Index, seed: Problem) -> list[Document]:
    """Every indexed copy of the seed's document: the same doc id, or the same content (file hash)."""
    snippet = seed.snippet
    if snippet is None:
        return []
    everything = index.documents()
    hashes = {d.sha256 for d in everything if d.doc_id == snippet.doc_id}
    if sha := _file_sha(snippet.source_path):
        hashes.add(sha)
    return [d for d in everything if d.doc_id == snippet.doc_id or d.sha256 in hashes]


def retrieval_text(seed: Problem, own: list[Document]) -> str:
    """The seed document's summary, or (document not indexed) the seed entity and snippet."""
    if own and own[0].summary:
        return own[0].summary
    snippet = seed.snippet
    return "\n".join(
        p for p in (seed.entity, snippet.section_path if snippet else "", snippet.text if snippet else "") if p
    )


def unseen_documents(
    index: Index, seed: Problem, k: int, excluded: Iterable[str] = ()
) -> tuple[list[Document], list[Document]]:
    """(the top-k unseen documents by summary similarity, the seed's own documents). Unseen: neither the
    seed's own document nor one in `excluded` (another seed's, one held out: `excluded_documents`)."""
    own = seed_documents(index, seed)
    skip = list(dict.fromkeys([d.doc_id for d in own] + list(excluded)))
    found = index.similar_documents(retrieval_text(seed, own), k, exclude_doc_ids=skip)
    return [doc for doc, _ in found], own


def _key(text: str | None) -> str:
    return re.sub(r"[^a-z0-9]", "", (text or "").lower())


def held_out(doc: Document, entry: str) -> bool:
    """Whether a holdout entry names `doc`: its doc id, file name (with or without extension), company
    (legal form aside) or CIK (leading zeros aside)."""
    key = _key(entry)
    if not key:
        return False
    name = Path(doc.source_path).name
    if key in {_key(doc.doc_id), _key(name), _key(Path(name).stem)}:
        return True
    if key.isdigit() and doc.cik and key.lstrip("0") == doc.cik.lstrip("0"):
        return True
    company = _key(entity_name(doc.company)) if doc.company else ""
    return bool(company) and _key(entity_name(entry)) == company


@dataclass
class Exclusions:
    """The documents no seed of a run is re-grounded on, each with why, and the holdout entries that
    named no indexed document."""

    excluded: dict[str, str]
    unmatched: list[str]

    def as_json(self, index_docs: dict[str, Document], holdout: list[str]) -> dict:
        rows = [
            {
                "doc_id": d,
                "why": why,
                "title": index_docs[d].title if d in index_docs else "",
                "company": index_docs[d].company if d in index_docs else None,
                "cik": index_docs[d].cik if d in index_docs else None,
            }
            for d, why in self.excluded.items()
        ]
        return {"holdout": holdout, "excluded": rows, "holdout_unmatched": self.unmatched}


def excluded_documents(index: Index, seeds: list[Problem], holdout: list[str]) -> Exclusions:
    """Every indexed document a seed of the run came from, and every one a holdout entry names."""
    excluded: dict[str, str] = {}
    for seed in seeds:
        for doc in seed_documents(index, seed):
            excluded.setdefault(doc.doc_id, f"document of seed {seed.id}")
    everything = index.documents() if holdout else []
    unmatched = []
    for entry in holdout:
        hits = [d for d in everything if held_out(d, entry)]
        for doc in hits:
            excluded.setdefault(doc.doc_id, f"held out ({entry})")
        if not hits:
            unmatched.append(entry)
    return Exclusions(excluded, unmatched)


# 2. d' and e' from one new document -----------------------------------------------------------
def _names(words: tuple[str, ...], terms: list[tuple[str, ...]]) -> int | None:
    """0 when `words` are one of the terms, 1 when one holds the other (two words or more, in order:
    "Post-Default Rate" and "Default Rate"), else None."""
    ranks = [rank for term in terms if (rank := analogue(words, term)) is not None and rank <= 1]
    return int(min(ranks)) if ranks else None


def term_chunks(chunks: list[Chunk], seed_text: str, most: int) -> list[Chunk]:
    """The chunks that name a term the seed passage defines or quotes, best first: its definition, the
    definition of a term holding it or held by it ("Post-Default Rate" for "Default Rate"), then a
    provision headed by it ("Section 10.5 Default Rate of Interest", "(c) Default Rate."); at most `most`."""
    terms = [w for w in {term_words(t) for t in quoted_terms(seed_text)} if w]
    found = []
    for chunk in chunks if terms else []:
        if chunk.kind == "definition" and chunk.term and (rank := _names(term_words(chunk.term), terms)) is not None:
            found.append((rank, len(chunk.term), chunk))
            continue
        head = term_words(" ".join([chunk.section_path.rsplit(" > ", 1)[-1], chunk.text[:80]]))
        if chunk.kind == "text" and any(holds(head, term) for term in terms):
            found.append((2, 0, chunk))
    return [c for *_, c in sorted(found, key=lambda f: (f[0], f[1], f[2].char_start or 0))][:most]


CONCEPT_WORDS = 12  # a concept query: the provision's kind, not a passage


async def seed_concept(ctx: Context, seed: Problem) -> str | None:
    """What to search an unseen document for (`stages.reground_concept`): the concept the seed's question
    or passage names in `concepts.yaml`, else the teacher's name for the provision (one call per seed,
    temperature 0, cached by the gateway), cut to CONCEPT_WORDS words; None when switched off or unnamed."""
    if not ctx.stages.reground_concept or seed.snippet is None:
        return None
    if found := named_concept(seed.question, seed.snippet.text):
        return found
    text = render_prompt("reground_concept", question=seed.question, passage=seed.snippet.text)
    [reply] = await ctx.gateway.structured(
        ctx.teachers[0],
        ProvisionName,
        role="teacher",
        messages=[{"role": "user", "content": text}],
        temperature=0.0,
        max_tokens=64,
    )
    ctx.tick(STAGE)
    words = (reply.provision if reply else "").strip().strip("\"'.").split()
    return " ".join(words[:CONCEPT_WORDS]) or None


def fused(*rankings: list[Chunk]) -> list[Chunk]:
    """Reciprocal-rank fusion of chunk rankings (the index's constant): a chunk several rankings find comes
    first; on a tie the earlier ranking's chunk does."""
    score: dict[str, float] = {}
    found: dict[str, Chunk] = {}
    for ranking in rankings:
        for rank, chunk in enumerate(ranking, 1):
            score[chunk.chunk_id] = score.get(chunk.chunk_id, 0.0) + 1.0 / (RRF_K + rank)
            found.setdefault(chunk.chunk_id, chunk)
    return sorted(found.values(), key=lambda c: -score[c.chunk_id])


def document_chunks(index: Index, doc_id: str, seed_text: str, k: int, concept: str | None = None) -> list[Chunk]:
    """What the teacher reads of a new document, most relevant first: the chunks that name a term of the
    seed passage (`term_chunks`, at most k // 2), then the chunks nearest to the seed passage by hybrid
    search, k in all (the passage itself is the query: no concept expansion, which would steer it to
    financial statements).

    With a `concept` (`seed_concept`) the document is also searched for it, and the chunks after the
    term chunks are both searches fused by reciprocal rank (the concept's first on a tie): every chunk the
    passage alone would show stays, and up to k // 2 that only the concept finds join them."""
    defined = term_chunks(index.chunks(doc_id), seed_text, k // 2)
    nearest = [hit.chunk for hit in index.search(seed_text, k, doc_id=doc_id, concepts=False)]
    chunks = {c.chunk_id: c for c in defined + nearest}
    today = list(chunks.values())[:k]
    if not concept:
        return today
    named = [hit.chunk for hit in index.search(concept, k, doc_id=doc_id, concepts=False)]
    shown = {c.chunk_id for c in today}
    shown.update([c.chunk_id for c in named if c.chunk_id not in shown][: k // 2])
    first = [c.chunk_id for c in defined]
    return defined + [c for c in fused(named, nearest) if c.chunk_id in shown and c.chunk_id not in first]


def windows(index: Index, chunks: list[Chunk]) -> list[Chunk]:
    """`stages.reground_document: windows`: each excerpt widened to its small-to-big window (`Index.context`,
    `index.context_tokens` within `index.context_scope`), in the excerpts' order; a window that lies inside
    one already shown is left out (two excerpts of one table are one window). Windows are the stored
    document's exact text with offsets, so d' chosen among them is verbatim by construction."""
    budget, scope = index.settings.context_tokens, index.settings.context_scope
    return outermost(index.context(chunk, budget, scope) for chunk in chunks) if budget else chunks


def excerpt(chunks: list[Chunk]) -> str:
    return "\n...\n".join(f"[{c.section_path}]\n{c.text}" if c.section_path else c.text for c in chunks)


def locate(index: Index, doc: Document, passage: str) -> Snippet | None:
    """d' as a Snippet of the stored document (exact text, offsets, section and page), or None."""
    text = index.document_text(doc.doc_id)
    span = find_verbatim(passage, text)
    if span is None:
        return None
    start, end = span
    home = next(
        (
            c
            for c in index.chunks(doc.doc_id)
            if c.char_start is not None and c.char_end is not None and c.char_start <= start < c.char_end
        ),
        None,
    )
    return stored_snippet(doc, text, start, end, home)


def stored_snippet(doc: Document, text: str, start: int, end: int, home: Chunk | None) -> Snippet:
    """d' = text[start:end] of the stored document, with the section and page of the chunk it starts in."""
    return Snippet(
        text=text[start:end],
        doc_id=doc.doc_id,
        source_path=shown_path(doc.source_path),
        char_start=start,
        char_end=end,
        section_path=home.section_path if home else "",
        page=home.page if home else None,
    )


def _candidate(
    seed: Problem, method: str, slot: int, doc: Document | None, passage: str = "", entity: str = ""
) -> Problem:
    """The re-grounding attempt itself (seed, document rank), as a record for rejected.jsonl."""
    snippet = Snippet(text=passage, doc_id=doc.doc_id, source_path=shown_path(doc.source_path)) if doc else None
    return Problem(
        id=f"{seed.id}.g{slot}",
        question=seed.question,
        answer=seed.answer,
        domain=seed.domain,
        snippet=snippet,
        entity=entity or None,
        provenance=Provenance(seed_id=seed.id, method=method, stage=STAGE),
    )


def numbered(chunks: list[Chunk]) -> str:
    """The excerpts as the select prompt shows them: numbered from 1, most relevant first."""
    return "\n".join(f'<excerpt n="{i}">\n{excerpt([c])}\n</excerpt>' for i, c in enumerate(chunks, 1))


def selected(index: Index, doc: Document, chunks: list[Chunk], numbers: list[int]) -> Snippet | None:
    """d' from the chosen excerpts: the most relevant one chosen, run on over chosen excerpts next to it
    in the document with nothing but whitespace between (exact text and offsets of the stored document);
    None when no valid excerpt was chosen."""
    chosen = sorted({n for n in numbers if 1 <= n <= len(chunks)})
    if not chosen:
        return None
    anchor = chunks[chosen[0] - 1]
    run = sorted((chunks[n - 1] for n in chosen), key=lambda c: c.char_start or 0)
    if any(c.char_start is None or c.char_end is None for c in run):
        return locate(index, doc, anchor.text)
    text = index.document_text(doc.doc_id)
    start, end, at = anchor.char_start, anchor.char_end, run.index(anchor)
    for chunk in reversed(run[:at]):
        if text[chunk.char_end : start].strip():  # not next to the run: ends it
            break
        start = min(start, chunk.char_start)
    for chunk in run[at + 1 :]:
        if text[end : chunk.char_start].strip():
            break
        end = max(end, chunk.char_end)
    return stored_snippet(doc, text, start, end, next(c for c in run if c.char_start == start))


CHARS_PER_TOKEN = 4  # reground_document: whole: the context budget's characters per token (an estimate)


def whole_document(ctx: Context, index: Index, doc: Document) -> tuple[str, str | None]:
    """`stages.reground_document: whole` (appendix E gives the teacher the new document): its text, cut to
    `reground_document_tokens`; (text, how it was cut, or None when it fits)."""
    text = index.document_text(doc.doc_id)
    limit = ctx.stages.reground_document_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text, None
    return text[:limit], f"{doc.doc_id}: first {limit:,} of {len(text):,} characters shown (reground_document_tokens)"


async def ask_ground(
    ctx: Context, seed: Problem, slot: int, doc: Document, chunks: list[Chunk], whole: str | None = None
) -> Selection | Extraction | None:
    """The teacher's reply naming e' and d' in `doc` (`stages.extract`: a copy or a choice of excerpts);
    `whole`: the document to copy from instead of its excerpts."""
    snippet = seed.snippet or Snippet(text="")
    teacher = ctx.teachers[slot % len(ctx.teachers)] if ctx.stages.rotate_teachers else ctx.teachers[0]
    select = ctx.stages.extract == "select"
    text = render_prompt(
        "reground_select" if select else "reground_extract",
        seed_entity=seed.entity or "",
        seed_passage=snippet.text,
        doc_id=doc.doc_id,
        title=doc.title,
        document=numbered(chunks) if select else whole if whole is not None else excerpt(chunks),
    )
    [reply] = await ctx.gateway.structured(
        teacher, Selection if select else Extraction, role="teacher", messages=[{"role": "user", "content": text}]
    )
    ctx.tick(STAGE)
    return reply


async def new_ground(
    ctx: Context,
    index: Index,
    seed: Problem,
    method: str,
    slot: int,
    doc: Document,
    ledger: Ledger,
    concept: str | None = None,
) -> NewGround | None:
    """Ask the teacher for d' and e' in `doc` (copied, then proven verbatim; or chosen among the
    excerpts, verbatim by construction), or record the rejection. `concept`: the seed's, searched for too."""
    snippet = seed.snippet or Snippet(text="")
    chunks = document_chunks(index, doc.doc_id, snippet.text or seed.question, EXCERPT_CHUNKS, concept)
    copy_whole = ctx.stages.extract == "copy" and ctx.stages.reground_document == "whole"  # no excerpt shown
    if ctx.stages.reground_document != "excerpts" and not copy_whole:  # whole tables and clauses (d' one)
        chunks = windows(index, chunks)
    truncated = None
    if ctx.stages.extract == "retrieve":  # no teacher call: the most relevant excerpt, the document's company
        reply = Selection(reason="retrieved", entity=doc.company or doc.title or "", excerpts=[1] if chunks else [])
    else:
        whole = None
        if copy_whole:
            whole, truncated = whole_document(ctx, index, doc)
        reply = await ask_ground(ctx, seed, slot, doc, chunks, whole)
    named = reply.entity.strip() if reply else ""
    # a teacher may name the seed's own borrower as a new document's entity: e' is then the document's company
    seed_name = (entity_name(seed.entity) or "").lower()
    seed_named = bool(seed_name) and (entity_name(named) or "").lower() == seed_name
    if not ctx.stages.rename:  # the paper: e' is the teacher's; a seed name then fails the leakage check
        seed_named = False
    entity = (doc.company or "") if seed_named else named
    if isinstance(reply, Selection):
        located = selected(index, doc, chunks, reply.excerpts)
        passage = located.text if located else ""
    else:
        passage = reply.passage.strip() if reply else ""
        located = locate(index, doc, passage) if passage else None
    candidate = _candidate(seed, method, slot, doc, passage, entity)
    if reply is None:
        ledger.reject(
            candidate, STAGE, f"extraction reply did not parse for {doc.doc_id}", check="extract", document=doc.doc_id
        )
        return None
    if seed_named and not entity:
        ledger.reject(
            candidate,
            STAGE,
            f"the seed's entity {named!r} named as the entity of {doc.doc_id}",
            check="extract",
            document=doc.doc_id,
        )
        return None
    if not passage or not entity:
        ledger.reject(
            candidate,
            STAGE,
            f"no analogous passage or entity named in {doc.doc_id}",
            check="extract",
            document=doc.doc_id,
        )
        return None
    if located is None:
        ledger.reject(candidate, STAGE, f"passage not verbatim in {doc.doc_id}", check="verbatim", document=doc.doc_id)
        return None
    return NewGround(slot, doc, located, entity, truncated)


async def answerability(ctx: Context, problem: Problem) -> Answerability:
    """The judge's verdict: is `problem` answerable from its passage alone, and is its answer supported
    (also `finmbs seeds mine`'s check of a mined question)."""
    text = render_prompt(
        "judge_answerable",
        **delimited(
            passage=problem.snippet.text if problem.snippet else "", question=problem.question, answer=problem.answer
        ),
    )
    [verdict] = await ctx.gateway.structured(
        ctx.config.roles.judge,
        Answerability,
        role="judge",
        messages=[{"role": "user", "content": text}],
        temperature=0.0,
        last=True,
    )
    return verdict or Answerability(answerable=False, supported=False, reason="judge reply unparseable after repair")


# 3. the tree on d' and e' ---------------------------------------------------------------------
def node_texts(node: TreeNode) -> tuple[str, str, str]:
    """(question, worked solution, answer) of a synthetic node, as the re-grounding prompt shows them."""
    solution = node.problem.meta.get("teacher_solution") or (node.trace.text if node.trace else "")
    return node.problem.question, solution, node.problem.answer


def tree_block(tree: SyntheticTree, renames: dict[str, str] | None = None) -> str:
    """The tree as the teacher reads it, the seed's terms that have an analogue in d' already renamed."""

    def parent_of(path: str) -> str:
        return path.rsplit(".", 1)[0] if "." in path and path != tree.root.path else ""

    blocks = []
    for n in tree.root.walk():
        question, solution, answer = (rename(t, renames or {}) for t in node_texts(n))
        blocks.append(
            render_prompt(
                "reground_node",
                path=n.path,
                parent=parent_of(n.path),
                question=question,
                solution=solution,
                answer=answer,
            )
        )
    return "\n".join(blocks)


VOCABULARY_TERMS = 20  # at most this many new-passage terms, and seed-only facts, in the prompt


def tree_renames(
    tree: SyntheticTree, grounding: Grounding, seed_entity: str | None = None, entity: str | None = None
) -> dict[str, str]:
    """What the tree's questions, solutions and answers name that d' and e' name their own way: the seed
    entity (as e') and the seed terms with an analogue in d'."""
    texts = [t for n in tree.root.walk() for t in node_texts(n)]
    named = {
        old: new
        for old, new in entity_renames(seed_entity, entity).items()
        if any(rename(t, {old: new}) != t for t in texts)
    }
    return {**named, **grounding.renames(texts)}


def vocabulary(tree: SyntheticTree, grounding: Grounding, renames: dict[str, str] | None = None) -> str:
    """The `{{vocabulary}}` slot: the new passage's own defined terms, the seed terms renamed to them, and
    the seed-only facts the tree's questions and answers still use (what the leakage check would reject),
    named before the teacher writes (told only afterwards, a teacher can write the seed's terms again)."""
    renames = renames or {}
    carried = dict.fromkeys(
        f
        for n in tree.root.walk()
        for text in (n.problem.question, n.problem.answer)
        for f in grounding.seed_facts(rename(text, renames))
    )
    terms = grounding.passage_terms()
    if not carried and not terms and not renames:
        return ""
    return render_prompt(
        "reground_vocabulary",
        terms="; ".join(terms[:VOCABULARY_TERMS]) or "(none)",
        seed_only="; ".join(list(carried)[:VOCABULARY_TERMS]) or "(none)",
        renamed="; ".join(f"{old} -> {new}" for old, new in renames.items()) or "(none)",
    )


def grounded_id(problem: Problem, ground: NewGround, tree: SyntheticTree) -> str:
    """ORIGINAL.g{k}t{tree}: unique per node, document rank k and tree (a node can sit in several trees)."""
    return f"{problem.id}.g{ground.slot}t{tree.index}"


def grounded_problem(
    node: TreeNode, new: GroundedNode, ground: NewGround, tree: SyntheticTree, renames: dict[str, str] | None = None
) -> Problem:
    """The teacher's re-grounded node as a Problem on d'; a seed term it still writes where d' has an
    analogue is renamed (recorded in meta.renamed)."""
    old, renames = node.problem, renames or {}
    question, solution, answer = (rename(t.strip(), renames) for t in (new.question, new.solution, new.answer))
    meta = {k: v for k, v in old.meta.items() if k not in PROGRAM_META}  # the original's program is not d''s
    meta.update(teacher_solution=solution, regrounded_from=old.id, document=ground.document.doc_id)
    if ground.truncated:
        meta["document_truncated"] = ground.truncated
    program, why = bound_program(new, ground.snippet.text)  # verify.programs: the new program, quoting d'
    if program:
        meta["program"] = program
    if why:
        meta["program_error"] = why
    written = " ".join((new.question, new.solution, new.answer))
    if used := {
        seed_term: term for seed_term, term in renames.items() if rename(written, {seed_term: term}) != written
    }:
        meta["renamed"] = used
    return Problem(
        id=grounded_id(old, ground, tree),
        question=question,
        answer=answer,
        domain=old.domain,
        snippet=ground.snippet,
        entity=ground.entity,
        provenance=old.provenance.model_copy(update={"stage": STAGE, "parent_ids": [old.id]}),
        meta=meta,
    )


def prune(node: TreeNode, kept: dict[str, TreeNode]) -> tuple[TreeNode | None, list[TreeNode]]:
    """(the re-grounded version of `node` with its kept children, kept subtrees cut off below a dropped node)."""
    results = [prune(child, kept) for child in node.children]
    children = [c for c, _ in results if c is not None]
    loose = [o for _, orphans in results for o in orphans]
    if node.problem.id in kept:
        return kept[node.problem.id].model_copy(update={"children": children}), loose
    return None, children + loose


class Regrounder:
    """Re-grounds one seed's synthetic trees; holds the seed material the leakage check keeps out."""

    def __init__(self, ctx: Context, index: Index, seed: Problem, own: list[Document], ledger: Ledger):
        self.ctx, self.index, self.seed, self.ledger = ctx, index, seed, ledger
        snippet = seed.snippet.text if seed.snippet else ""
        self.material = [snippet] + [d.summary for d in own[:1] if d.summary]
        self._groundings: dict[int, Grounding] = {}

    def grounding(self, ground: NewGround) -> Grounding:
        """What d' allows, built once per new ground (every tree of the seed is checked against it): the
        new document's whole text is read and normalized once, not once per tree."""
        if ground.slot not in self._groundings:
            doc = ground.document
            self._groundings[ground.slot] = Grounding(
                ground.snippet.text,
                self.material,
                self.seed.entity,
                vocabulary=[ground.entity, doc.title, doc.company or ""],
                document=self.index.document_text(doc.doc_id),
            )
        return self._groundings[ground.slot]

    def grounding_for(self, doc: Document, snippet: Snippet, entity: str) -> Grounding:
        """What d' allows for a rebinding (`finmbs.mbs.rebind`): as `grounding`, for a clause the engine found."""
        return Grounding(
            snippet.text,
            self.material,
            self.seed.entity,
            vocabulary=[entity, doc.title, doc.company or ""],
            document=self.index.document_text(doc.doc_id),
        )

    @property
    def passed(self) -> str:
        """What a re-grounded node passed before its trace."""
        return "leakage check and judge passed" if self.ctx.stages.reground_judge else "leakage check passed"

    async def judge(self, problem: Problem) -> Answerability:
        return await answerability(self.ctx, problem)

    def leak(self, problem: Problem, grounding: Grounding) -> str | None:
        """Why the mechanical grounding / leakage check rejects `problem`, or None."""
        return grounding.check(
            problem.question,
            problem.answer,
            problem.meta.get("teacher_solution", ""),
            quotes=quoted(problem),
            paper=self.ctx.stages.leakage_rules == "paper",
        )

    async def check(self, problem: Problem) -> bool:
        """The judge (after the mechanical check passed); a failure is recorded on the ledger."""
        verdict = await self.judge(problem)
        self.ctx.tick(STAGE)
        if not (verdict.answerable and verdict.supported):
            what = (
                "not answerable from the passage alone"
                if not verdict.answerable
                else "answer not supported by the passage"
            )
            self.ledger.reject(
                problem, STAGE, f"judge: {what}: {verdict.reason}", check="judge", document=problem.meta["document"]
            )
            return False
        return True

    async def verified(self, node: TreeNode, problem: Problem) -> TreeNode | None:
        """The re-grounded node (mechanically checked already) when the judge passes it, a teacher trace
        verifies its new answer and it passes its stage's weakest-student screen; otherwise None (the
        failure is on the ledger)."""
        document = problem.meta["document"]
        if self.ctx.config.novelty.unworkable and (bad := unworkable(problem)):
            self.ledger.reject(problem, STAGE, bad[1], check=bad[0], document=document)
            return None
        if self.ctx.stages.reground_judge and not await self.check(problem):  # finmbs's judge
            return None
        if programs_on(self.ctx):  # finmbs's layer: the program on d' computes the answer too (programs.py)
            new = await program_node(
                self.ctx,
                problem,
                self.ledger,
                stage=STAGE,
                path=node.path,
                mirrors=node.mirrors,
                relabel=False,  # a re-grounded answer is never relabeled, as without programs
                unverified="verify",
                document=document,
            )
            if new is None:
                return None
            new.decisions[-1].reason = f"grounded on {document}; {self.passed}; {new.decisions[-1].reason}"
        else:
            trace, why = await teacher_trace(self.ctx, problem)
            if trace is None:
                self.ledger.reject(problem, STAGE, f"unverified: {why}", check=Check.VERIFY, document=document)
                return None
            decision = Decision(
                stage=STAGE,
                outcome="accepted",
                reason=f"grounded on {document}; {self.passed}; answer verified by {trace.model}",
            )
            new = TreeNode(problem=problem, path=node.path, mirrors=node.mirrors, decisions=[decision], trace=trace)
        alpha = {"leaf": self.ctx.stages.alpha_leaf, "compose": self.ctx.stages.alpha_parent}.get(
            node.problem.provenance.stage
        )
        if not self.ctx.stages.reground_screen:  # the paper screens leaves and parents once, before re-grounding
            alpha = None
        if alpha is not None and not await weakest_screen(
            self.ctx, new, alpha, STAGE, self.ledger, check=Check.SCREEN, document=document
        ):
            return None
        return new

    async def ask(
        self,
        tree: SyntheticTree,
        ground: NewGround,
        told: str,
        renames: dict[str, str],
        attempt: int = 0,
        feedback: str = "",
    ) -> GroundedTree | None:
        """The teacher's re-grounding of every node of `tree` (shown with `renames` applied), told
        `vocabulary(tree, ...)` (attempt > 0: again, told why nodes failed)."""
        turn = (ground.slot + tree.index + attempt) if self.ctx.stages.rotate_teachers else 0
        teacher = self.ctx.teachers[turn % len(self.ctx.teachers)]
        spans = figure_spans(self.ctx, self.seed, ground.snippet.text)  # d's figures, to choose among
        text = program_prompt(
            self.ctx,
            render_prompt(
                "reground_tree",
                seed_entity=self.seed.entity or "",
                seed_passage=self.material[0],
                tree=tree_block(tree, renames),
                entity=ground.entity,
                passage=ground.snippet.text,
                vocabulary=told,
                feedback=feedback,
            ),
            "finance",
            spans=spans,
        )
        [reply] = await self.ctx.gateway.structured(
            teacher,
            reply_model(self.ctx, GroundedTree, spans),
            role="teacher",
            first_index=attempt,
            messages=[{"role": "user", "content": text}],
        )
        self.ctx.tick(STAGE)
        return reply

    def grounded(
        self,
        tree: SyntheticTree,
        nodes: list[TreeNode],
        reply: GroundedTree | None,
        ground: NewGround,
        attempt: int,
        renames: dict[str, str],
    ) -> dict[str, Problem]:
        """Node path -> its re-grounded problem in `reply` (a missing node is recorded on the ledger)."""
        by_path = {n.path.strip(): n for n in reply.nodes} if reply else {}
        if reply and not tree.root.children and len(reply.nodes) == 1:  # one node each: whatever its path
            by_path = {tree.root.path: reply.nodes[0]}
        found = {}
        for node in nodes:
            problem = (
                grounded_problem(node, by_path[node.path], ground, tree, renames)
                if node.path in by_path
                else node.problem.model_copy(update={"id": grounded_id(node.problem, ground, tree)})
            )
            if attempt:
                problem = problem.model_copy(update={"id": f"{problem.id}r{attempt}"})
            if node.path in by_path:
                found[node.path] = problem
                continue
            why = "re-grounding reply did not parse" if reply is None else f"re-grounding reply has no node {node.path}"
            self.ledger.reject(problem, STAGE, why, check="reply", document=ground.document.doc_id)
        return found

    async def tree(self, tree: SyntheticTree, ground: NewGround) -> list[SyntheticTree]:
        """`tree` re-grounded on `ground`: its surviving nodes as one or more SyntheticTrees.

        The nodes that fail the mechanical check are asked for again, up to `stages.reground_retries`
        times, with the check's reasons (a small teacher carries the seed's terms over; told which, it
        can use the new passage's own)."""
        grounding = self.grounding(ground)
        renames = tree_renames(tree, grounding, self.seed.entity, ground.entity) if self.ctx.stages.rename else {}
        told = vocabulary(tree, grounding, renames) if self.ctx.stages.rename else ""
        # the teacher re-grounds the whole tree (its structure is the pattern), but under keep: roots only the
        # root can ever be calibrated: the other nodes are not checked, judged, traced or screened
        nodes = list(tree.root.walk()) if self.ctx.stages.keep == "all" else [tree.root]
        passed: dict[str, Problem] = {}
        failed: dict[str, tuple[Problem, str]] = {}
        todo = nodes
        for attempt in range(self.ctx.stages.reground_retries + 1):
            feedback = (
                render_prompt(
                    "reground_feedback",
                    failures="\n".join(
                        f'- node {path}: "{problem.question}": {why}' for path, (problem, why) in failed.items()
                    ),
                )
                if failed
                else ""
            )
            reply = await self.ask(tree, ground, told, renames, attempt, feedback)
            found = self.grounded(tree, todo, reply, ground, attempt, renames)
            failed = {}
            for path, problem in found.items():
                if programs_on(self.ctx) and problem.meta.get("program"):  # its quotes decide rule 5
                    problem = with_mends(self.ctx, problem)
                    problem = recorded(problem, await run_for(problem))
                if why := self.leak(problem, grounding):
                    self.ledger.reject(problem, STAGE, why, check="leakage", document=ground.document.doc_id)
                    failed[path] = (problem, why)
                else:
                    passed[path] = problem
            todo = [n for n in nodes if n.path in failed]
            if not todo:
                break
        pairs = [(node, passed[node.path]) for node in nodes if node.path in passed]
        verified = await asyncio.gather(*(self.verified(node, problem) for node, problem in pairs))
        kept = {node.problem.id: new for (node, _), new in zip(pairs, verified) if new is not None}
        root, loose = prune(tree.root, kept)
        roots = ([root] if root else []) + loose
        return [
            SyntheticTree(
                seed_id=tree.seed_id, index=tree.index, root=r, grounding=ground.snippet, entity=ground.entity
            )
            for r in roots
        ]


class Rebinding(Protocol):
    """Re-grounding by rebinding (`finmbs.mbs.rebind`, which builds on this module): which trees it takes,
    and one tree rebound onto one document. Passed in by the caller, so this module imports it not."""

    def on(self, ctx: Context, tree: SyntheticTree) -> bool: ...

    async def rebound(
        self,
        ctx: Context,
        index: Index,
        seed: Problem,
        tree: SyntheticTree,
        doc: Document,
        k: int,
        concept: Any,
        regrounder: Regrounder,
        ledger: Ledger,
    ) -> SyntheticTree | None: ...


async def reground_trees(
    ctx: Context, seed: Problem, trees: list[SyntheticTree], ledger: Ledger, rebinding: Rebinding | None = None
) -> list[SyntheticTree]:
    """Stage 5 for one finance seed, on the index of the run config."""
    if not trees:
        return []
    with shared_index(ctx.config.index) as index:
        return await reground(ctx, index, seed, trees, ledger, rebinding)


async def reground(
    ctx: Context,
    index: Index,
    seed: Problem,
    trees: list[SyntheticTree],
    ledger: Ledger,
    rebinding: Rebinding | None = None,
) -> list[SyntheticTree]:
    """Every synthetic tree of `seed` re-grounded on each accepted unseen document (new tree indexes follow);
    with `rebinding` (`finmbs.mbs.rebind`), the trees it takes are rebound instead."""
    if not trees:
        return []
    method = trees[0].root.problem.provenance.method
    if ctx.stages.keep == "roots":  # a subtree no synthetic root uses can never be calibrated: not re-grounded
        trees = [t for t in trees if t.root.path == "0"]  # outcome.is_root: a synthetic version of the seed's root
        if not trees:
            return []
    documents, own = unseen_documents(index, seed, ctx.stages.Kd, ctx.excluded_documents)
    if not documents:
        ledger.reject(
            _candidate(seed, method, 0, None),
            STAGE,
            "no unseen document in the index to re-ground on",
            check="retrieve",
        )
        return []
    concept = await seed_concept(ctx, seed)
    regrounder = Regrounder(ctx, index, seed, own, ledger)
    first = max(t.index for t in trees) + 1
    # stages.reground_rebind: a tree the finance operators built is rebound onto each document (rebind.py)
    by_rebinding = [t for t in trees if rebinding is not None and rebinding.on(ctx, t)]
    trees = [t for t in trees if t not in by_rebinding]
    rebound = await asyncio.gather(
        *(
            rebinding.rebound(ctx, index, seed, t, doc, k, concept, regrounder, ledger)  # type: ignore[union-attr]
            for k, doc in enumerate(documents)
            for t in by_rebinding
        )
    )
    grounds = (
        await asyncio.gather(
            *(new_ground(ctx, index, seed, method, k, doc, ledger, concept) for k, doc in enumerate(documents))
        )
        if trees
        else []
    )
    results = await asyncio.gather(*(regrounder.tree(t, g) for g in grounds if g is not None for t in trees))
    found = [t for t in rebound if t is not None] + [t for trees_ in results for t in trees_]
    return [t.model_copy(update={"index": first + i}) for i, t in enumerate(found)]
