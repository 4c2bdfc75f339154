"""Ingestion and retrieval: parse filings and agreements, chunk by structure, index in Qdrant, search."""

from finmbs.ingest.index import Hit, Index, open_index
from finmbs.ingest.pipeline import IngestReport, SkippedFile, ingest_paths, ingest_paths_async
from finmbs.ingest.verbatim import find_verbatim, normalize_ws

__all__ = [
    "Hit", "Index", "IngestReport", "SkippedFile", "find_verbatim", "ingest_paths", "ingest_paths_async",
    "normalize_ws", "open_index",
]
