"""Parse source files into plain text that keeps numbers, tables (as Markdown) and page starts.

Formats: PDF (pymupdf), HTML/XHTML (EDGAR exhibits, inline-XBRL 10-K/10-Q; lxml), plain text and
Markdown, and EDGAR full submissions (`.nc`, or `.txt` holding `<DOCUMENT>` blocks), split into one
document per block with its TYPE.

Word (.docx) and email (.eml) go through unstructured's `partition_docx` / `partition_email` (tables
as Markdown). Their one step that wants model data at run time (spaCy's `en_core_web_sm`, downloaded
at first use, to tell narrative text by its sentences and verbs) gets spaCy's blank English pipeline
with the rule-based sentencizer instead: it works offline, and only the element types it picks can
differ, never the text. The other formats do not use unstructured: `unstructured[pdf]` swaps the CPU
torch build for CUDA, and lxml reads EDGAR HTML faster.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import lxml.html
import pymupdf
import pymupdf.table

from finmbs.errors import FinmbsError
from finmbs.ingest.query import LEGAL_FORMS
from finmbs.ingest.statements import label_key

PDF_EXTS = {".pdf"}
DOCX_EXTS = {".docx"}
EMAIL_EXTS = {".eml"}
HTML_EXTS = {".html", ".htm", ".xhtml", ".xml"}
TEXT_EXTS = {".txt", ".md", ".markdown", ".text"}
SUBMISSION_EXTS = {".nc"}
SUPPORTED_EXTS = PDF_EXTS | HTML_EXTS | TEXT_EXTS | SUBMISSION_EXTS | DOCX_EXTS | EMAIL_EXTS

_BLOCK_TAGS = {
    "p",
    "div",
    "br",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "li",
    "ul",
    "ol",
    "tr",
    "table",
    "center",
    "blockquote",
    "section",
    "article",
    "dl",
    "dt",
    "dd",
    "hr",
    "body",
    "title",
    "caption",
    "page",
}
_DROP_TAGS = {"script", "style", "head", "ix:header", "noscript"}
_MONEY_PREFIX = {"$", "€", "£", "¥", "(", "($", "$("}
_SUFFIX_CELL = re.compile(r"^[)%]+$|^\)%$|^%\)$")


class ParseError(FinmbsError, ValueError):
    """A file that cannot be turned into text, with the reason."""


@dataclass
class ParsedDocument:
    """The text of one document and what the file says about it."""

    text: str
    key: str = ""
    doc_type: str = "unknown"
    title: str = ""
    company: str | None = None
    period: str | None = None
    cik: str | None = None
    page_starts: list[int] | None = None
    n_tables: int = 0
    facts: dict[str, str] | None = None  # inline XBRL: a table row's label (`statements.label_key`) -> its concept

    def page_of(self, offset: int) -> int | None:
        """1-based page holding character `offset` (PDF only)."""
        if self.page_starts is None:
            return None
        page = 0
        for i, start in enumerate(self.page_starts):
            if start <= offset:
                page = i
            else:
                break
        return page + 1


def _clean(text: str) -> str:
    """Strip trailing spaces per line and keep at most one blank line between paragraphs."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def _check_text_bytes(data: bytes) -> None:
    head = data[:8192]
    if not head.strip():
        raise ParseError("empty file")
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
    if b"\x00" in head or controls > len(head) * 0.05:
        raise ParseError("binary content, not a text document")


def _decode(data: bytes) -> str:
    _check_text_bytes(data)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


# ---------------------------------------------------------------- tables


def _merge_cells(cells: list[str]) -> list[str]:
    """Join EDGAR's split cells: '$' with the number after it, ')' or '%' with the one before."""
    out: list[str] = []
    carry = ""
    for cell in cells:
        if cell in _MONEY_PREFIX:
            carry += cell
            continue
        if _SUFFIX_CELL.match(cell) and out:
            out[-1] += cell
            continue
        out.append(carry + cell)
        carry = ""
    if carry:
        out.append(carry)
    return out


def _is_label_row(row: list[str]) -> bool:
    """A row opened by a text label next to figures (not a column-header row, which lacks the label cell)."""
    return bool(re.search(r"[A-Za-z]", row[0])) and any(re.search(r"\d", cell) for cell in row[1:])


def rows_to_markdown(rows: list[list[str]]) -> str:
    """A Markdown table (first row as header), or plain lines when the 'table' is only layout."""
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    if width <= 1:
        return "\n\n".join(row[0] for row in rows if row)
    first_full = next(i for i, row in enumerate(rows) if len(row) == width)
    rows = [
        [""] * (width - len(row)) + row if i < first_full and not _is_label_row(row) else row
        for i, row in enumerate(rows)
    ]
    esc = [[cell.replace("|", "\\|") for cell in row] + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(row) + " |" for row in esc]
    lines.insert(1, "|" + "---|" * width)
    return "\n".join(lines)


# ---------------------------------------------------------------- HTML


def _html_table(table: lxml.html.HtmlElement, facts: dict[str, str] | None = None) -> list[list[str]]:
    """A table's rows of cell texts; with `facts`, each row whose figures are inline-XBRL facts adds its
    label (`label_key`) -> the facts' concept ("Accounts payable" -> "us-gaap:AccountsPayableCurrent")."""
    rows = []
    for tr in table.iter("tr"):
        cells = [re.sub(r"\s+", " ", td.text_content()).strip() for td in tr if td.tag in ("td", "th")]
        rows.append(_merge_cells([c for c in cells if c]))
        if (
            facts is not None
            and rows[-1]
            and (concept := next((f.get("name") for f in tr.iter("ix:nonfraction")), None))
        ):
            facts.setdefault(label_key(rows[-1][0]), concept)
    return rows


class _HtmlText:
    """Walk an lxml tree into text: blocks on their own paragraphs, tables as Markdown."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.n_tables = 0
        self.facts: dict[str, str] = {}

    def walk(self, el: lxml.html.HtmlElement) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        style = (el.get("style") or "").replace(" ", "").lower()
        if tag in _DROP_TAGS or "display:none" in style:
            self._tail(el)
            return
        if tag == "pre":
            self.parts.append("\n\n" + el.text_content() + "\n\n")
        elif tag == "table" and any(True for _ in el.iter("tr")):
            markdown = rows_to_markdown(_html_table(el, self.facts))
            if markdown:
                self.n_tables += markdown.startswith("|")
                self.parts.append("\n\n" + markdown + "\n\n")
        else:
            block = tag in _BLOCK_TAGS
            if block:
                self.parts.append("\n\n" if tag != "br" else "\n")
            if el.text and tag:
                self.parts.append(re.sub(r"\s+", " ", el.text))
            for child in el:
                self.walk(child)
            if block:
                self.parts.append("\n\n")
        self._tail(el)

    def _tail(self, el: lxml.html.HtmlElement) -> None:
        if el.tail:
            self.parts.append(re.sub(r"\s+", " ", el.tail))


def _html_facts(root: lxml.html.HtmlElement) -> dict[str, str]:
    """Inline-XBRL cover facts (dei:*), first value of each."""
    facts: dict[str, str] = {}
    for el in root.iter("ix:nonnumeric"):
        name = el.get("name", "")
        if name.startswith("dei:") and name[4:] not in facts:
            facts[name[4:]] = re.sub(r"\s+", " ", el.text_content()).strip()
    return facts


def parse_html(data: bytes | str) -> ParsedDocument:
    """HTML or inline-XBRL XHTML -> text with Markdown tables; dei facts fill company/type/period."""
    if isinstance(data, bytes):
        _check_text_bytes(data)
    try:
        root = lxml.html.fromstring(data)
    except (ValueError, lxml.etree.ParserError) as exc:
        raise ParseError(f"unparseable HTML: {exc}") from None
    facts = _html_facts(root)
    walker = _HtmlText()
    walker.walk(root)
    text = _clean("".join(walker.parts).replace("\xa0", " "))
    doc = ParsedDocument(text=text, n_tables=walker.n_tables, facts=walker.facts or None)
    doc.company = facts.get("EntityRegistrantName")
    doc.doc_type = facts.get("DocumentType", doc.doc_type)
    doc.period = facts.get("DocumentPeriodEndDate")
    doc.cik = cik_of(facts.get("EntityCentralIndexKey"))
    title = root.findtext(".//title")
    doc.title = (title or "").strip()
    return doc


# ---------------------------------------------------------------- PDF


# from the start of a run of digits and separators only, runs consumed possessively: linear in the line
_FIGURES = re.compile(r"(?<![\d,.])[,.]*+\d[\d,.]*+\)?%?\s{2,}+\S*\s*+\(?\$?\s*+\d")


def _tabular(text: str) -> bool:
    """Cheap test before pymupdf's (slow) table finder: at least 6 lines with two figures side by side."""
    return sum(1 for line in text.splitlines() if _FIGURES.search(line)) >= 6


# pymupdf >= 2 with pymupdf-layout installed first runs an ONNX layout model on the page (most of
# find_tables' time; docs/measurements.md); the ruling-line finder alone is what we use.
_LINES_ONLY = {"use_layout": False} if "use_layout" in inspect.signature(pymupdf.table.find_tables).parameters else {}


def _ruled(page: pymupdf.Page) -> bool:
    """Whether the page draws the lines or filled boxes a table grid is made of: pymupdf's table finder
    (its default "lines" strategy) finds no table on a page without them, so it is not called there."""
    strokes = 0
    for path in page.get_cdrawings():
        strokes += sum(item[0] in ("l", "re", "qu") for item in path.get("items", ()))
        if strokes >= 4:
            return True
    return False


Words = list[tuple[float, float, float, float, str, int, int, int]]  # pymupdf's get_text("words")


Box = tuple[float, float, float, float]


def _union(a: Box, b: Box) -> Box:
    """pymupdf's `Rect | Rect` on plain tuples: an empty rectangle adds nothing, and is replaced."""
    if b[0] >= b[2] or b[1] >= b[3]:
        return a
    if a[0] >= a[2] or a[1] >= a[3]:
        return b
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


_EMPTY: Box = (2147483520.0, 2147483520.0, -2147483648.0, -2147483648.0)  # pymupdf.EMPTY_RECT()


def _same_line(box: Box, line: Box, tolerance: float) -> bool:
    return abs(line[1] - box[1]) <= tolerance or abs(line[3] - box[3]) <= tolerance


def _lines_of(words: Words, tolerance: float) -> list[tuple[Box, list]]:
    """Words grouped into lines as pymupdf groups them: a word joins the current line when its top or its
    bottom is within `tolerance` of the line's; each line with its bounding box."""
    groups: list[tuple[Box, list]] = []
    line, box = [words[0]], tuple(words[0][:4])
    for w in words[1:]:
        if _same_line(w[:4], box, tolerance):
            line.append(w)
            box = _union(box, w[:4])
        else:
            groups.append((box, line))
            line, box = [w], tuple(w[:4])
    groups.append((box, line))
    return groups


def sorted_text(words: Words, tolerance: float = 3) -> str:
    """`page.get_text(sort=True)` from the page's words, the same text: pymupdf's `get_sorted_text` and
    `get_text_words(sort=True)` step for step, on tuples instead of `Rect` objects, whose unions were a
    third of a filing's parse time (docs/measurements.md, issue 62)."""
    if not words:
        return ""
    by_line = _lines_of(sorted(words, key=lambda w: (w[3], w[0])), tolerance)  # get_text_words' sort_words
    ordered = [w for _, line in by_line for w in sorted(line, key=lambda w: w[0])]
    total = _EMPTY
    for w in ordered:
        total = _union(total, w[:4])

    def line_text(line: list) -> str:
        line.sort(key=lambda w: w[0])
        text, x1 = "", total[0]
        for w in line:
            width = w[2] - w[0]
            gap = int(round((w[0] - x1) / width * len(w[4]))) if width else 0
            text += " " * max(gap, 0 if (x1 == total[0] or w[0] <= x1) else 1) + w[4]
            x1 = w[2]
        return text

    lines = sorted(((box, line_text(line)) for box, line in _lines_of(ordered, tolerance)), key=lambda i: i[0][3])
    text, y1 = lines[0][1], lines[0][0][3]
    for box, line_str in lines[1:]:
        height = box[3] - box[1]
        distance = min(int(round((box[1] - y1) / height)), 5) if height else 5
        text += "\n" * (distance + 1) + line_str
        y1 = box[3]
    return text


def _cell_text(words: Words, cell: tuple | None) -> str:
    """A table cell's text: the page's words whose centre lies in the cell, in reading order, one space
    between them (table.extract() loses spaces and commas). One word list serves every cell of the page:
    `page.get_text(clip=cell)` built the page's whole text layer again for each cell, more than half of a
    statement-heavy filing's parse time (docs/measurements.md, issue 62)."""
    if not cell:
        return ""
    x0, y0, x1, y1 = cell
    inside = [w for w in words if x0 <= (w[0] + w[2]) / 2 <= x1 and y0 <= (w[1] + w[3]) / 2 <= y1]
    return " ".join(w[4] for w in sorted(inside, key=lambda w: (w[5], w[6], w[7])))


def _pdf_page(page: pymupdf.Page, tables_wanted: bool) -> tuple[str, int]:
    """A page's text in reading order, detected tables replaced by Markdown tables. The page's text layer is
    built once (`textpage`) for its text, blocks and words."""
    textpage = page.get_textpage(flags=pymupdf.TEXTFLAGS_TEXT)  # the flags get_text uses for "text", "blocks", "words"
    words = page.get_text("words", textpage=textpage)
    text = sorted_text(words)
    tables = page.find_tables(**_LINES_ONLY).tables if tables_wanted and _tabular(text) and _ruled(page) else []
    if not tables:
        return _clean(text), 0
    boxes = [pymupdf.Rect(t.bbox) for t in tables]
    items: list[tuple[float, float, str]] = []
    for x0, y0, x1, y1, block_text, _, block_type in page.get_text("blocks", sort=True, textpage=textpage):
        rect = pymupdf.Rect(x0, y0, x1, y1)
        if block_type == 0 and not any(
            box.intersects(rect) and (box & rect).get_area() > 0.5 * rect.get_area() for box in boxes
        ):
            items.append((y0, x0, _clean(block_text)))
    n = 0
    for table, box in zip(tables, boxes):
        rows = [_merge_cells([c for c in (_cell_text(words, cell) for cell in row.cells) if c]) for row in table.rows]
        markdown = rows_to_markdown(rows)
        if markdown:
            n += markdown.startswith("|")
            items.append((box.y0, box.x0, markdown))
    items.sort(key=lambda item: (round(item[0], 1), item[1]))
    return "\n\n".join(t for _, _, t in items if t), n


def parse_pdf(path: Path, tables: bool = True) -> ParsedDocument:
    """PDF -> text with page starts and Markdown tables; encrypted/empty/corrupt PDFs raise ParseError."""
    if path.stat().st_size == 0:
        raise ParseError("empty file")
    try:
        pdf = pymupdf.open(path)
    except (pymupdf.FileDataError, RuntimeError, ValueError) as exc:
        raise ParseError(f"corrupt or unreadable PDF: {exc}") from None
    with pdf:
        if pdf.needs_pass:
            raise ParseError("encrypted PDF (password required)")
        if pdf.page_count == 0:
            raise ParseError("empty PDF (no pages)")
        text, starts, n_tables = "", [], 0
        for page in pdf:
            page_text, n = _pdf_page(page, tables)
            starts.append(len(text) + (2 if text else 0))
            text = f"{text}\n\n{page_text}" if text else page_text
            n_tables += n
        metadata = pdf.metadata or {}
    if not text.strip():
        raise ParseError("no extractable text (scanned or image-only PDF)")
    return ParsedDocument(text=text, page_starts=starts, n_tables=n_tables, title=(metadata.get("title") or "").strip())


# ---------------------------------------------------------------- DOCX

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _offline_unstructured() -> None:
    """Make unstructured's partitioners work offline and quietly (once per process): no banner, no usage
    ping, and spaCy's blank English pipeline with the rule-based sentencizer in place of the
    `en_core_web_sm` model it would download at first use (no PyPI package ships it)."""
    for quiet in ("UNSTRUCTURED_DISABLE_NOTICE", "SCARF_NO_ANALYTICS", "DO_NOT_TRACK"):
        os.environ.setdefault(quiet, "1")
    import unstructured.nlp.tokenize as tokenize

    if getattr(tokenize, "_finmbs_offline", False):
        return
    import spacy

    blank = spacy.blank("en")
    blank.add_pipe("sentencizer")
    tokenize._get_nlp = lambda: blank
    tokenize._finmbs_offline = True


def _elements_text(elements: list) -> tuple[list[str], int]:
    """unstructured elements -> text parts (tables as Markdown) and the number of tables."""
    parts, n_tables = [], 0
    for element in elements:
        html = getattr(element.metadata, "text_as_html", None) if element.category == "Table" else None
        if html:
            rows = [_html_table(table) for table in lxml.html.fromstring(html).iter("table")]
            markdown = rows_to_markdown(rows[0]) if rows else ""
            n_tables += markdown.startswith("|")
            parts.append(markdown)
        elif element.text.strip():
            parts.append(element.text.strip())
    return parts, n_tables


def parse_docx(path: Path) -> ParsedDocument:
    """Word .docx -> text, one paragraph per element, tables as Markdown; bad files raise ParseError."""
    try:
        with path.open("rb") as file:
            head = file.read(8)
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from None
    if not head:
        raise ParseError("empty file")
    if head.startswith(_OLE_MAGIC):
        raise ParseError("encrypted (password-protected) or legacy Word file, not a plain .docx")
    if not head.startswith(b"PK"):
        raise ParseError("not a DOCX file (no ZIP container)")
    _offline_unstructured()
    from unstructured.partition.docx import partition_docx

    try:
        elements = partition_docx(filename=str(path), include_page_breaks=False, languages=["eng"])
    except Exception as exc:  # noqa: BLE001 - python-docx/zipfile raise many kinds on a damaged file
        raise ParseError(f"corrupt or unreadable DOCX: {type(exc).__name__}: {exc}") from None
    parts, n_tables = _elements_text(elements)
    return ParsedDocument(text=_clean("\n\n".join(p for p in parts if p)), n_tables=n_tables)


_EMAIL_HEADER = re.compile(rb"^(From|To|Subject|Date|Message-ID|MIME-Version|Received|Return-Path)\s*:", re.I | re.M)
_EMAIL_SHOWN = ("Subject", "From", "To", "Date")


def parse_email(data: bytes) -> ParsedDocument:
    """An .eml message -> its headers (subject, from, to, date) and body text, the HTML part preferred
    (tables as Markdown), the plain part otherwise. Attachments are not opened: save them beside the
    message to ingest them. Bad files raise ParseError."""
    if not data.strip():
        raise ParseError("empty file")
    if not _EMAIL_HEADER.search(data[:16_384]):
        raise ParseError("not an email message (no RFC 822 headers)")
    _offline_unstructured()
    import email
    import email.policy
    import io

    from unstructured.partition.email import partition_email

    elements: list = []
    try:
        for source in ("text/html", "text/plain"):
            elements = partition_email(file=io.BytesIO(data), content_source=source, process_attachments=False)
            if any(e.text.strip() for e in elements):
                break
    except Exception as exc:  # noqa: BLE001 - the email parser raises many kinds on a damaged message
        raise ParseError(f"corrupt or unreadable email: {type(exc).__name__}: {exc}") from None
    message = email.message_from_bytes(data, policy=email.policy.default)
    headers = [f"{name}: {message[name]}" for name in _EMAIL_SHOWN if message[name]]
    parts, n_tables = _elements_text(elements)
    return ParsedDocument(
        text=_clean("\n\n".join(p for p in ["\n".join(headers), *parts] if p)),
        title=str(message["Subject"] or ""),
        n_tables=n_tables,
    )


# ---------------------------------------------------------------- EDGAR full submission

_DOCUMENT = re.compile(r"<DOCUMENT>(.*?)</DOCUMENT>", re.S | re.I)


def _tag(block: str, name: str) -> str | None:
    match = re.search(rf"<{name}>([^\n<]*)", block, re.I)
    return match.group(1).strip() if match and match.group(1).strip() else None


def _header(text: str, sgml: str, plain: str) -> str | None:
    match = re.search(rf"<{sgml}>([^\n<]+)|{plain}:\s*([^\n]+)", text[: text.find("<DOCUMENT>")])
    return (match.group(1) or match.group(2)).strip() if match else None


_SUBMISSION_START = re.compile(r"\s*(?:-----BEGIN PRIVACY-ENHANCED MESSAGE-----|<[A-Z][A-Z-]*>)")


def is_submission(text: str) -> bool:
    """An EDGAR full submission: the file opens with SGML markup (`<SUBMISSION>`, `<SEC-DOCUMENT>`, a bare
    `<DOCUMENT>`, or EDGAR's PEM header) and holds a `<DOCUMENT>` line. Prose that only describes the
    format (a README quoting `<DOCUMENT>` and `<TYPE>`) is text."""
    return bool(_SUBMISSION_START.match(text)) and re.search(r"^<DOCUMENT>", text[:20000], re.M) is not None


def parse_submission(text: str) -> list[ParsedDocument]:
    """EDGAR full submission -> one document per text `<DOCUMENT>` block (main form and exhibits)."""
    company = _header(text, "CONFORMED-NAME", "COMPANY CONFORMED NAME")
    period = _header(text, "PERIOD", "CONFORMED PERIOD OF REPORT")
    cik = cik_of(_header(text, "CIK", "CENTRAL INDEX KEY"))
    docs = []
    for block in _DOCUMENT.findall(text):
        body = re.search(r"<TEXT>(.*?)(?:</TEXT>|$)", block, re.S | re.I)
        raw = body.group(1) if body else ""
        if not raw.strip() or raw.lstrip().startswith("begin "):
            continue  # uuencoded graphics, PDFs, zips
        doc_type = _tag(block, "TYPE") or "unknown"
        seq = _tag(block, "SEQUENCE") or str(len(docs) + 1)
        if re.search(r"<(html|body|p|table|div)\b", raw[:5000], re.I):
            doc = parse_html(raw)
        else:
            doc = ParsedDocument(text=_clean(re.sub(r"</?(PAGE|S|C|CAPTION|FN|F\d+)>", "", raw, flags=re.I)))
        if not doc.text.strip():
            continue
        doc.key, doc.doc_type = f"{seq}-{doc_type}", doc_type
        doc.title = _tag(block, "DESCRIPTION") or doc.title or doc_type
        doc.company, doc.period, doc.cik = company, period, cik
        docs.append(doc)
    if not docs:
        raise ParseError("EDGAR submission without text documents")
    return docs


# ---------------------------------------------------------------- metadata

_FILENAME_META = re.compile(
    r"^(?P<company>[A-Za-z0-9&]+)_(?P<period>\d{4}(?:Q\d)?)_(?P<type>10K|10Q|8K|EARNINGS|10KANNUALREPORT)", re.I
)
_TYPE_WORDS = [
    (re.compile(r"FORM\s+10-K\b", re.I), "10-K"),
    (re.compile(r"FORM\s+10-Q\b", re.I), "10-Q"),
    (re.compile(r"\b(CREDIT|LOAN|FACILITY|TERM LOAN)\b.{0,40}\bAGREEMENT\b", re.I | re.S), "credit_agreement"),
]


def _sidecar(path: Path) -> dict[str, object]:
    """Metadata for `path` from a `manifest*.jsonl` / `*document_information*.jsonl` next to it or one level up."""
    for folder in (path.parent, path.parent.parent):
        for manifest in sorted(folder.glob("*.jsonl")):
            if "manifest" not in manifest.name and "document_information" not in manifest.name:
                continue
            for line in manifest.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                names = {str(row.get(k)) for k in ("doc_id", "doc_name")} | {Path(str(row.get("file", ""))).name}
                if path.stem in names or path.name in names:
                    return row
    return {}


# a filing's cover page: "Central Index Key: 0000320193", the registrant's name on the line above
# "(Exact name of registrant as specified in its charter)", "For the fiscal year ended September 30, 2023"
_COVER_CIK = re.compile(r"central\s+index\s+key\W{0,5}(\d{4,10})\b", re.I)
# Words may be joined by no-break spaces (pymupdf keeps a PDF's U+00A0): `\s` matches them, a literal space not.
_COVER_NAME = re.compile(
    r"^[^\S\n|*#]*([^\n|]{2,120}?)[^\S\n|*]*\n[\s|*]*\(\s*exact\s+name\s+of\s+registrant", re.I | re.M
)
_NOT_A_NAME = re.compile(r"commission\s+file|file\s+number|^\W*\(|^\W*$", re.I)  # the line above when no name is
_COVER_PERIOD = re.compile(
    r"for\s+the\s+(?:fiscal\s+)?(?:year|quarterly\s+period|quarter|transition\s+period)\s+ended:?\s+"
    r"([A-Z][a-z]+\.?\s\d{1,2},?\s\d{4})",
    re.I,
)
_REPORT_DATE = re.compile(  # an 8-K's cover: "Date of Report (Date of earliest event reported): August 30, 2023"
    r"date\s+of\s+report\b[^:]{0,60}:?\s*([A-Z][a-z]+\.?\s\d{1,2},?\s\d{4})", re.I
)
# an earnings release names its company with its listing: "Ulta Beauty, Inc. (NASDAQ: ULTA) today announced"
_LISTED_NAME = re.compile(
    r"(?:^|[\n.;)–—]|--)\s*(?:[–—]\s*)?(?:\(?[A-Z][\w.&' ]{0,40}\)?--\s*)?"  # a dateline, a wire's name
    r"([A-Z][\w.&'-]*(?:[ ,]+[A-Z&][\w.&'-]*){0,6})\s*"
    r"\((?:NYSE|NASDAQ|Nasdaq|NYSE\s+American)\s*:\s*[A-Z.]{1,6}\)"
)


def cik_of(value: str | None) -> str | None:
    """A CIK as digits without leading zeros ("0000320193" -> "320193"), or None."""
    digits = re.sub(r"\D", "", value or "").lstrip("0")
    return digits or None


# where the cover's name is a logo (no text): the report's own definition of whom its terms mean,
# 'In this report, the terms "Acme Corp.," "Company," "we" ... mean Acme Corp. and ...'
_TERMS_NAME = re.compile(
    r"the\s+terms\s+[“\"]((?:The\s+)?[A-Z][\w.&'-]*(?:[ ,]+[A-Z&][\w.&'-]*){0,5}?),?[”\"],?\s+[“\"](?:the\s+)?Company"
)
COMPANY_DEFINED_CHARS = 60_000  # how far into a filing its definition of "the Company" is looked for


def defined_company(doc: ParsedDocument, text: str) -> None:
    """The company a filing says its terms ("Company", "we") mean, where its cover page named none."""
    if not doc.company and (m := _TERMS_NAME.search(text)):
        doc.company = " ".join(m.group(1).split()).strip(" ,")


def cover_page(doc: ParsedDocument, head: str) -> None:
    """CIK, company and period where a filing's cover page states them and nothing else has set them."""
    if not doc.cik and (m := _COVER_CIK.search(head)):
        doc.cik = cik_of(m.group(1))
    if not doc.company and (m := _COVER_NAME.search(head)) and not _NOT_A_NAME.search(m.group(1)):
        name = m.group(1)
        if set(re.sub(r"[^a-z& ]", " ", name.lower()).split()) <= LEGAL_FORMS:  # "AMCOR", then "PLC" alone
            name = f"{head[: m.start()].rstrip().rsplit(chr(10), 1)[-1]} {name}"
        doc.company = " ".join(name.split())
    if not doc.company and (m := _LISTED_NAME.search(head)):
        doc.company = " ".join(m.group(1).split()).strip(" ,")
    if not doc.period and (m := _COVER_PERIOD.search(head) or _REPORT_DATE.search(head)):
        doc.period = " ".join(m.group(1).split())


def _fill_metadata(doc: ParsedDocument, path: Path) -> None:
    """Company, period, doc type and title from a sidecar manifest, the file name, or the text."""
    row = _sidecar(path)
    match = _FILENAME_META.match(path.stem)
    if match and not doc.key:
        doc.company = doc.company or match["company"]
        doc.period = doc.period or match["period"]
        if doc.doc_type == "unknown":
            doc.doc_type = match["type"].upper().replace("10K", "10-K").replace("10Q", "10-Q").replace("8K", "8-K")
    if row and not doc.key:
        doc.company = str(row.get("company") or doc.company or "") or None
        doc.title = str(row.get("title") or doc.title)
        period = row.get("doc_period") or row.get("agreement_date") or row.get("period")
        doc.period = str(period) if period else doc.period
        if row.get("doc_type"):
            doc.doc_type = str(row["doc_type"])
    head = doc.text[:5000]
    cover_page(doc, doc.text[:20000])
    defined_company(doc, doc.text[:COMPANY_DEFINED_CHARS])
    if doc.doc_type == "unknown":
        doc.doc_type = next((name for pattern, name in _TYPE_WORDS if pattern.search(head)), "unknown")
    if not doc.title:
        lines = [line.strip() for line in head.splitlines() if line.strip()]
        doc.title = next(
            (line for line in lines if "AGREEMENT" in line.upper() and len(line) < 120),
            lines[0][:120] if lines else path.stem,
        )


def parse_file(path: Path, pdf_tables: bool = True) -> list[ParsedDocument]:
    """One file -> its documents (several for an EDGAR submission); ParseError says why not."""
    ext = path.suffix.lower()
    if ext not in SUPPORTED_EXTS:
        raise ParseError(f"unsupported file type '{ext or path.name}'")
    try:
        data = path.read_bytes() if ext not in PDF_EXTS | DOCX_EXTS else b""
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from None
    if ext in PDF_EXTS:
        docs = [parse_pdf(path, pdf_tables)]
    elif ext in DOCX_EXTS:
        docs = [parse_docx(path)]
    elif ext in EMAIL_EXTS:
        docs = [parse_email(data)]
    elif ext in HTML_EXTS:
        docs = [parse_html(data)]
    else:
        text = _decode(data)
        if ext in SUBMISSION_EXTS or is_submission(text):
            docs = parse_submission(text)
        else:
            docs = [ParsedDocument(text=_clean(text))]
    docs = [doc for doc in docs if doc.text.strip()]
    if not docs:
        raise ParseError("no text content")
    for doc in docs:
        _fill_metadata(doc, path)
    return docs
