"""Ingestion and retrieval: parse filings and agreements, chunk by structure, index in Qdrant, search.

The names are loaded on first use (PEP 562), so a light user of one submodule (the program sandbox's
worker reads `verbatim` alone) does not import the index and parser stack."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "Hit": "index",
    "Index": "index",
    "open_index": "index",
    "shared_index": "index",
    "outermost": "index",
    "IngestReport": "pipeline",
    "SkippedFile": "pipeline",
    "ingest_paths": "pipeline",
    "ingest_paths_async": "pipeline",
    "find_verbatim": "verbatim",
    "normalize_ws": "verbatim",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'finmbs.ingest' has no attribute {name!r}")
    return getattr(import_module(f"finmbs.ingest.{_WHERE[name]}"), name)
