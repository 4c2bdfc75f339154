"""Ingest files and folders into the index: parse, chunk, summarize, embed, store.

Idempotent by content hash: an unchanged file is skipped, a changed file replaces its old chunks and
documents, and a file interrupted half-way is cleaned up on the next run (its document record, written
last, is what marks it complete).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from finmbs.config import Endpoint, IndexSettings
from finmbs.ingest.chunk import Chunker
from finmbs.ingest.embed import token_counter
from finmbs.ingest.index import Index, open_index
from finmbs.ingest.parse import SUPPORTED_EXTS, ParseError, ParsedDocument, parse_file
from finmbs.ingest.summarize import summarize
from finmbs.llm import Gateway
from finmbs.records import Chunk, Document, Record


class SkippedFile(Record):
    path: str
    reason: str


class IngestReport(Record):
    """What one ingest run did."""

    files: int = 0
    documents: int = 0
    unchanged: int = 0
    replaced: int = 0
    pages: int = 0
    chunks: int = 0
    tables: int = 0
    definitions: int = 0
    skipped: list[SkippedFile] = Field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.skipped)


def discover(paths: Iterable[str | Path], report: IngestReport) -> list[Path]:
    """Files to ingest: given files as they are, folders searched recursively for supported types."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUPPORTED_EXTS and (p.is_file() or p.is_symlink())
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                report.skipped.append(SkippedFile(path=str(path), reason="folder holds no documents (.pdf .html .htm .txt .md .nc)"))
            files += found
        elif path.exists() or path.is_symlink():
            files.append(path)
        else:
            report.skipped.append(SkippedFile(path=str(path), reason="not found"))
    return list(dict.fromkeys(files))


def _doc_id(path: Path, parsed: ParsedDocument, sha: str, index: Index, source: str) -> str:
    """File stem (plus the block key inside an EDGAR submission); a hash suffix if another file owns it."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", path.stem)
    doc_id = f"{base}/{parsed.key}" if parsed.key else base
    owners = index.documents(doc_id=doc_id)
    if any(d.source_path != source for d in owners):
        doc_id = f"{base}-{sha[:8]}" + (f"/{parsed.key}" if parsed.key else "")
    return doc_id


def embedding_text(document: Document, chunk: Chunk) -> str:
    """What gets embedded for a chunk: its document title and section path give the passage context."""
    return f"{document.title}\n{chunk.section_path}\n{chunk.text}"


class Ingestor:
    """Runs the per-file steps against one open index."""

    def __init__(self, index: Index, settings: IndexSettings, gateway: Gateway | None, endpoint: Endpoint | None):
        self.index, self.gateway, self.endpoint = index, gateway, endpoint
        self.pdf_tables, self.max_bytes = settings.pdf_tables, int(settings.max_file_mb * 2**20)
        self.chunker = Chunker(settings.chunk_size, settings.chunk_overlap, token_counter(settings.embedding_model))

    async def ingest_file(self, path: Path, report: IngestReport) -> None:
        source = str(path.resolve())
        try:
            if (size := path.stat().st_size) > self.max_bytes:
                report.skipped.append(SkippedFile(path=str(path), reason=(
                    f"too large: {size / 2**20:.1f} MB > index.max_file_mb={self.max_bytes / 2**20:g} "
                    "(raise it with --set index.max_file_mb=MB)")))
                return
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            report.skipped.append(SkippedFile(path=str(path), reason=f"unreadable: {exc.strerror or exc}"))
            return
        existing = self.index.documents(source_path=source)
        if existing and all(d.sha256 == sha for d in existing):
            report.unchanged += 1
            return
        try:
            parsed_docs = parse_file(path, self.pdf_tables)
        except ParseError as exc:
            report.skipped.append(SkippedFile(path=str(path), reason=str(exc)))
            return
        self.index.remove_source(source)  # a changed file, or leftovers of an interrupted run
        report.replaced += bool(existing)
        for parsed in parsed_docs:
            await self.ingest_document(path, parsed, sha, source, report)

    async def ingest_document(self, path: Path, parsed: ParsedDocument, sha: str, source: str, report: IngestReport) -> None:
        doc_id = _doc_id(path, parsed, sha, self.index, source)
        summary, entities = await summarize(parsed, self.gateway, self.endpoint)
        n_pages = len(parsed.page_starts) if parsed.page_starts is not None else None
        document = Document(
            doc_id=doc_id, source_path=source, sha256=sha, doc_type=parsed.doc_type, title=parsed.title,
            company=parsed.company, period=parsed.period, n_pages=n_pages, summary=summary, entities=entities,
        )
        chunks = self.chunker.chunk(parsed, doc_id, source)
        embedder = self.index.embedder
        vectors = embedder.encode([embedding_text(document, c) for c in chunks])
        summary_vector = embedder.encode([summary])[0]
        self.index.add_document(document, parsed.text, chunks, vectors, summary_vector)
        report.documents += 1
        report.pages += n_pages or 1
        report.chunks += len(chunks)
        report.tables += parsed.n_tables
        report.definitions += sum(c.kind == "definition" for c in chunks)


async def ingest_paths_async(paths: Iterable[str | Path], settings: IndexSettings, gateway: Gateway | None = None,
                             summarizer_endpoint: Endpoint | None = None, *, show_progress: bool = True,
                             console: Console | None = None) -> IngestReport:
    """Ingest files/folders into the index named by `settings`; returns the ingest report."""
    started = time.perf_counter()
    report = IngestReport()
    files = discover(paths, report)
    report.files = len(files)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[name]}"))
    with open_index(settings) as index, Progress(*columns, console=console or Console(stderr=True), disable=not show_progress) as progress:
        ingestor = Ingestor(index, settings, gateway, summarizer_endpoint)
        task = progress.add_task("files", total=len(files), name="")
        pages = progress.add_task("pages", total=None, name="")
        for path in files:
            progress.update(task, name=path.name)
            await ingestor.ingest_file(path, report)
            progress.advance(task)
            progress.update(pages, completed=report.pages, total=max(report.pages, 1))
    report.seconds = time.perf_counter() - started
    return report


def ingest_paths(paths: Iterable[str | Path], settings: IndexSettings, gateway: Gateway | None = None,
                 summarizer_endpoint: Endpoint | None = None, **kwargs) -> IngestReport:
    """Synchronous `ingest_paths_async` (for scripts and the CLI)."""
    return asyncio.run(ingest_paths_async(paths, settings, gateway, summarizer_endpoint, **kwargs))
