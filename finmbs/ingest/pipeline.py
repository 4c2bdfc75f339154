"""Ingest files and folders into the index: parse, chunk, summarize, embed, store.

Idempotent by content hash: an unchanged file is skipped, a changed file replaces its old chunks and
documents, and a file interrupted half-way is cleaned up on the next run (its document record, written
last, is what marks it complete).
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing as mp
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from queue import Empty

import pymupdf
from pydantic import Field
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from finmbs.config import Endpoint, IndexSettings
from finmbs.ingest.aliases import filing_aliases
from finmbs.ingest.chunk import VERSION as CHUNKER_VERSION
from finmbs.ingest.chunk import Chunker
from finmbs.ingest.embed import (  # noqa: F401 - embedding_header/embedding_text/clipper: pipeline's names too
    HEADER_TOKENS,
    clipper,
    embedding_header,
    embedding_text,
    over_window,
    special_tokens,
    token_counter,
    token_offsets,
    window,
)
from finmbs.ingest.index import Index, open_index
from finmbs.ingest.parse import PDF_EXTS, SUPPORTED_EXTS, ParsedDocument, ParseError, parse_file
from finmbs.ingest.statements import Statements, find_statements
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
    over_window: int = 0  # chunks the embedder would truncate (its tokenizer's count); must be 0
    tables: int = 0
    definitions: int = 0
    statements: int = 0  # primary statement pages (or tables) recognised, their rows read (index.statements)
    line_items: int = 0  # rows read from them
    statements_unread: int = 0  # pages that look like a statement whose rows could not be read: ordinary chunks
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
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix.lower() in SUPPORTED_EXTS
                and (p.is_file() or p.is_symlink())
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                report.skipped.append(
                    SkippedFile(path=str(path), reason="folder holds no documents (.pdf .docx .html .htm .txt .md .nc)")
                )
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


def chunk_budget(settings: IndexSettings) -> int:
    """Chunk tokens that fit the embedder's window next to the header: at most `index.chunk_size`."""
    return max(
        16,
        min(
            settings.chunk_size,
            window(settings.embedding_model) - special_tokens(settings.embedding_model) - HEADER_TOKENS,
        ),
    )


def chunking(settings: IndexSettings) -> str:
    """What decides a file's chunks: the chunker's version and the settings it runs with. A document
    ingested another way (an older finmbs, another chunk size) is ingested again, unchanged or not."""
    return (
        f"chunker-v{CHUNKER_VERSION} size={chunk_budget(settings)} overlap={settings.chunk_overlap} "
        f"pdf_tables={settings.pdf_tables}"
        + (" statements" if settings.statements else "")
        + (" aliases" if settings.filing_aliases else "")
    )


@dataclass
class Prepared:
    """One parsed document of a file and its chunks (doc ids assigned later, against the index)."""

    parsed: ParsedDocument
    chunks: list[Chunk]
    statements: Statements | None = None  # index.statements: the primary statements read from it


def prepare(path: Path, settings: IndexSettings) -> list[Prepared] | str:
    """Parse and chunk one file (in a worker process): its documents, or the reason it is skipped."""
    model = settings.embedding_model
    chunker = Chunker(chunk_budget(settings), settings.chunk_overlap, token_counter(model), token_offsets(model))
    try:
        return [
            Prepared(
                doc,
                chunker.chunk(doc, "", str(path.resolve())),
                find_statements(doc.text, doc.page_starts, doc.facts) if settings.statements else None,
            )
            for doc in parse_file(path, settings.pdf_tables)
        ]
    except ParseError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a parser library failing on one file must not stop the others
        return f"parser failed: {type(exc).__name__}: {exc}"


Parse = Callable[[Path, IndexSettings], "list[Prepared] | str"]


def _prepare_alone(path: Path, settings: IndexSettings, parse: Parse) -> list[Prepared] | str:
    """Re-run one file in a process of its own, to tell which file crashed a worker."""
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        try:
            return pool.submit(parse, path, settings).result()
        except BrokenProcessPool:
            return "the parser process crashed on this file"


PARSE_TIMEOUT_S = 900  # one file's parse and chunking, at most (a 300-page PDF with tables on a busy machine)
STARTUP_TIMEOUT_S = 300  # the most a fresh pool's start-up (each parser process's imports) is waited for


def _started(ready: Queue) -> None:
    """A parser process's initializer: it says it is up, its imports done (`_wait_started`)."""
    ready.put(os.getpid())


def _wait_started(ready: Queue, processes: int) -> None:
    """Wait until `processes` parser processes are up, or STARTUP_TIMEOUT_S: a file's parse limit counts
    from there, not from a cold start that a busy machine can stretch to a minute."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    for _ in range(processes):
        try:
            ready.get(timeout=max(deadline - time.monotonic(), 0.01))
        except Empty:
            return


def _stop(pool: ProcessPoolExecutor) -> None:
    """Shut a pool down now, killing workers still busy (a hung parser)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def prepared_files(
    paths: list[Path], settings: IndexSettings, workers: int, parse: Parse = prepare, timeout_s: float = PARSE_TIMEOUT_S
) -> Iterator[tuple[Path, list[Prepared] | str]]:
    """(file, documents or skip reason) in input order, parsed by `workers` processes (1: in this
    process). A file that crashes its worker is re-run alone and reported if it crashes again; a file
    whose worker does not answer within `timeout_s` (counted once the pool's processes are up) is reported;
    the other files go on in a fresh pool."""
    if workers <= 1:
        yield from ((path, parse(path, settings)) for path in paths)
        return
    queue = list(paths)
    context = mp.get_context("spawn")
    while queue:
        ready = context.Queue()
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_started, initargs=(ready,))
        futures = [(path, pool.submit(parse, path, settings)) for path in queue]
        _wait_started(ready, min(workers, len(futures)))
        queue = []
        for i, (path, future) in enumerate(futures):
            try:
                result = future.result(timeout=timeout_s)
            except (BrokenProcessPool, FutureTimeout) as exc:
                queue = [p for p, _ in futures[i + 1 :]]
                _stop(pool)
                if isinstance(exc, FutureTimeout):
                    yield path, f"parsing took longer than {timeout_s:.0f} s"
                else:
                    yield path, _prepare_alone(path, settings, parse)
                break
            yield path, result
        pool.shutdown(wait=False, cancel_futures=True)


def count_pages(path: Path) -> int:
    """Pages of a PDF (1 for other files, or when the PDF cannot be opened here)."""
    if path.suffix.lower() not in PDF_EXTS:
        return 1
    try:
        with pymupdf.open(path) as pdf:
            return max(pdf.page_count, 1)
    except Exception:  # noqa: BLE001 - the parser reports the reason later
        return 1


class Ingestor:
    """Writes prepared files into one open index: doc ids, summaries, dense and BM25 vectors."""

    def __init__(self, index: Index, settings: IndexSettings, gateway: Gateway | None, endpoint: Endpoint | None):
        self.index, self.gateway, self.endpoint = index, gateway, endpoint
        self.model = settings.embedding_model
        self.clip = clipper(self.model)
        self.max_bytes = int(settings.max_file_mb * 2**20)
        self.chunking = chunking(settings)
        self.aliases = settings.filing_aliases

    def needed(self, path: Path, report: IngestReport) -> str | None:
        """The file's SHA-256 if it must be (re)ingested; None when unchanged or unreadable (reported)."""
        try:
            if (size := path.stat().st_size) > self.max_bytes:
                report.skipped.append(
                    SkippedFile(
                        path=str(path),
                        reason=(
                            f"too large: {size / 2**20:.1f} MB > index.max_file_mb={self.max_bytes / 2**20:g} "
                            "(raise it with --set index.max_file_mb=MB)"
                        ),
                    )
                )
                return
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            report.skipped.append(SkippedFile(path=str(path), reason=f"unreadable: {exc.strerror or exc}"))
            return None
        existing = self.index.documents(source_path=str(path.resolve()))
        if existing and all(d.sha256 == sha and d.chunking == self.chunking for d in existing):
            report.unchanged += 1
            return None
        return sha

    async def ingest_file(self, path: Path, sha: str, prepared: list[Prepared] | str, report: IngestReport) -> None:
        if isinstance(prepared, str):
            report.skipped.append(SkippedFile(path=str(path), reason=prepared))
            return
        source = str(path.resolve())
        existing = self.index.documents(source_path=source)
        self.index.remove_source(source)  # a changed file, or leftovers of an interrupted run
        report.replaced += bool(existing)
        for item in prepared:
            await self.ingest_document(path, item, sha, source, report)

    async def ingest_document(self, path: Path, item: Prepared, sha: str, source: str, report: IngestReport) -> None:
        parsed = item.parsed
        doc_id = _doc_id(path, parsed, sha, self.index, source)
        summary, entities = await summarize(parsed, self.gateway, self.endpoint)
        if self.aliases:  # everyday names of its company, from the filing itself (aliases.py)
            entities |= filing_aliases(parsed.text, parsed.company)
        n_pages = len(parsed.page_starts) if parsed.page_starts is not None else None
        document = Document(
            doc_id=doc_id,
            source_path=source,
            sha256=sha,
            doc_type=parsed.doc_type,
            title=parsed.title,
            company=parsed.company,
            period=parsed.period,
            cik=parsed.cik,
            n_pages=n_pages,
            summary=summary,
            entities=entities,
            chunking=self.chunking,
        )
        chunks = [c.model_copy(update={"doc_id": doc_id, "chunk_id": f"{doc_id}{c.chunk_id}"}) for c in item.chunks]
        texts = [embedding_text(document, c, self.clip) for c in chunks]
        found = item.statements.found if item.statements else []
        self.index.add_document(
            document, parsed.text, chunks, texts, self.clip(summary, window(self.model) - 2), statements=found
        )
        report.documents += 1
        report.pages += n_pages or 1
        report.chunks += len(chunks)
        report.over_window += over_window(self.model, texts)
        report.tables += parsed.n_tables
        report.definitions += sum(c.kind == "definition" for c in chunks)
        report.statements += len(found)
        report.line_items += sum(len(region.rows) for region in found)
        report.statements_unread += len(item.statements.unread) if item.statements else 0


class _Rate(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:.2f} pages/s" if speed else "- pages/s")


async def ingest_paths_async(
    paths: Iterable[str | Path],
    settings: IndexSettings,
    gateway: Gateway | None = None,
    summarizer_endpoint: Endpoint | None = None,
    *,
    show_progress: bool = True,
    console: Console | None = None,
    workers: int | None = None,
) -> IngestReport:
    """Ingest files/folders into the index named by `settings`; returns the ingest report. Files are
    parsed and chunked by `workers` processes (default: the CPU cores), embedded and written here."""
    started = time.perf_counter()
    report = IngestReport()
    files = discover(paths, report)
    report.files = len(files)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[name]}"),
    )
    with (
        open_index(settings) as index,
        Progress(*columns, console=console or Console(stderr=True), disable=not show_progress) as progress,
    ):
        ingestor = Ingestor(index, settings, gateway, summarizer_endpoint)
        todo = {path: sha for path in files if (sha := ingestor.needed(path, report))}
        pages = {path: count_pages(path) for path in todo}
        task = progress.add_task("pages", total=sum(pages.values()), name="")
        for path, prepared in prepared_files(list(todo), settings, workers or os.cpu_count() or 1):
            progress.update(task, name=path.name)
            await ingestor.ingest_file(path, todo[path], prepared, report)
            progress.advance(task, pages[path])
    report.seconds = time.perf_counter() - started
    return report


def ingest_paths(
    paths: Iterable[str | Path],
    settings: IndexSettings,
    gateway: Gateway | None = None,
    summarizer_endpoint: Endpoint | None = None,
    **kwargs,
) -> IngestReport:
    """Synchronous `ingest_paths_async` (for scripts and the CLI)."""
    return asyncio.run(ingest_paths_async(paths, settings, gateway, summarizer_endpoint, **kwargs))
