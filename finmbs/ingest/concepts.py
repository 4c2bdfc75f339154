"""Finance concepts a query names without naming where their figures are reported (`concepts.yaml`).

"Does 3M have a healthy quick ratio?" holds neither "balance sheet" nor "total current liabilities", so
BM25 cannot find the statement with its inputs and a small embedder ranks prose about liquidity above
it. `expansion` returns, for each concept a query names, the statement and line items an analyst reads
for it; search adds them to its BM25 query and fuses one more dense search for them.

Every entry names its concept in a few words (`concept`). Re-grounding reads that name as the query for
the analogous provision of an unseen document (`named_concept`): Brown-Forman's default interest clause
("overdue principal ... bears interest ... 2% per annum plus the rate otherwise applicable") quotes no
defined term, and searched with its own words the other agreements' default rates were not among their
nearest chunks. A contract provision has no statement to be reported in: its entry has no `where`."""

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
    name: str  # the concept in a few words: what to search an unseen document for
    when: re.Pattern[str]  # the query names the concept
    where: str = ""  # where its figures are reported: statement and line items ('' for a contract provision)


class ConceptError(FinmbsError, ValueError):
    """The concept table is malformed (names the file and the entry)."""


FIELDS = {"concept", "when", "where"}


def load_concepts(path: Path) -> tuple[Concept, ...]:
    rows = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(rows, list):
        raise ConceptError(f"{path}: a list of {{concept, when, where}} entries expected")
    found = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not set(row) <= FIELDS or not all(isinstance(v, str) for v in row.values()):
            raise ConceptError(
                f"{path}: entry {i}: needs the text fields 'concept' and 'when' (and 'where' for a reported "
                f"figure), got {row!r}"
            )
        name = " ".join(row.get("concept", "").split())
        if not name:
            raise ConceptError(f"{path}: entry {i}: names no concept (its .concept.: a few words), got {row!r}")
        if not row.get("when", "").strip():
            raise ConceptError(f"{path}: entry {i} ({name}): has no 'when' (the words a query names it by)")
        try:
            found.append(Concept(name, re.compile(row["when"], re.I), " ".join(row.get("where", "").split())))
        except re.error as exc:
            raise ConceptError(f"{path}: entry {i} ({name}): 'when' is not a regular expression: {exc}") from None
    return tuple(found)


@cache
def concepts() -> tuple[Concept, ...]:
    return load_concepts(CONCEPTS)


def expansion(query: str) -> str:
    """Where the figures of every concept `query` names are reported ('' when it names none)."""
    return " ".join(c.where for c in concepts() if c.where and c.when.search(query))


def named_concept(question: str, passage: str = "", table: tuple[Concept, ...] | None = None) -> str | None:
    """The concept a problem asks about: of the entries that match its question or passage, the one
    matched most often in the question, then in the passage (the earlier entry on a tie); None when none
    matches. The question comes first: Alphatec's default-rate passage also names "Required Lenders"."""
    scored = [
        ((len(c.when.findall(question)), len(c.when.findall(passage))), -i, c.name)
        for i, c in enumerate(concepts() if table is None else table)
    ]
    best = max((s for s in scored if s[0] != (0, 0)), default=None)
    return best[2] if best else None
