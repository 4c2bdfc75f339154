"""Search results for people (a rich table) and machines (JSON)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from finmbs.ingest.index import Hit
from finmbs.ingest.verbatim import normalize_ws
from finmbs.records import shown_path


def hit_json(rank: int, hit: Hit) -> dict[str, Any]:
    """One hit as a flat JSON object: rank, score, document, section, page, offsets, text."""
    chunk = hit.chunk
    return {
        "rank": rank,
        "score": round(hit.score, 4),
        "doc_id": chunk.doc_id,
        "title": hit.document.title,
        "company": hit.document.company,
        "doc_type": hit.document.doc_type,
        "section": chunk.section_path,
        "page": chunk.page,
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "kind": chunk.kind,
        "term": chunk.term,
        "statement": hit.statement,  # the primary statement the chunk lies in (index.statements), or None
        "chunk_id": chunk.chunk_id,
        "source_path": shown_path(chunk.source_path) if chunk.source_path else None,
        "text": chunk.text,
        "context": {"char_start": hit.context.char_start, "char_end": hit.context.char_end, "text": hit.context.text}
        if hit.context
        else None,
    }


def hits_table(query: str, hits: list[Hit], width: int = 160) -> Table:
    """Ranked hits with document, section, page and score, and the start of each passage."""
    table = Table(title=f"search: {query}", show_lines=True)
    for column in ("#", "score", "document", "section", "page", "text"):
        table.add_column(column, overflow="fold")
    for rank, hit in enumerate(hits, 1):
        c = hit.chunk
        where = f"p. {c.page}" if c.page else f"chars {c.char_start}-{c.char_end}"
        table.add_row(
            str(rank),
            f"{hit.score:.3f}",
            f"{c.doc_id}\n{hit.document.doc_type}",
            c.section_path or "-",
            where,
            normalize_ws(c.text)[:width],
        )
    return table
