"""Primary financial statements as first-class items (`index.statements`, finmbs's, not in the paper).

At ingest, each region of a document (a PDF page; elsewhere a Markdown table with the text just above it)
is recognised as a primary statement from its title near the top ("Consolidated Balance Sheets",
"Statements of Cash Flows") and from the line-item vocabulary of its rows ("Total current assets",
"Investing activities"), never from a list of companies. A recognised region keeps its kind, the periods
of its columns and its units, and its rows read as line items (label, one value per period, offsets into
the document text); a row whose label names a line item an analyst asks about ("Inventories", "Accounts
payable") carries that item's key. Inline-XBRL facts, where the filing has them, name their rows too
(`us-gaap:AccountsPayableCurrent` -> "accounts payable").

At search, `statement_query` maps a question's statement words ("balance sheet", "P&L") and line-item
words ("D&A", "net earnings") to those kinds and keys; the index adds one candidate list per statement
to its fusion (`Index._also`).

A region whose title and vocabulary say "statement" but whose rows cannot be read (a scanned page, a
rotated table, merged cells) is not tagged: its chunks stay ordinary chunks, and the ingest report counts it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pydantic import Field

from finmbs.records import Record

BALANCE, INCOME, COMPREHENSIVE, CASH_FLOW, EQUITY = (
    "balance_sheet",
    "income_statement",
    "comprehensive_income",
    "cash_flow",
    "equity",
)
KINDS = (BALANCE, INCOME, COMPREHENSIVE, CASH_FLOW, EQUITY)

_OF = r"statements?\s+of\s+(?:consolidated\s+|condensed\s+|combined\s+)*"
_OWNERS = r"(?:stockholders|shareholders|shareowners|owners|members|partners)['’]?\s*"
# A statement's title, as US GAAP and IFRS filings word it ("CONSOLIDATED STATEMENTS OF EARNINGS",
# "Statement of Financial Position"); comprehensive income alone is its own kind, "operations and
# comprehensive income" is the income statement.
TITLES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (BALANCE, re.compile(rf"balance\s+sheets?|{_OF}financial\s+(?:position|condition)", re.I)),
    (COMPREHENSIVE, re.compile(rf"{_OF}comprehensive\s+(?:income|earnings|loss|\(loss\)\s*income)", re.I)),
    (
        INCOME,
        re.compile(
            rf"{_OF}(?:operations|income|earnings|\(?loss\)?|profit\s+(?:and|or)\s+loss)|income\s+statements?|"
            r"profit\s+and\s+loss\s+(?:statement|account)",
            re.I,
        ),
    ),
    (CASH_FLOW, re.compile(rf"{_OF}cash\s+flows?|cash\s+flows?\s+statements?", re.I)),
    (EQUITY, re.compile(rf"{_OF}(?:changes\s+in\s+)?(?:{_OWNERS})?(?:equity|deficit)|{_OF}{_OWNERS}investment", re.I)),
)

# The line-item words each kind's rows use (a region needs `MIN_VOCABULARY` different ones): a table of
# contents or an auditor's letter names the statement but holds none of its rows.
VOCABULARY: dict[str, tuple[str, ...]] = {
    BALANCE: (
        r"total\s+assets",
        r"total\s+liabilities",
        r"current\s+assets",
        r"current\s+liabilities",
        r"inventor(?:y|ies)",
        r"accounts\s+payable",
        r"receivables?",
        r"retained\s+earnings|accumulated\s+deficit|reinvested\s+earnings",
        rf"{_OWNERS}equity|total\s+equity",
        r"property(?:,|\s+and)?\s+(?:plant\s+)?(?:and\s+)?equipment",
        r"goodwill",
        r"cash\s+and\s+(?:cash\s+)?equivalents",
    ),
    INCOME: (
        r"net\s+sales|revenues?|total\s+sales",
        r"cost\s+of\s+(?:sales|revenues?|goods|products)",
        r"gross\s+(?:profit|margin)",
        r"operating\s+(?:income|profit|loss|earnings|expenses)|income\s+from\s+operations",
        r"net\s+(?:income|earnings|loss)",
        r"per\s+(?:common\s+)?share",
        r"income\s+tax",
        r"interest\s+expense|interest\s+income",
        r"selling,?\s+general",
        r"diluted",
    ),
    COMPREHENSIVE: (
        r"net\s+(?:income|earnings|loss)",
        r"other\s+comprehensive",
        r"comprehensive\s+(?:income|loss)",
        r"translation",
        r"tax",
    ),
    CASH_FLOW: (
        r"operating\s+activities",
        r"investing\s+activities",
        r"financing\s+activities",
        r"depreciation",
        r"end\s+of\s+(?:the\s+)?(?:year|period)|at\s+end",
        r"capital\s+expenditures|(?:purchases?|additions?)\s+(?:of|to)\s+property",
        r"dividends",
        r"(?:stock|share)[- ]based\s+compensation",
    ),
    EQUITY: (
        r"retained\s+earnings|accumulated\s+deficit|reinvested\s+earnings",
        r"paid[- ]in\s+capital|capital\s+in\s+excess",
        r"treasury",
        r"accumulated\s+other\s+comprehensive",
        r"dividends",
        r"balances?,?\s+(?:at\s+)?(?:beginning|end|[A-Z][a-z]+\s+\d)",
        r"common\s+stock",
    ),
}
_VOCABULARY = {kind: [re.compile(w, re.I) for w in words] for kind, words in VOCABULARY.items()}
MIN_VOCABULARY = 3  # different line-item words of its kind a statement region holds
MIN_ROWS = 4  # rows read as (label, values) for a statement to count as read
TITLE_LINES = 12  # the title is among the region's first lines (non-empty)
TITLE_WORDS = 16  # ... on a line of at most this many words (a heading, not a sentence about the statement)


@dataclass(frozen=True)
class ItemWords:
    """A line item an analyst asks about: its key, the statements that report it, and the words that name
    it in a row label, an iXBRL concept (split at its capitals) or a question."""

    key: str
    kinds: tuple[str, ...]
    words: re.Pattern[str]


def _item(key: str, kinds: tuple[str, ...], words: str) -> ItemWords:
    return ItemWords(key, kinds, re.compile(words, re.I))


# General US GAAP / IFRS line items (no company's own wording). Order matters only for reading.
LINE_ITEMS: tuple[ItemWords, ...] = (
    _item("cash and equivalents", (BALANCE, CASH_FLOW), r"\bcash\s+and\s+(?:cash\s+)?equivalents\b"),
    _item("inventories", (BALANCE,), r"\binventor(?:y|ies)\b"),
    _item("accounts receivable", (BALANCE,), r"\b(?:accounts|trade)\s+(?:and\s+\w+\s+)?receivables?\b|\breceivables\b"),
    _item("accounts payable", (BALANCE,), r"\b(?:accounts|trade)\s+payables?\b"),
    _item("current assets", (BALANCE,), r"\b(?<!other\s)current\s+assets\b"),
    _item("current liabilities", (BALANCE,), r"\b(?<!other\s)current\s+liabilities\b"),
    _item("total assets", (BALANCE,), r"\btotal\s+assets\b"),
    _item("total liabilities", (BALANCE,), r"\btotal\s+liabilities\b"),
    _item(
        "property plant and equipment",
        (BALANCE,),
        r"\bproperty(?:,|\s+and)?\s+(?:plant\s*,?\s+)?(?:and\s+)?equipment\b|\bpp&e\b|\bfixed\s+assets\b",
    ),
    _item("goodwill", (BALANCE,), r"\bgoodwill\b"),
    _item("long-term debt", (BALANCE,), r"\blong[- ]term\s+(?:debt|borrowings)\b"),
    _item(
        "short-term debt",
        (BALANCE,),
        r"\bshort[- ]term\s+(?:debt|borrowings)\b|\bcurrent\s+(?:portion|maturities)\s+of\s+long[- ]term\b"
        r"|\bcommercial\s+paper\b",
    ),
    _item("shareholders equity", (BALANCE, EQUITY), rf"\b{_OWNERS}equity\b|\btotal\s+equity\b"),
    _item("retained earnings", (BALANCE, EQUITY), r"\bretained\s+earnings\b|\baccumulated\s+deficit\b"),
    _item(
        "revenue",
        (INCOME,),
        r"(?<!of\s)\b(?:revenues?|(?:net\s+|total\s+)?sales)\b(?!\s+and\s+marketing|\s+tax)|\btop[- ]line\b",
    ),
    _item("cost of sales", (INCOME,), r"\bcost\s+of\s+(?:sales|revenues?|goods\s+sold|products\s+sold)\b|\bcogs\b"),
    _item("gross profit", (INCOME,), r"\bgross\s+(?:profit|margin)\b"),
    _item(
        "operating income",
        (INCOME,),
        r"\boperating\s+(?:income|profit|loss|earnings)\b|\b(?:income|earnings)\s+from\s+operations\b",
    ),
    _item("selling general and administrative", (INCOME,), r"\bselling,?\s+general\b|\bsg&a\b"),
    _item("research and development", (INCOME,), r"\bresearch\s+and\s+development\b|\br&d\b"),
    _item("interest expense", (INCOME,), r"\binterest\s+expense\b"),
    _item("income taxes", (INCOME,), r"\bincome\s+tax(?:es)?\b|\bprovision\s+for\s+taxes\b"),
    _item("net income", (INCOME, CASH_FLOW), r"\bnet\s+(?:income|earnings|loss|profit)\b|\bbottom[- ]line\b"),
    _item("earnings per share", (INCOME,), r"\b(?:earnings|income|loss)\s+per\s+(?:common\s+)?share\b|\beps\b"),
    _item("depreciation and amortization", (CASH_FLOW, INCOME), r"\bdepreciation\b|\bd\s?&\s?a\b|\bamortization\b"),
    _item(
        "operating cash flow",
        (CASH_FLOW,),
        r"\boperating\s+activities\b|\bcash\s+(?:flows?\s+)?(?:provided\s+by|from|generated\s+by|used\s+in)\s+operat|\boperating\s+cash\s+flows?\b",
    ),
    _item(
        "capital expenditures",
        (CASH_FLOW,),
        r"\bcapital\s+expenditures?\b|\bcapex\b|\b(?:purchases?|additions?|payments?)\s+(?:of|to|for)\s+property\b",
    ),
    _item("dividends", (CASH_FLOW, EQUITY), r"\bdividends?\b"),
    _item(
        "share repurchases",
        (CASH_FLOW, EQUITY),
        r"\brepurchases?\s+of\s+(?:common\s+)?(?:stock|shares)\b|\bshare\s+repurchases?\b|\bbuybacks?\b|\bpurchases?\s+of\s+treasury\b",
    ),
)
_ITEMS = {item.key: item for item in LINE_ITEMS}

# Question words that name a statement ("Basing your judgments off of the balance sheet", "the P&L").
STATEMENT_WORDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (BALANCE, re.compile(r"balance\s+sheets?|statements?\s+of\s+financial\s+(?:position|condition)", re.I)),
    (
        INCOME,
        re.compile(
            r"income\s+statements?|\bp\s?&\s?l\b|profit\s+(?:and|&)\s+loss|"
            r"statements?\s+of\s+(?:consolidated\s+)?(?:operations|income|earnings)",
            re.I,
        ),
    ),
    (COMPREHENSIVE, re.compile(r"comprehensive\s+income\s+statement|statements?\s+of\s+comprehensive", re.I)),
    (CASH_FLOW, re.compile(r"cash\s+flows?\s+statements?|statements?\s+of\s+(?:consolidated\s+)?cash\s+flows?", re.I)),
    (EQUITY, re.compile(rf"statements?\s+of\s+(?:changes\s+in\s+)?(?:{_OWNERS})?equity|equity\s+statement", re.I)),
)


class LineItem(Record):
    """One row of a statement: its label, one value per period column (as written), where it is."""

    label: str
    values: list[str]
    char_start: int
    char_end: int
    items: list[str] = Field(default_factory=list)  # keys of LINE_ITEMS the label (or its iXBRL concept) names
    concept: str | None = None  # the iXBRL concept that tags the row's figures, where the filing has them


class StatementRegion(Record):
    """A primary statement found in a document: kind, title, periods, units and its rows."""

    kind: str
    title: str
    page: int | None
    char_start: int
    char_end: int
    periods: list[str] = Field(default_factory=list)
    units: str | None = None
    rows: list[LineItem] = Field(default_factory=list)


@dataclass
class Statements:
    """What `find_statements` read from one document: the statements, and the regions that looked like one
    (title and vocabulary) but whose rows could not be read (ordinary chunks; counted in the ingest report)."""

    found: list[StatementRegion]
    unread: list[StatementRegion]


_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_DATE = re.compile(rf"\b{_MONTH}\s+\d{{1,2}},?\s+(?:19|20)\d\d\b")
_YEAR = re.compile(r"(?:19|20)\d\d")
_UNITS = re.compile(
    r"\(\s*((?:(?:amounts|dollars|\$|u\.s\.\s+dollars|usd|€|eur)\s+)?in\s+(?:millions|thousands|billions)[^)\n]{0,60})\)"
    r"|(?<!\w)((?:\$\s*)?in\s+(?:millions|thousands|billions)(?:,\s*except[^\n|]{0,50})?)",
    re.I,
)
# A figure cell: "5,409", "$ 5,409", "(1,234)", "12.5%", "—"; a row's values are the run of them at its end.
_VALUE = r"(?:\(?\$?\s?\(?\d[\d,]*(?:\.\d+)?\)?%?|[—–-]{1,2}|\$\s?[—–-])"
_PLAIN_ROW = re.compile(rf"^(?P<label>\S.*?[A-Za-z)\]:.][^\d$(]*?)(?P<values>(?:\s+{_VALUE})+)\s*$")
_CELL_VALUE = re.compile(rf"^{_VALUE}(?:\s+{_VALUE})*$")
_NOT_A_LABEL = re.compile(r"^\W*(?:page\s+\d+|note\s+\d+|\d+)\W*$", re.I)


def _lines(text: str, start: int, end: int) -> Iterator[tuple[int, int, str]]:
    """(start, end, line) of each non-empty line of text[start:end], offsets into `text`."""
    for match in re.finditer(r"[^\n]+", text[start:end]):
        if match[0].strip():
            yield start + match.start(), start + match.end(), match[0]


def keys_named(text: str) -> list[str]:
    """The LINE_ITEMS keys a label, an iXBRL concept or a question names."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text.split(":")[-1]) if ":" in text else text
    return [item.key for item in LINE_ITEMS if item.words.search(spaced)]


def read_row(line: str) -> tuple[str, list[str]] | None:
    """(label, values) of one statement row, a Markdown table row or a plain text line; None when the line
    is not a labelled row of figures (a heading, a column header, prose)."""
    stripped = line.strip()
    if stripped.startswith("|"):
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        label = next((c for c in cells if c), "")
        values = [c for c in cells[cells.index(label) + 1 :] if c] if label else []
        if not re.search(r"[A-Za-z]", label) or not values or not all(_CELL_VALUE.match(v) for v in values):
            return None
        values = [v for cell in values for v in re.findall(_VALUE, cell)]
    else:
        match = _PLAIN_ROW.match(stripped)
        if not match:
            return None
        label, values = match["label"], re.findall(_VALUE, match["values"])
    label = " ".join(label.split()).strip(" .:$")
    digits = [v for v in values if re.search(r"\d", v)]
    if len(label) < 3 or _NOT_A_LABEL.match(label) or not digits or len(label.split()) > 25:
        return None
    if all(_YEAR.fullmatch(v.strip("()$ ")) for v in digits):  # a column header: "2019 2018"
        return None
    if len(_DATE.findall(stripped)) >= 2 or re.search(rf"{_MONTH}$", label):  # "February 2, 2019 February 3, 2018"
        return None
    return label, [v.replace(" ", "") for v in values]


MAX_COLUMNS = 8  # value-only lines gathered under one label, at most


def read_rows(lines: Sequence[tuple[int, int, str]]) -> Iterator[tuple[int, int, str, list[str]]]:
    """(start, end, label, values) of each row among a region's lines. A row is one line ("Inventories 5,409
    5,209", a Markdown row), or, where the text layer puts each cell on its own line (pymupdf reading a
    statement laid out in columns), a label line followed by lines of figures only; a label wrapped over two
    lines ("Changes in operating assets ..., and" / "currency") is joined."""
    label: tuple[int, str] | None = None  # a label line still waiting for its figures
    values: list[str] = []
    last_end = 0

    def flush() -> Iterator[tuple[int, int, str, list[str]]]:
        if label is not None and values and (row := read_row(f"{label[1]} {' '.join(values)}")):
            yield label[0], last_end, row[0], row[1]

    for s, e, line in lines:
        stripped = line.strip()
        if values and len(values) < MAX_COLUMNS and _CELL_VALUE.match(stripped):
            values += re.findall(_VALUE, stripped)
            last_end = e
            continue
        if _CELL_VALUE.match(stripped) and label is not None and not values:
            values, last_end = re.findall(_VALUE, stripped), e
            continue
        yield from flush()
        values = []
        if (row := read_row(line)) is not None:
            label = None
            yield s, e, row[0], row[1]
        elif re.search(r"[A-Za-z]", stripped) and not stripped.startswith("|"):
            wraps = label is not None and (stripped[:1].islower() or re.search(r"(?:,|\band|\bof|\bfor)$", label[1]))
            label = (label[0], f"{label[1]} {stripped}") if wraps and label is not None else (s, stripped)
        else:
            label = None
    yield from flush()


def _heading(line: str) -> tuple[str, str] | None:
    """(kind, title) when a line is a heading that titles a statement: short, not a sentence about one."""
    text = " ".join(line.replace("|", " ").split())
    if len(text.split()) > TITLE_WORDS or re.search(r"[a-z]\.\s+[A-Z]|\bsee\b|\brefer\b", text):
        return None
    return next(((kind, text) for kind, pattern in TITLES if pattern.search(text)), None)


def _title(lines: list[tuple[int, int, str]]) -> tuple[str, str] | None:
    """(kind, title line) of the first heading among the region's first lines that titles a statement."""
    return next((found for _, _, line in lines[:TITLE_LINES] if (found := _heading(line))), None)


def _segments(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """A region cut before each statement title below its first lines: an earnings release prints its cash
    flows and its balance sheet on one page."""
    lines = list(_lines(text, start, end))
    cuts = [s for s, _, line in lines[TITLE_LINES:] if _heading(line)]
    bounds = [start, *cuts, end]
    yield from zip(bounds, bounds[1:])


def _vocabulary(kind: str, body: str) -> int:
    return sum(1 for word in _VOCABULARY[kind] if word.search(body))


def _periods(head: str) -> list[str]:
    """The period columns a statement's head (its first 1,500 characters) names: dates ("February 2, 2019"),
    else the years of a header line of years alone ("2019 2018 2017"), in their order."""
    dates = list(dict.fromkeys(" ".join(d.replace(",", "").split()) for d in _DATE.findall(head)))
    if len(dates) >= 2:
        return dates
    for line in head.splitlines():  # "2022 2021", or "2022 2021 Percent" over an amount and a percent column
        words = line.replace("|", " ").split()
        years = [w for w in words if _YEAR.fullmatch(w.strip("*'"))]
        if len(set(years)) >= 2 and len(words) - len(years) <= 3:
            return list(dict.fromkeys(y.strip("*'") for y in years))
    return dates


def read_region(
    text: str, start: int, end: int, page: int | None, facts: dict[str, str] | None = None
) -> tuple[StatementRegion | None, bool]:
    """(the statement text[start:end] holds, whether its rows were read): (region, True) for a statement,
    (region without rows, False) for one that looks like a statement whose rows could not be read, (None,
    False) for anything else. `facts`: a row label (normalized) -> the iXBRL concept of its figures."""
    lines = list(_lines(text, start, end))
    titled = _title(lines)
    if titled is None:
        return None, False
    kind, title = titled
    body = text[start:end]
    if _vocabulary(kind, body) < MIN_VOCABULARY:
        return None, False
    head = text[start : min(end, start + 1500)]  # where the column heads are
    units = next((" ".join((m[1] or m[2]).split()) for m in _UNITS.finditer(body[:2000])), None)
    rows = []
    for s, e, label, values in read_rows(lines):
        concept = (facts or {}).get(label_key(label))
        items = keys_named(label) + (keys_named(concept) if concept else [])
        rows.append(
            LineItem(
                label=label, values=values, char_start=s, char_end=e, items=list(dict.fromkeys(items)), concept=concept
            )
        )
    region = StatementRegion(
        kind=kind, title=title, page=page, char_start=start, char_end=end, periods=_periods(head), units=units
    )
    if len(rows) < MIN_ROWS:
        return region, False
    return region.model_copy(update={"rows": rows}), True


def label_key(label: str) -> str:
    """A row label as facts and rows are matched on: lower-case words only."""
    return " ".join(re.findall(r"[a-z]+", label.lower()))


def regions(text: str, page_starts: Sequence[int] | None) -> Iterator[tuple[int, int, int | None]]:
    """(start, end, page) of each region a statement is looked for in: a PDF's pages; in other documents
    each Markdown table with up to 600 characters of the text above it (where its title is)."""
    if page_starts is not None:
        bounds = [*page_starts, len(text)]
        for i in range(len(page_starts)):
            yield bounds[i], bounds[i + 1], i + 1
        return
    for match in re.finditer(r"(?:^\|[^\n]*(?:\n|$))+", text, re.M):
        head = text.rfind("\n\n", 0, max(match.start() - 600, 0))
        start = max(head, 0, match.start() - 600)
        yield start, match.end(), None


def find_statements(text: str, page_starts: Sequence[int] | None, facts: dict[str, str] | None = None) -> Statements:
    """The primary statements of one document (see the module's docstring)."""
    found, unread = [], []
    for start, end, page in regions(text, page_starts):
        for seg_start, seg_end in _segments(text, start, end):
            region, read = read_region(text, seg_start, seg_end, page, facts)
            if region is not None:
                (found if read else unread).append(region)
    return Statements(found, unread)


def chunk_tags(statements: Sequence[StatementRegion], char_start: int | None, char_end: int | None) -> dict:
    """The payload a chunk at text[char_start:char_end] gets: the kind of the statement it lies in
    (`statement`) and the line-item keys of the rows it holds (`line_items`); {} outside every statement."""
    if char_start is None or char_end is None:
        return {}
    for region in statements:
        if region.char_start <= char_start < region.char_end:
            keys = {
                key
                for row in region.rows
                if row.char_start < char_end and row.char_end > char_start
                for key in row.items
            }
            return {"statement": region.kind, "line_items": sorted(keys)}
    return {}


@dataclass
class StatementQuery:
    """What a question asks of the statements: the kinds it names or implies, and per kind the line items
    it names there (empty: the statement as a whole)."""

    kinds: list[str]
    items: dict[str, list[str]]
    named: list[str]  # the kinds the question names in words ("balance sheet"), not only by a line item


def statement_query(question: str, expansion: str = "") -> StatementQuery:
    """The statements and line items a question names; `expansion` (the concept table's words for the
    concepts it names, `concepts.expansion`) adds the line items of a metric it names without them
    ("EBITDA": operating income, depreciation and amortization)."""
    named = [kind for kind, pattern in STATEMENT_WORDS if pattern.search(question)]
    keys = list(dict.fromkeys(keys_named(question) + keys_named(expansion)))
    kinds = list(named)
    items: dict[str, list[str]] = {}
    for key in keys:
        item = _ITEMS[key]
        # an item reported in a named statement is looked for there; otherwise in the first that reports it
        kind = next((k for k in item.kinds if k in named), item.kinds[0])
        items.setdefault(kind, []).append(key)
        if kind not in kinds:
            kinds.append(kind)
    return StatementQuery(kinds=kinds, items=items, named=named)
