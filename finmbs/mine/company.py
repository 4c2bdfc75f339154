"""The company a document is about, so that every mined question can name it: the company ingest
recorded, else the party an agreement's opening names ("... among BROWN-FORMAN CORPORATION ...", or the
cover page's first company line that is no agent or lender)."""

from __future__ import annotations

import re

from finmbs.records import Document

OPENING_CHARS = 3000
_FORM = r"(?:INC|INCORPORATED|CORPORATION|CORP|COMPANY|LLC|L\.?P|N\.?V|PLC|LTD|LIMITED|HOLDINGS|TRUST)\.?"
_AMONG = re.compile(
    r"\b(?:among|between)\s*\n?\s*(?:the\s+)?([A-Z][A-Za-z0-9&.\-’' ]{1,80}?(?:,\s*" + _FORM + r")?)"
    r"(?=\s*(?:,|\(|\bas\b|\band\b|\n|$))"
)
_COVER_LINE = re.compile(r"^([A-Z][A-Z0-9&.\-’' ]{1,60},?\s*" + _FORM + r"),?$", re.MULTILINE)
_NOT_BORROWER = re.compile(
    r"\b(BANK|AGENT|LENDERS?|ARRANGER|SECURITIES|CAPITAL MARKETS|N\.A\.|BORROWERS?|COMPANY PARTY)\b"
    r"|^(?:the\s+)?(?:Company|Borrowers?|Lenders?|Parent|Holdings)$",
    re.IGNORECASE,
)


def _tidy(name: str) -> str:
    """An upper-case name in title case ("BROWN-FORMAN CORPORATION" -> "Brown-Forman Corporation")."""
    name = " ".join(name.split()).strip(" ,")
    if name.isupper():
        name = re.sub(r"[A-Za-z][A-Za-z’']*", lambda m: m.group(0).capitalize(), name.lower())
    return name


def _named(name: str) -> bool:
    """Whether every word of `name` is capitalized, as a name's are ("Persons identified" is no name)."""
    return all(
        w[0].isupper() or w[0].isdigit() or w in ("of", "and", "&", "the", "de") for w in name.replace(",", " ").split()
    )


def document_company(doc: Document, text: str) -> str | None:
    """The company of `doc`: as ingested, else the first party its opening names that is no agent or lender."""
    if doc.company and doc.company.strip():
        return doc.company.strip()
    opening = text[:OPENING_CHARS]
    for match in _AMONG.finditer(opening):
        name = match.group(1).strip()
        if len(name) >= 3 and not _NOT_BORROWER.search(name) and _named(name):
            return _tidy(name)
    lines = opening.split("\n")
    for i, line in enumerate(lines):
        found = _COVER_LINE.match(line.strip())
        after = lines[i + 1].strip().lower() if i + 1 < len(lines) else ""
        if (
            found
            and not _NOT_BORROWER.search(found.group(1))
            and not (after.startswith("as ") and "borrower" not in after)
        ):
            return _tidy(found.group(1))
    return None
