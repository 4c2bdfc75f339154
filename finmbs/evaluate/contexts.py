"""The prompt for one question in one mode: closed-book, oracle (gold evidence) or retrieval (finmbs index)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from finmbs.config import IndexSettings
from finmbs.errors import FinmbsError
from finmbs.evaluate import EvalError
from finmbs.evaluate.benchmarks import Benchmark, Mode
from finmbs.evaluate.loaders import EvalItem, Evidence
from finmbs.ingest import outermost
from finmbs.records import Chunk
from finmbs.resources import render_prompt

Retriever = Callable[[str, str | None], list[str]]


class IndexRetriever:
    """Top-k passages from the finmbs index for a question (the same hybrid search as `finmbs search`:
    dense + BM25 fused in Qdrant, one hit per page, the question's company first), remembering which
    (document, page) each question retrieved."""

    def __init__(self, index, k: int):
        self.index, self.k = index, k
        self.retrieved: dict[str, list[tuple[str | None, int | None]]] = {}

    def __call__(self, query: str, company: str | None) -> list[str]:
        hits = self.index.search(query, self.k, company=company) if company else []
        hits = hits or self.index.search(query, self.k)
        self.retrieved[query] = [(hit.chunk.doc_id, hit.chunk.page) for hit in hits]
        return [passage(window) for window in windows(hits)]

    def found_evidence(self, item: EvalItem) -> bool | None:
        """Whether a retrieved passage lies on an evidence page (None: no page-level evidence, or not asked)."""
        gold = {(e.doc_name, e.page + 1) for e in item.evidence if e.doc_name and e.page is not None}
        if not gold or item.question not in self.retrieved:
            return None
        return any(hit in gold for hit in self.retrieved[item.question])


class SkipItem(FinmbsError):
    """This question cannot be asked in this mode (e.g. its evidence PDF is missing)."""


@lru_cache(maxsize=256)
def pdf_page_text(path: Path, page: int) -> str:
    """Text of one zero-indexed PDF page, through pymupdf."""
    import pymupdf

    with pymupdf.open(path) as doc:
        if not 0 <= page < doc.page_count:
            raise SkipItem(f"evidence page {page} is outside {path.name} ({doc.page_count} pages)")
        return doc.load_page(page).get_text()


def evidence_text(evidence: Evidence, pdf_dir: Path | None) -> str:
    """The evidence passage, or with `pdf_dir` the whole PDF page it sits on."""
    if pdf_dir is None:
        return evidence.text or evidence.full_page
    path = pdf_dir / f"{evidence.doc_name}.pdf"
    if not path.is_file():
        raise SkipItem(f"evidence PDF {path.name} not found in {pdf_dir}")
    if evidence.page is None:
        raise SkipItem(f"evidence in {path.name} has no page number")
    return pdf_page_text(path, evidence.page)


def oracle_context(item: EvalItem, pdf_dir: Path | None) -> str:
    """The benchmark's own context (SecQue), else the gold evidence, each passage under its source."""
    if item.context:
        return item.context
    if not item.evidence:
        raise SkipItem("no evidence or context to put in the oracle prompt")
    parts = []
    for evidence in item.evidence:
        page = "" if evidence.page is None else f", page {evidence.page + 1}"
        parts.append(f"[{evidence.doc_name or 'document'}{page}]\n{evidence_text(evidence, pdf_dir).strip()}")
    return "\n\n".join(parts)


def windows(hits) -> list[Chunk]:
    """Each hit's small-to-big window (its enclosing table or section, `index.context_tokens`), or the chunk
    itself; a window inside an earlier one is left out, so no passage repeats another's text."""
    return outermost(hit.context or hit.chunk for hit in hits)


def passage(chunk: Chunk) -> str:
    """A retrieved chunk under its source: document, section and page."""
    where = [
        chunk.doc_id or "document",
        chunk.section_path,
        f"page {chunk.page}" if chunk.page is not None else "",
    ]  # 1-based already
    return f"[{', '.join(w for w in where if w)}]\n{chunk.text.strip()}"


@contextmanager
def index_retriever(settings: IndexSettings, k: int) -> Iterator[IndexRetriever]:
    """Top-k chunks from the finmbs index for a question: from its company's documents when the index
    has any, else from the whole index."""
    try:
        from finmbs.ingest import open_index
    except ImportError as exc:
        raise EvalError(f"retrieval mode needs the finmbs index (finmbs ingest): {exc}") from None
    with open_index(settings) as index:
        yield IndexRetriever(index, k)


def build_prompt(
    bench: Benchmark, item: EvalItem, mode: Mode, *, pdf_dir: Path | None = None, retriever: Retriever | None = None
) -> str:
    """The user prompt for `item` in `mode`, from the benchmark's template for that mode."""
    template = bench.prompts[mode]
    if mode == "closed-book":
        return render_prompt(template, question=item.question)
    if mode == "oracle":
        context = oracle_context(item, pdf_dir)
    else:
        if retriever is None:
            raise SkipItem("retrieval mode without an index")
        passages = retriever(item.question, item.company)
        if not passages:
            raise SkipItem("the index returned no passage")
        context = "\n\n".join(passages)
    return render_prompt(template, question=item.question, context=context)
