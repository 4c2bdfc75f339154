"""Everyday names of a company, read from its own filing (`index.filing_aliases`, finmbs's, not in the paper).

A question says "JnJ", "J&J" or "MGM" where the filing's cover says "Johnson & Johnson" or "MGM Resorts
International". Three sources, all in the filing itself, never a table of companies:

- the listing: "(NYSE: JNJ)", "traded on the New York Stock Exchange under the symbol "MGM"";
- the short names the filing defines for itself: 'Johnson & Johnson ("J&J")', '(the "Company" or "Walmart")',
  'the terms "Coca-Cola," "Company," "we" ... mean';
- the legal name's initials, "and" or "&" written as "n" or "&": "Johnson & Johnson" -> "JNJ", "J&J" (three
  characters or more: two letters are too often something else).

The index counts a name claimed by two of its companies as no one's (`query.alias_table`), and says so.
"""

from __future__ import annotations

import re

from finmbs.ingest.query import LEGAL_FORMS, company_words

ALIAS_CHARS = 200_000  # how far into a filing its defined names and listing are looked for
_EXCHANGE = r"(?:NYSE(?:\s+American|\s+Arca)?|NASDAQ|Nasdaq(?:\s+Global\s+(?:Select\s+)?Market)?)"
_LISTED = re.compile(
    rf"\(\s*{_EXCHANGE}\s*:\s*([A-Z]{{1,5}}(?:\.[A-Z])?)\s*\)"
    r"|(?:under|with)\s+the\s+(?:ticker\s+|trading\s+)?symbols?\s+[“\"]?([A-Z]{1,5}(?:\.[A-Z])?)\b"
)
_Q = r"[“\"]"
_UNQ = r"[”\"]"
_NAME = r"([A-Z0-9][\w&.'’-]*(?:\s+[A-Z0-9&][\w&.'’-]*){0,3}?),?"
# 'the "Company" or "J&J"' / '"Walmart," the "Company"' / 'the terms "Coca-Cola," "Company," "we"'
_BESIDE_COMPANY = re.compile(
    rf"{_Q}Company,?{_UNQ},?\s*(?:or|and|,)\s*(?:the\s+)?{_Q}{_NAME}{_UNQ}"
    rf"|{_Q}{_NAME}{_UNQ},?\s*(?:or|and|,)?\s*(?:the\s+)?{_Q}Company,?{_UNQ}"
)
# words a filing defines that name no company on their own
_NOT_NAMES = {"company", "we", "us", "our", "registrant", "corporation", "group", "parent", "issuer", "guarantor"}


def _defined_after(name: str) -> re.Pattern[str] | None:
    """'Johnson & Johnson ("J&J")', 'MGM Resorts International (together with its subsidiaries, "MGM")': the
    short name a filing defines right after its legal name."""
    words = [re.escape(w) for w in name.split()]
    if not words:
        return None
    return re.compile(
        r"\b" + r"[\s,]+".join(words) + rf"[^()\n]{{0,30}}\(\s*(?:[^()“”\"]{{0,60}}?,\s*)?(?:the\s+)?{_Q}{_NAME}{_UNQ}"
    )


def listed_symbols(text: str) -> list[str]:
    """Trading symbols the filing gives its listing in prose: "(NYSE: JNJ)", "under the symbol "MGM""."""
    return list(dict.fromkeys(m[1] or m[2] for m in _LISTED.finditer(text[:ALIAS_CHARS])))


def initials(name: str | None) -> list[str]:
    """Names formed from a legal name's initials, legal forms dropped: 'Johnson & Johnson' -> ['JNJ', 'J&J'];
    'American Water Works Company, Inc.' -> ['AWW']; none under three characters or from one word."""
    words = [w for w in company_words(name) if w not in LEGAL_FORMS or w in ("&", "and")]
    words = words[1:] if words[:1] == ["the"] else words
    while words and words[-1] in ("&", "and"):  # "JPMorgan Chase & Co.": the legal form went, its "&" too
        words.pop()
    content = [w for w in words if w not in ("&", "and")]
    if len(content) < 2:
        return []
    joined = [
        "".join(("N" if w in ("&", "and") else w[0].upper()) for w in words),
        "".join(("&" if w in ("&", "and") else w[0].upper()) for w in words),
    ]
    return [n for n in dict.fromkeys(joined) if len(n) >= 3]


def _usable(short: str, company: str | None) -> bool:
    words = short.lower().replace(",", " ").split()
    return bool(words) and not set(words) <= _NOT_NAMES | LEGAL_FORMS and short.lower() != (company or "").lower()


def defined_names(text: str, company: str | None) -> list[str]:
    """The short names a filing defines for itself (see the module's docstring)."""
    head = text[:ALIAS_CHARS]
    found = [m[1] or m[2] for m in _BESIDE_COMPANY.finditer(head)]
    if company and (after := _defined_after(re.sub(r"[,.]?\s*$", "", company))):
        found += [m[1] for m in after.finditer(head)]
    return [n for n in dict.fromkeys(" ".join(f.split()).strip(" ,") for f in found) if _usable(n, company)]


def filing_aliases(text: str, company: str | None) -> dict[str, list[str]]:
    """The entities a document record keeps for recognising its company by an everyday name: `listed` (the
    trading symbols of its listing in prose) and `aliases` (defined short names and the legal name's initials)."""
    names = list(dict.fromkeys(defined_names(text, company) + initials(company)))
    found = {"listed": listed_symbols(text), "aliases": names}
    return {key: values for key, values in found.items() if values}
