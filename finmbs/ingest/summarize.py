"""Per-document summary (through the gateway when a model is named, else extractive) and key entities."""

from __future__ import annotations

import re
from collections import Counter

from finmbs.config import Endpoint
from finmbs.ingest.parse import ParsedDocument
from finmbs.llm import Gateway
from finmbs.resources import render_prompt

_NAME = r"([A-Z][A-Za-z0-9.,&'’\-]*(?:[ \t]+(?:[A-Z(][A-Za-z0-9.,&'’()\-]*|of|and|de|du|la))*)"
_BORROWER = re.compile(
    _NAME
    + r",?\s+(?:an?\s+[^()“\"]{3,80}?)?\(\s*(?:together with[^)]*?)?(?:the\s+)?[“\"]\s*((?:Parent |Lead |Company )?Borrower|Company)\s*[”\"]"  # noqa: E501 (one regular expression)
)
_AGENT = re.compile(
    _NAME
    + r",?\s+as\s+(?:the\s+)?((?:Administrative|Collateral|Syndication|Documentation|Paying|Co-Syndication|Co-Documentation)\s+Agents?|Agent)\b"  # noqa: E501 (one regular expression)
)
_FACILITY = re.compile(
    r"\b((?:Revolving(?: Credit)?|Term(?: Loan)?(?: [A-Z](?:-\d)?)?|Delayed Draw(?: Term)?|Swing ?line|Letter of Credit|Incremental|Tranche [A-Z0-9]+)\s+(?:Loan\s+)?Facilit(?:y|ies))\b",  # noqa: E501 (one regular expression)
    re.I,
)
_AMOUNT = re.compile(r"(?:US)?\$\s?\d{1,3}(?:,\d{3})+(?:\.\d+)?|\$\s?\d+(?:\.\d+)?\s?(?:million|billion)\b")
_SYMBOLS = re.compile(
    r"trading\s+symbol", re.I
)  # the cover page's "Title of each class | Trading Symbol(s) | ..." table
_TICKER = re.compile(
    r"(?<![\w.$%-])([A-Z]{1,5}(?:\.[A-Z])?)(?:\s+PR\s+[A-Z]{1,2})?[\s|]+(?:The\s+)?(?:New York Stock Exchange|NYSE|Nasdaq|NASDAQ|Chicago Stock Exchange)"  # noqa: E501 (one regular expression)
)
_PREAMBLE = re.compile(
    r"(dated as of|entered into|is made|this [“\"]Agreement[”\"]|annual report|quarterly report)", re.I
)


def _clean_name(name: str) -> str:
    name = re.sub(r"\s+", " ", name).strip(" ,;")
    return re.sub(r"^(?:and|among|by|between|with|the)\s+", "", name, flags=re.I)


def _top(values: list[str], n: int) -> list[str]:
    return [v for v, _ in Counter(v for v in values if v).most_common(n)]


def tickers(text: str) -> list[str]:
    """The trading symbols a filing's cover page lists for its securities ("JNJ", "MGM"; not a note's "JNJ24C")."""
    cover = _SYMBOLS.search(
        text[:20000]
    )  # the symbols follow the column label, or precede it (a label row under the table)
    return (
        list(dict.fromkeys(m[1] for m in _TICKER.finditer(text[max(cover.start() - 1000, 0) : cover.end() + 3000])))
        if cover
        else []
    )


def extract_entities(text: str) -> dict[str, list[str]]:
    """Borrower, agents, facilities, the most frequent currency amounts and the trading symbols (regexes over the
    text)."""
    head = text[:30000]
    entities = {
        "tickers": tickers(text),
        "borrower": _top([_clean_name(m[1]) for m in _BORROWER.finditer(head)], 2),
        "agents": _top([f"{_clean_name(m[1])} ({m[2]})" for m in _AGENT.finditer(head)], 5),
        "facilities": _top([re.sub(r"\s+", " ", m[1]).title() for m in _FACILITY.finditer(text)], 5),
        "amounts": _top([re.sub(r"\s+", " ", m[0]) for m in _AMOUNT.finditer(text)], 8),
    }
    return {key: values for key, values in entities.items() if values}


def extractive_summary(doc: ParsedDocument, entities: dict[str, list[str]]) -> str:
    """Title, the opening (preamble) paragraph and the entities, at most ~1000 characters."""
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n|\n(?=\S)", doc.text[:60000])]
    opening = next((p for p in paras if len(p.split()) >= 20 and _PREAMBLE.search(p)), None)
    opening = opening or next((p for p in paras if len(p.split()) >= 30), "")
    parts = [doc.title, doc.company or "", doc.period or "", opening[:600]]
    parts += [f"{key}: {', '.join(values)}" for key, values in entities.items()]
    return ". ".join(p for p in parts if p)[:1000]


async def summarize(
    doc: ParsedDocument, gateway: Gateway | None = None, endpoint: Endpoint | None = None
) -> tuple[str, dict[str, list[str]]]:
    """(summary, entities) for one document; the model writes the summary when one is given."""
    entities = extract_entities(doc.text)
    if gateway is None or endpoint is None:
        return extractive_summary(doc, entities), entities
    prompt = render_prompt("summarize_document", title=doc.title, excerpt=doc.text[:8000])
    samples = await gateway.generate(
        endpoint, role="summarizer", messages=[{"role": "user", "content": prompt}], max_tokens=300
    )
    text = samples[0].text.strip()
    return (text or extractive_summary(doc, entities)), entities
