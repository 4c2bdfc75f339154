"""Structure-aware chunking: sections from ARTICLE/Section (or PART/Item) headings, one chunk per
defined term in the definitions article, tables split only between rows, long prose split by
llama-index's SentenceSplitter. Every chunk is an exact slice: `text[char_start:char_end] == chunk.text`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from llama_index.core.node_parser import SentenceSplitter

from finmbs.ingest.parse import ParsedDocument
from finmbs.ingest.verbatim import find_verbatim
from finmbs.records import Chunk

# Whitespace and dot runs are consumed possessively and tried from their first character only (a match from
# inside a run ends where one from its start does): linear in the line, where nested `\s` runs were cubic.
_TOC_LINE = re.compile(r"((?<!\.)\.{4,}+|(?<!\s)\s{2,}+|\t)\s*+\d{1,3}+\s*+$|\s\d{1,3}+\s++(Section|SECTION|ARTICLE)\s")
_ARTICLE = re.compile(r"(ARTICLE|Article|PART)\s+([IVXLC]+|\d+)\b[.:\-–—]?\s*(.*)")
_SECTION = re.compile(r"(?:SECTION|Section|§)\s*(\d+(?:\.\d+)*[a-z]?)\.?\s*(.*)")
_NUMBERED = re.compile(r"(\d{1,2}\.\d{1,2}[a-z]?)\.?\s+([A-Z][^\n]*)")
_ITEM = re.compile(r"(?:ITEM|Item)\s+(\d+[A-C]?)\.?\s*(.*)")
_TERM = re.compile(r"[“\"]\s*([^”\"\n]{1,150}?)\s*[”\"]")
_MEANS = re.compile(
    r"^\s*+(?:[,;]?\s*+(?:and|or)\s++[“\"][^”\"\n]++[”\"])*+\s*+,?\s*+(means|shall mean|has the meaning|have the meaning|shall have the meaning|is defined|refers to)"  # noqa: E501 (one regular expression)
)


VERSION = 3  # raise it when a change moves chunk boundaries: every file is then ingested again
BLOCK_CHARS = 32_768  # longest stretch handed to the sentence splitter at once
WRAPPED_LINES = 50  # a blank-line block longer than this is hard-wrapped text: one paragraph a line
_WRAPPED_PIECE = re.compile(
    r"(?:[^\n](?!(?<=[.;:])[ \t\xa0]+[“\"][^”\"\n]{1,150}[”\"]\s*(?:means|shall mean|has the meaning|shall have the meaning)))*[^\n]"  # noqa: E501 (one regular expression)
)


@dataclass
class Heading:
    level: int
    label: str


def _title(rest: str) -> str:
    """The heading title: text up to the first sentence end, at most 100 characters."""
    rest = rest.strip().split("\n")[0]
    end = re.search(r"\.(\s|$)", rest)
    return (rest[: end.start()] if end else rest)[:100].strip(" .:-–—")


def heading(paragraph: str) -> Heading | None:
    """The ARTICLE/PART (level 1) or Section/Item (level 2) heading that opens a paragraph, if any."""
    first = paragraph.lstrip().split("\n")[0].strip()
    if (
        len(first) > 400
    ):  # a long line opens with a heading only when it runs in: "Section 10.5 Default Rate of Interest . At the ..."
        run_in = re.match(r".{1,120}?[A-Za-z)\]]\s?\.(?=\s)", first)
        first = run_in.group(0) if run_in else ""
    if not first or _TOC_LINE.search(first):
        return None
    if match := _ARTICLE.match(first):
        word = "PART" if match[1] == "PART" else "ARTICLE"
        rest = match[3].strip() or next((ln.strip() for ln in paragraph.strip().split("\n")[1:2]), "")
        title = _title(rest)
        if title and title[0].islower():
            return None
        return Heading(1, f"{word} {match[2]}" + (f" {title}" if title else ""))
    for pattern, prefix in ((_SECTION, "Section"), (_ITEM, "Item"), (_NUMBERED, "Section")):
        if match := pattern.match(first):
            title = _title(match[2])
            if (title and not title[0].isupper() and not title[0].isdigit()) or (
                pattern is _NUMBERED and len(first) > 100 and not title
            ):
                return None
            if pattern is _SECTION and not title and "." not in match[1]:
                return None
            return Heading(2, f"{prefix} {match[1]}" + (f" {title}" if title else ""))
    return None


def defined_term(paragraph: str, in_definitions: bool) -> str | None:
    """The term a definitions paragraph defines ('“Term” means ...'), if it is one."""
    match = _TERM.match(paragraph.lstrip())
    if not match:
        return None
    if in_definitions or _MEANS.match(paragraph.lstrip()[match.end() :]):
        return match[1].strip()
    return None


def paragraphs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each paragraph, whitespace trimmed: blank-line separated, or one a line where
    the text (like some EDGAR text renderings) is hard-wrapped without blank lines: the whole text
    when it has almost no blank lines, else each blank-line block of more than `WRAPPED_LINES` lines
    that is not a table (a definitions article rendered as one block of 400 wrapped lines); there a
    definition that starts after a sentence's end in mid-line ("... (0.50%). “Foreign Lender” means")
    starts a paragraph too."""
    one_a_line = text.count("\n\n") * 20 < text.count("\n")
    blocks = r"[^\n]+" if one_a_line else r"(?:[^\n]|\n(?![ \t\xa0]*\n))+"
    for block in re.finditer(blocks, text):
        body = block.group(0)
        wrapped = body.count("\n") > WRAPPED_LINES and not _is_table(body.strip())
        pieces = [(m.start(), m.group(0)) for m in _WRAPPED_PIECE.finditer(body)] if wrapped else [(0, body)]
        for offset, piece in pieces:
            if stripped := piece.strip():
                start = block.start() + offset + len(piece) - len(piece.lstrip())
                yield start, start + len(stripped)


def _is_table(paragraph: str) -> bool:
    lines = paragraph.split("\n")
    return len(lines) >= 2 and all(line.lstrip().startswith("|") for line in lines)


class Chunker:
    """Turns a parsed document into `Chunk`s of at most `chunk_size` embedding tokens. Prose splits at
    sentences, tables between rows; a single sentence or row that is still too long is cut between
    word pieces (at a space where one is near), so no chunk is truncated by the embedder."""

    def __init__(
        self,
        chunk_size: int,
        chunk_overlap: int,
        count_tokens: Callable[[str], list[int]],
        offsets: Callable[[str], list[tuple[int, int]]] | None = None,
    ):
        self.size = chunk_size
        self.tokens = lambda s: len(count_tokens(s))
        self.offsets = offsets
        self.splitter = SentenceSplitter(
            chunk_size=chunk_size, chunk_overlap=min(chunk_overlap, chunk_size // 2), tokenizer=count_tokens
        )

    def fit(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """text[start:end] as spans of at most `size` tokens, cut between word pieces."""
        if self.offsets is None or self.tokens(text[start:end]) <= self.size:
            return [(start, end)]
        body = text[start:end]
        pieces = self.offsets(body)
        out, first = [], 0
        while first < len(pieces):
            last = min(first + self.size, len(pieces))
            cut = pieces[last][0] if last < len(pieces) else len(body)
            space = body.rfind(" ", pieces[first][0], cut) if last < len(pieces) else -1
            if space > pieces[max(first, last - self.size // 4)][0]:
                cut = space
            s, e = pieces[first][0], cut
            seg = body[s:e]
            s, e = s + len(seg) - len(seg.lstrip()), e - (len(seg) - len(seg.rstrip()))
            if e > s:
                out.append((start + s, start + e))
            while first < len(pieces) and pieces[first][0] < cut:
                first += 1
        return out

    def spans(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """Split text[start:end] into exact spans of at most chunk_size tokens (sentence-aware).

        A very long paragraph (a file that is one huge line) is first cut into blocks of at most
        BLOCK_CHARS at whitespace, so time and memory stay linear in its length.
        """
        if end - start > BLOCK_CHARS:
            out = []
            while end - start > BLOCK_CHARS:
                cut = text.rfind(" ", start + BLOCK_CHARS // 2, start + BLOCK_CHARS)
                cut = cut if cut > start else start + BLOCK_CHARS
                out += self.spans(text, start, cut)
                start = cut + (text[cut] == " ")
            return out + self.spans(text, start, end)
        body = text[start:end]
        if self.tokens(body) <= self.size:
            return [(start, end)]
        out, cursor = [], 0
        for piece in self.splitter.split_text(body):
            found = find_verbatim(piece, body[cursor:])
            if found is None:
                continue
            s, e = found[0] + cursor, found[1] + cursor
            out.append((start + s, start + e))
            cursor = s + 1
        return out or [(start, end)]

    def table_spans(self, text: str, start: int, end: int) -> list[tuple[int, int]]:
        """Split a Markdown table only between rows."""
        rows, pos = [], start
        for line in text[start:end].split("\n"):
            rows.append((pos, pos + len(line)))
            pos += len(line) + 1
        out: list[tuple[int, int]] = []
        cur_start, cur_tokens, prev_end = rows[0][0], 0, rows[0][1]
        for row_start, row_end in rows:
            n = self.tokens(text[row_start:row_end])
            if cur_tokens and cur_tokens + n > self.size:
                out.append((cur_start, prev_end))
                cur_start, cur_tokens = row_start, 0
            cur_tokens += n
            prev_end = row_end
        out.append((cur_start, prev_end))
        return out

    def chunk(self, doc: ParsedDocument, doc_id: str, source_path: str) -> list[Chunk]:
        text = doc.text
        path: list[Heading] = []
        chunks: list[Chunk] = []
        pending: list[tuple[int, int]] = []  # paragraphs of the prose chunk being built
        definition: list[tuple[int, int]] = []
        term: str | None = None
        untitled = False

        def section() -> str:
            return " > ".join(h.label for h in path)

        def emit(spans: list[tuple[int, int]], kind: str, term: str | None = None) -> None:
            for s, e in (piece for span in spans for piece in self.fit(text, *span)):
                page = doc.page_of(s)
                chunks.append(
                    Chunk(
                        chunk_id=f"{doc_id}#{len(chunks):05d}",
                        text=text[s:e],
                        doc_id=doc_id,
                        source_path=source_path,
                        section_path=section(),
                        page=page,
                        char_start=s,
                        char_end=e,
                        kind=kind,
                        term=term,
                    )
                )

        def flush() -> None:
            nonlocal pending, definition, term
            if pending:
                emit(self.spans(text, pending[0][0], pending[-1][1]), "text")
            if definition:
                emit(self.spans(text, definition[0][0], definition[-1][1]), "definition", term)
            pending, definition, term = [], [], None

        for start, end in paragraphs(text):
            para = text[start:end]
            if head := heading(para):
                flush()
                path = [h for h in path if h.level < head.level] + [head]
            elif untitled and len(para) < 100 and not _is_table(para):
                path[-1].label += f" {_title(para)}"  # "ARTICLE I" then "DEFINITIONS" as its own paragraph
            untitled = bool(head and head.level == 1 and " " not in head.label.split(" ", 1)[1])
            if _is_table(para):
                flush()
                emit(self.table_spans(text, start, end), "table")
                continue
            in_definitions = any("defin" in h.label.lower() for h in path)
            if (new_term := defined_term(para, in_definitions)) is not None:
                flush()
                definition, term = [(start, end)], new_term
                continue
            if definition and in_definitions:
                definition.append((start, end))  # clauses (a), (b) ... of the current definition
                continue
            if definition:
                flush()
            same_page = not pending or doc.page_of(pending[0][0]) == doc.page_of(start)
            if pending and (not same_page or self.tokens(text[pending[0][0] : end]) > self.size):
                flush()
            pending.append((start, end))
        flush()
        return chunks
