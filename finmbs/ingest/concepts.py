"""Finance concepts a query names without naming where their figures are reported (`concepts.yaml`).

"Does 3M have a healthy quick ratio?" holds neither "balance sheet" nor "total current liabilities", so
BM25 cannot find the statement with its inputs and a small embedder ranks prose about liquidity above
it. `expansion` returns, for each concept a query names, the statement and line items an analyst reads
for it; search adds them to its BM25 query and fuses one more dense search for them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from finmbs.errors import FinmbsError

CONCEPTS = Path(__file__).with_name("concepts.yaml")


@dataclass(frozen=True)
class Concept:
    when: re.Pattern[str]  # the query names the concept
    where: str  # where its figures are reported: statement and line items


class ConceptError(FinmbsError, ValueError):
    """The concept table is malformed (names the file and the entry)."""


def load_concepts(path: Path) -> tuple[Concept, ...]:
    rows = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(rows, list):
        raise ConceptError(f"{path}: a list of {{when, where}} entries expected")
    found = []
    for i, row in enumerate(rows, 1):
        if not (
            isinstance(row, dict)
            and set(row) == {"when", "where"}
            and all(isinstance(v, str) and v.strip() for v in row.values())
        ):
            raise ConceptError(f"{path}: entry {i}: needs exactly the text fields 'when' and 'where', got {row!r}")
        try:
            found.append(Concept(re.compile(row["when"], re.I), row["where"].strip()))
        except re.error as exc:
            raise ConceptError(f"{path}: entry {i}: 'when' is not a regular expression: {exc}") from None
    return tuple(found)


@cache
def concepts() -> tuple[Concept, ...]:
    return load_concepts(CONCEPTS)


def expansion(query: str) -> str:
    """Where the figures of every concept `query` names are reported ('' when it names none)."""
    return " ".join(c.where for c in concepts() if c.when.search(query))
