"""Finance concepts in queries: a question that names a ratio ("quick ratio", "capital expenditure")
but not the statement that reports its inputs finds that statement (`finmbs/ingest/concepts.yaml`);
and a company named by an abbreviation of its name.

The index holds pages of a real 10-Q (Best Buy, fiscal 2024 Q2, from ../shared/data/financebench): the
cover, the three statements, and the MD&A pages on liquidity whose prose competes with them."""

from __future__ import annotations

import json
from pathlib import Path

import pymupdf
import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.concepts import CONCEPTS, ConceptError, concepts, expansion, load_concepts

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FILING = "BESTBUY_2024Q2_10Q.pdf"
PAGES = [1, 3, 4, 6, 14, 15, 20, 21, 22, 23]  # 1-based pages of the filing kept in the excerpt
BALANCE_SHEET, CASH_FLOWS = 2, 4  # their pages in the excerpt
runner = CliRunner()


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    source = SHARED / "financebench/pdfs" / FILING
    if not source.is_file():
        pytest.skip(f"shared data folder not found at {SHARED}")
    docs = tmp_path_factory.mktemp("docs")
    with pymupdf.open(source) as filing, pymupdf.open() as excerpt:
        for page in PAGES:
            excerpt.insert_pdf(filing, from_page=page - 1, to_page=page - 1)
        excerpt.save(docs / FILING)
    (docs / "manifest.jsonl").write_text(
        json.dumps({"doc_name": Path(FILING).stem, "company": "Best Buy Co., Inc."}) + "\n"
    )
    settings = IndexSettings(path=str(tmp_path_factory.mktemp("index") / "qdrant"))
    report = ingest_paths([docs], settings, show_progress=False, workers=1)
    assert report.documents == 1 and not report.failed
    return settings


def rank(hits, page: int) -> int | None:
    return next((i for i, h in enumerate(hits, 1) if h.chunk.page == page), None)


@pytest.mark.parametrize(
    "question, page",
    [
        ("Based on its quick ratio, how liquid was Best Buy at the end of the quarter?", BALANCE_SHEET),
        ("How much did Best Buy spend on capex in the first half of the fiscal year?", CASH_FLOWS),
    ],
)
def test_a_concept_finds_the_statement_that_reports_it(settings, question, page):
    with open_index(settings) as index:
        with_concepts = rank(index.search(question, 10), page)
        without = rank(index.search(question, 10, concepts=False), page)
    assert with_concepts is not None and with_concepts <= 2, (with_concepts, without)
    assert without is None or with_concepts < without  # the concept moved the statement up


def test_an_abbreviated_company_name_is_recognised(settings):
    with open_index(settings) as index:
        assert index.document(Path(FILING).stem).company == "Best Buy Co., Inc."  # from the manifest
        assert (
            index.recognise("Did BeBu's quick ratio improve in FY2024?").company == "bestbuy"
        )  # two letters of each word
        assert index.recognise("Did BB's quick ratio improve?").company is None  # initials are not enough


def test_search_command_turns_concepts_off(settings):
    question = "Based on its quick ratio, how liquid was Best Buy at the end of the quarter?"
    args = ["search", question, "-k", "3", "--index-path", settings.path, "--json"]
    pages = {}
    for flag in ([], ["--no-concepts"]):
        result = runner.invoke(app, args + flag)
        assert result.exit_code == 0, result.output
        pages[bool(flag)] = [hit["page"] for hit in json.loads(result.output)]
    assert BALANCE_SHEET in pages[False] and pages[False] != pages[True]


def test_expansion_names_where_a_concept_is_reported():
    assert "total current liabilities" in expansion("Is the quick ratio healthy?")
    assert "statement of cash flows" in expansion("Is it a capital-intensive business?")
    assert "section 12(b)" in expansion("Which securities are registered to trade on a national securities exchange?")
    assert expansion("What is the Floor under the credit agreement?") == ""
    assert expansion("the REPO rate") == ""  # "eps" only as a word
    assert len(concepts()) >= 20 and load_concepts(CONCEPTS) == concepts()


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "- concept: quick ratio\n  when: quick ratio\n  how: x\n",
            "entry 1: needs the text fields 'concept' and 'when'",
        ),
        (
            "- concept: quick ratio\n  when: quick ratio\n  where: balance sheet\n- when: capex\n  where: cash flows\n",
            "entry 2: names no concept",
        ),
        ("- concept: '  '\n  when: default rate\n", "entry 1: names no concept"),
        ("- concept: default rate\n", r"entry 1 \(default rate\): has no 'when'"),
        (
            "- concept: quick ratio\n  when: quick ratio\n  where: balance sheet\n- concept: capex\n  when: '(capex'\n",
            r"entry 2 \(capex\): 'when' is not a regular expression",
        ),
        ("when: x\nwhere: y\n", "a list of {concept, when, where} entries expected"),
    ],
)
def test_a_bad_concept_table_is_named_with_its_entry(tmp_path, text, message):
    path = tmp_path / "concepts.yaml"
    path.write_text(text)
    with pytest.raises(ConceptError, match=message) as error:
        load_concepts(path)
    assert str(path) in str(error.value)
