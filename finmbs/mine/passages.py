"""Passages worth asking about, chosen without a model call: each indexed chunk of a document is scored
by its figures (percentages, amounts, ratios) and finance terms (margins, fees, covenants, payment and
default terms; in filings, statement lines), boilerplate (contents, notices, signatures) scored down.

A passage is a chunk run on into the next chunk of the same section (a pricing grid or a covenant often
straddles two chunks), the stored document text between the two, so it is verbatim by construction. A
cross-passage pair is a defined term's definition and the best-scoring provision elsewhere that uses it
(a ratio's definition and the covenant that sets its level).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from finmbs.mbs.leakage import text_figures, trivial
from finmbs.records import Chunk, Document, Snippet, shown_path

TYPES = ("lookup", "one_step", "multi_step", "cross_passage")
MAX_PASSAGE_CHARS = 2400  # a passage the teacher reads whole (two chunks of 220 tokens, about)

# finance vocabulary: terms, pricing, fees, covenants, payment and default terms, statement lines
_TERMS = re.compile(
    r"\b(applicable (?:rate|margin|percentage)|margin|spread|basis points?|fees?|commitment|interest|"
    r"(?:leverage|coverage|liquidity|debt service|fixed charge|current|quick) ratio|leverage|coverage|ebitda|"
    r"covenant|shall not (?:permit|exceed)|not (?:less|greater|more) than|at least|event of default|default rate|"
    r"prepay\w*|repay\w*|amortiz\w*|maturity|principal|sofr|base rate|floor|premium|per annum|"
    r"net (?:income|sales|revenues?|worth)|revenues?|total assets|liabilities|operating income|gross margin|"
    r"earnings per share|cash flows?|dividends?|depreciation|income taxes|long-term debt|indebtedness|"
    r"capital expenditures|tangible net worth|unused|letter of credit|swing line)\b",
    re.IGNORECASE,
)
_STRONG = ("percent", "money", "ratio")
# boilerplate that carries figures nobody should be asked about
_BOILERPLATE = re.compile(
    r"telephone|facsimile|fax:|attention:|e-?mail:|@|\bBy:\s|\bName:\s|\bTitle:\s|table of contents|"
    r"\.{5,}|CUSIP|ABA\s*#|account\s*(?:no|number)",
    re.IGNORECASE,
)
_END_MATTER = re.compile(r"IN\s+WITNESS\s+WHEREOF|Signature Page to", re.IGNORECASE)
_REFERS = re.compile(r"ha(?:s|ve) the meaning|as defined in|is defined in", re.IGNORECASE)
_MEASURE = re.compile(
    r"ratio|ebitda|net worth|net income|interest expense|indebtedness|debt|liquidity|capital", re.IGNORECASE
)
_COVENANT = re.compile(
    r"shall not permit|shall maintain|not (?:be )?(?:less|greater|more) than|not (?:to )?exceed|"
    r"at least|minimum|maximum",
    re.IGNORECASE,
)


@dataclass
class Passage:
    """What the teacher reads: one excerpt, or (cross-passage) a definition and the provision using it."""

    doc_id: str
    parts: list[Snippet]
    score: float
    term: str | None = None  # cross-passage: the defined term both excerpts name

    @property
    def text(self) -> str:
        return "\n...\n".join(p.text for p in self.parts)

    def snippet(self) -> Snippet | None:
        """The seed's `d`: the excerpt itself (its offsets and section), or both excerpts joined."""
        if not self.parts:
            return None
        if len(self.parts) == 1:
            return self.parts[0]
        first = self.parts[0]
        return Snippet(
            text=self.text,
            doc_id=first.doc_id,
            source_path=first.source_path,
            section_path=" + ".join(p.section_path for p in self.parts if p.section_path),
            page=first.page,
        )


def strong_figures(text: str) -> list:
    """The figures worth asking about: percentages, amounts and ratios, not years, counts or references."""
    return [f for f in text_figures(text) if f.kind in _STRONG and not f.year_like]


def score(chunk: Chunk) -> float:
    """Figures (a percentage, amount or ratio counts double, capped at 12) plus distinct finance terms
    (capped at 8); a definition or a table gets a bonus; boilerplate and figure-less text score 0."""
    text = chunk.text
    strong = strong_figures(text)
    if not strong or len(_BOILERPLATE.findall(text)) >= 2:
        return 0.0
    others = [f for f in text_figures(text) if f.kind not in _STRONG and not trivial(f) and not f.year_like]
    figures = min(12.0, 2.0 * len(strong) + 0.5 * len(others))
    terms = min(8.0, float(len({m.lower() for m in _TERMS.findall(text)})))
    bonus = 2.0 if chunk.kind in ("definition", "table") else 0.0
    return figures + terms + bonus


def _span(doc: Document, text: str, first: Chunk, last: Chunk) -> Snippet:
    start, end = first.char_start or 0, last.char_end or len(text)
    return Snippet(
        text=text[start:end],
        doc_id=doc.doc_id,
        source_path=shown_path(doc.source_path),
        section_path=first.section_path,
        page=first.page,
        char_start=start,
        char_end=end,
    )


def _excerpt(doc: Document, text: str, chunks: list[Chunk], i: int) -> Snippet:
    """Chunk i, run on into chunk i+1 when it is in the same section and the two stay short."""
    chunk = chunks[i]
    if chunk.char_start is None or chunk.char_end is None:
        return Snippet(
            text=chunk.text,
            doc_id=doc.doc_id,
            source_path=shown_path(doc.source_path),
            section_path=chunk.section_path,
            page=chunk.page,
        )
    first, last = chunk, chunk
    prev = chunks[i - 1] if i > 0 else None
    mid_paragraph = chunk.char_start > 0 and text[chunk.char_start - 1] not in "\n"
    if (
        mid_paragraph
        and prev is not None
        and prev.char_start is not None
        and prev.section_path == chunk.section_path
        and chunk.char_end - prev.char_start <= MAX_PASSAGE_CHARS
    ):
        first = prev  # a grid or clause cut by the chunker: from where it starts
    nxt = chunks[i + 1] if i + 1 < len(chunks) else None
    if (
        nxt is not None
        and nxt.char_end is not None
        and nxt.section_path == chunk.section_path
        and chunk.kind != "definition"
        and nxt.char_end - first.char_start <= MAX_PASSAGE_CHARS
    ):  # type: ignore[operator]
        last = nxt
    return _span(doc, text, first, last)


def _overlaps(a: Snippet, b: Snippet) -> bool:
    if None in (a.char_start, a.char_end, b.char_start, b.char_end):
        return a.text == b.text
    return a.char_start < b.char_end and b.char_start < a.char_end  # type: ignore[operator]


def body(text: str, chunks: list[Chunk]) -> list[Chunk]:
    """The chunks of the agreement itself: an agreement's signature pages ("IN WITNESS WHEREOF") end it, and
    the schedules and exhibit forms after them (lender lists, notice forms) are nothing to ask about."""
    ends = [m.start() for m in _END_MATTER.finditer(text) if m.start() > len(text) * 0.3]  # not an amendment's own
    if not ends:
        return chunks
    return [c for c in chunks if c.char_start is None or c.char_start < ends[0]]


def single_passages(doc: Document, text: str, chunks: list[Chunk], most: int) -> list[Passage]:
    """The best-scoring excerpts of a document, best first, no two overlapping, at most `most`."""
    ranked = sorted(((score(c), i) for i, c in enumerate(chunks)), key=lambda s: (-s[0], s[1]))
    chosen: list[Passage] = []
    for value, i in ranked:
        if value <= 0 or len(chosen) >= most:
            break
        excerpt = _excerpt(doc, text, chunks, i)
        if any(_overlaps(excerpt, p.parts[0]) for p in chosen) or len(_BOILERPLATE.findall(excerpt.text)) >= 2:
            continue
        chosen.append(Passage(doc.doc_id, [excerpt], value))
    return chosen


def cross_passages(doc: Document, text: str, chunks: list[Chunk], most: int) -> list[Passage]:
    """(definition, provision using it) pairs, best first: a defined term of two words or more whose
    definition is not boilerplate, and the best-scoring covenant-like provision outside the definitions
    that names it and states a figure; at most `most`, no term or provision twice."""
    pairs: list[Passage] = []
    provisions = [(score(c), c) for c in chunks if c.kind != "definition" and _COVENANT.search(c.text)]
    provisions = [(s, c) for s, c in provisions if s > 0]
    used: set[str] = set()
    for definition in (c for c in chunks if c.kind == "definition" and c.term and len(c.term.split()) >= 2):
        if _BOILERPLATE.search(definition.text) or len(definition.text) > MAX_PASSAGE_CHARS:
            continue
        if not (_TERMS.search(definition.term or "") or strong_figures(definition.text)) or _REFERS.search(
            definition.text
        ):
            continue  # "Administrative Agent": nothing to compute; "has the meaning assigned in Article VII": elsewhere
        term = re.compile(rf"\b{re.escape(definition.term)}\b")  # type: ignore[arg-type]
        users = sorted(
            ((s, c) for s, c in provisions if term.search(c.text) and c.chunk_id not in used), key=lambda sc: -sc[0]
        )
        if not users:
            continue
        value, provision = users[0]
        parts = [_span(doc, text, definition, definition), _span(doc, text, provision, provision)]
        measure = 5.0 if _MEASURE.search(definition.term or "") else 0.0  # a ratio, EBITDA, net worth: computed
        pairs.append(
            Passage(
                doc.doc_id, parts, value + 2.0 * len(strong_figures(definition.text)) + measure, term=definition.term
            )
        )
    pairs.sort(key=lambda p: -p.score)
    chosen: list[Passage] = []
    for pair in pairs:
        if pair.parts[1].char_start in used or len(chosen) >= most:
            continue
        used.add(pair.parts[1].char_start)  # type: ignore[arg-type]
        chosen.append(pair)
    return chosen


def plan(
    doc: Document, text: str, chunks: list[Chunk], count: int, types: list[str], first: int = 0
) -> list[tuple[str, Passage]]:
    """`count` (question type, passage) assignments for one document: the types in turn (from the `first`th,
    so that documents asked for fewer questions than there are types still share out every type) over the
    best passages; a cross-passage turn without a pair left asks for a multi-step question instead."""
    wanted = [types[(first + i) % len(types)] for i in range(count)]
    chunks = body(text, chunks)
    singles = single_passages(doc, text, chunks, sum(t != "cross_passage" for t in wanted) + count)
    pairs = cross_passages(doc, text, chunks, sum(t == "cross_passage" for t in wanted))
    planned: list[tuple[str, Passage]] = []
    for kind in wanted:
        if kind == "cross_passage" and pairs:
            planned.append((kind, pairs.pop(0)))
        elif singles and (kind != "cross_passage" or "multi_step" in types):
            planned.append(("multi_step" if kind == "cross_passage" else kind, singles.pop(0)))
    return planned
