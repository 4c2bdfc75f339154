"""Whitespace-normalized verbatim proof: is a passage copied out of a document, and where."""

from __future__ import annotations

import re

_WS = re.compile(r"\s+")


def normalize_ws(text: str) -> str:
    """Collapse every whitespace run (including non-breaking spaces) to one space and strip."""
    return _WS.sub(" ", text).strip()


def find_verbatim(passage: str, document_text: str) -> tuple[int, int] | None:
    """(start, end) of `passage` in `document_text`, equal up to whitespace runs; None if absent."""
    words = passage.split()
    if not words:
        return None
    pattern = r"\s++".join(re.escape(word) for word in words)  # a word never starts with whitespace: linear
    match = re.search(pattern, document_text)
    return (match.start(), match.end()) if match else None
