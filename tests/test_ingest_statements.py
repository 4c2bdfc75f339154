"""Statements as first-class items (issue 62): statement pages recognised from their title and line-item
vocabulary, their rows read into line items with offsets, iXBRL concepts naming rows, the statements and line
items a question names; a statement page whose rows cannot be read stays an ordinary page (counted); and a real
FinanceBench PDF's statements read end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from finmbs.ingest.concepts import expansion
from finmbs.ingest.parse import parse_html, parse_pdf
from finmbs.ingest.statements import BALANCE, CASH_FLOW, INCOME, chunk_tags, find_statements, read_row, statement_query

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# A balance sheet page as pymupdf's text layer gives it: title, units, period columns, rows of figures.
BALANCE_PAGE = """Table of Contents
Example Retail Co.
Consolidated Balance Sheets
$ in millions, except per share amounts
February 2, 2019 February 3, 2018
Assets
Current assets
Cash and cash equivalents $ 1,980 $ 1,101
Receivables, net 1,015 1,049
Merchandise inventories 5,409 5,209
Total current assets 9,033 9,829
Property and equipment, net 2,510 2,421
Total assets $ 12,901 $ 13,049
Liabilities and equity
Accounts payable $ 5,257 $ 4,873
Total current liabilities 8,060 7,817
Long-term debt 1,332 811
Total equity 3,306 3,612
Total liabilities and equity $ 12,901 $ 13,049
51"""

TOC_PAGE = """Index to Financial Statements
Report of Independent Registered Public Accounting Firm 49
Consolidated Balance Sheets 51
Consolidated Statements of Earnings 52
Consolidated Statements of Cash Flows 54
Notes to Consolidated Financial Statements 56"""

LETTER_PAGE = """Report of Independent Registered Public Accounting Firm
We have audited the accompanying consolidated balance sheets of the Company as of February 2, 2019 and the
related consolidated statements of earnings, cash flows and changes in shareholders' equity for each of the
three years. In our opinion the total assets, inventories and accounts payable are presented fairly."""

# The same title and vocabulary, but the text layer lost the rows (a rotated table: a word a line, no figures).
ROTATED_PAGE = "Consolidated Balance Sheets\n" + "\n".join(
    "Total assets Current assets Inventories Accounts payable Total liabilities Goodwill".split()
)


def _pages(*pages: str) -> tuple[str, list[int]]:
    text, starts = "", []
    for page in pages:
        starts.append(len(text) + (2 if text else 0))
        text = f"{text}\n\n{page}" if text else page
    return text, starts


def test_a_balance_sheet_page_is_read_into_line_items_with_offsets() -> None:
    text, starts = _pages(TOC_PAGE, LETTER_PAGE, BALANCE_PAGE)
    read = find_statements(text, starts)
    assert [(r.kind, r.page) for r in read.found] == [(BALANCE, 3)]  # not the index, not the auditor's letter
    assert read.unread == []
    sheet = read.found[0]
    assert sheet.title == "Consolidated Balance Sheets"
    assert sheet.periods == ["February 2 2019", "February 3 2018"]
    assert sheet.units.startswith("$ in millions")
    rows = {row.label: row for row in sheet.rows}
    assert rows["Merchandise inventories"].values == ["5,409", "5,209"]
    assert rows["Accounts payable"].values == ["$5,257", "$4,873"]
    assert rows["Merchandise inventories"].items == ["inventories"]
    assert "accounts payable" in rows["Accounts payable"].items
    for row in sheet.rows:  # offsets into the document text, exactly
        assert text[row.char_start : row.char_end].startswith(row.label.split()[0])
    assert "Assets" not in rows and "Current assets" not in rows  # headings without figures are not rows


def test_a_statement_page_whose_rows_cannot_be_read_stays_ordinary_and_is_counted() -> None:
    text, starts = _pages(ROTATED_PAGE, BALANCE_PAGE)
    read = find_statements(text, starts)
    assert [r.page for r in read.found] == [2]
    assert [(r.kind, r.page, r.rows) for r in read.unread] == [(BALANCE, 1, [])]
    assert chunk_tags(read.found, 0, 20) == {}  # a chunk of the unread page carries no statement tag


def test_chunk_tags_name_the_statement_and_the_rows_a_chunk_holds() -> None:
    text, starts = _pages(BALANCE_PAGE)
    sheet = find_statements(text, starts).found
    at = text.index("Merchandise inventories")
    tags = chunk_tags(sheet, at, text.index("Property and equipment"))
    assert tags["statement"] == BALANCE
    assert tags["line_items"] == ["current assets", "inventories"]
    assert chunk_tags(sheet, None, None) == {}


def test_rows_plain_and_markdown() -> None:
    assert read_row("Net earnings attributable to shareholders $ 1,464 $ 1,000 $ (12)") == (
        "Net earnings attributable to shareholders",
        ["$1,464", "$1,000", "$(12)"],
    )
    assert read_row("| Inventories | 5,409 | 5,209 |") == ("Inventories", ["5,409", "5,209"])
    assert read_row("| | 2019 | 2018 |") is None  # column heads
    assert read_row("Fiscal Year 2019 2018") is None
    assert read_row("We sell products in 2019 through our stores.") is None
    assert read_row("Current assets") is None


def test_an_inline_xbrl_statement_names_its_rows_by_their_concepts() -> None:
    html = """<html><body><p>ACME CORP</p><p>CONSOLIDATED BALANCE SHEETS</p><p>(In millions)</p>
    <table>
    <tr><td></td><td>December 31, 2023</td><td>December 31, 2022</td></tr>
    <tr><td>Cash and cash equivalents</td><td><ix:nonFraction name="us-gaap:CashAndCashEquivalentsAtCarryingValue">
    120</ix:nonFraction></td><td>100</td></tr>
    <tr><td>Stock on hand</td><td><ix:nonFraction name="us-gaap:InventoryNet">50</ix:nonFraction></td><td>40</td></tr>
    <tr><td>Total current assets</td><td>170</td><td>140</td></tr>
    <tr><td>Total assets</td><td>900</td><td>800</td></tr>
    <tr><td>Trade creditors</td><td><ix:nonFraction name="us-gaap:AccountsPayableCurrent">60</ix:nonFraction></td>
    <td>55</td></tr>
    <tr><td>Total liabilities</td><td>400</td><td>380</td></tr>
    </table></body></html>"""
    doc = parse_html(html)
    sheet = find_statements(doc.text, doc.page_starts, doc.facts).found
    assert [r.kind for r in sheet] == [BALANCE]
    rows = {row.label: row for row in sheet[0].rows}
    assert rows["Stock on hand"].concept == "us-gaap:InventoryNet"
    assert rows["Stock on hand"].items == ["inventories"]  # named by its concept, not its label
    assert "accounts payable" in rows["Trade creditors"].items
    assert sheet[0].periods == ["December 31 2023", "December 31 2022"]


def test_a_question_names_its_statements_and_line_items() -> None:
    mgm = statement_query(
        "Basing your judgments off of the balance sheet, what is the year end FY2018 amount of accounts payable "
        "for MGM Resorts?"
    )
    assert mgm.named == [BALANCE] and mgm.kinds == [BALANCE] and mgm.items == {BALANCE: ["accounts payable"]}
    assert statement_query("What was the gross profit in the FY2019 P&L?").kinds == [INCOME]
    flows = statement_query("From the cash flow statement, how much was spent on capex in FY2022?")
    assert flows.named == [CASH_FLOW] and flows.items == {CASH_FLOW: ["capital expenditures"]}
    # a metric that needs two statements: operating income (income statement) plus D&A (cash flows)
    question = "What is Walmart's FY2018 EBITDA margin? Use the income statement and cash flow statement."
    ebitda = statement_query(question, expansion(question))
    assert {INCOME, CASH_FLOW} <= set(ebitda.kinds)
    assert "depreciation and amortization" in ebitda.items[CASH_FLOW]
    assert "operating income" in ebitda.items[INCOME]
    assert statement_query("Who is the chief executive officer?").kinds == []


@pytest.mark.skipif(not (SHARED / "financebench/pdfs").is_dir(), reason="shared data folder not found")
def test_a_real_earnings_release_has_its_statements_read() -> None:
    doc = parse_pdf(SHARED / "financebench/pdfs/JOHNSON_JOHNSON_2022Q4_EARNINGS.pdf")
    read = find_statements(doc.text, doc.page_starts)
    assert [(r.kind, r.page) for r in read.found] == [(INCOME, 10), (INCOME, 11)]  # its two statements of earnings
    assert all(r.units == "in Millions" for r in read.found)
    sales = next(row for row in read.found[0].rows if "revenue" in row.items)
    assert sales.label == "Sales to customers" and sales.values[:3] == ["$23,706", "100.0", "$24,804"]
    assert read.found[0].periods == ["2022", "2021"]
    for region in read.found:
        assert len(region.rows) >= 4
        for row in region.rows:
            assert row.label.split()[0] in doc.text[row.char_start : row.char_end]
