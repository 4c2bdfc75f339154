"""Everyday company names read from the filing itself (issue 62): listing symbols in prose, defined short names,
the legal name's initials; in a real index, a question that says "JnJ" or "J&J" finds that company's filing, a
name two companies claim filters nothing and the search says so, statement questions get the statement's chunks
(tagged), and the paper profile's switches turn all of it off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.aliases import defined_names, filing_aliases, initials, listed_symbols
from finmbs.ingest.query import alias_table
from finmbs.ingest.search import hit_json


def test_initials_with_and_or_ampersand() -> None:
    assert initials("Johnson & Johnson") == ["JNJ", "J&J"]
    assert initials("Procter and Gamble Co") == ["PNG", "P&G"]
    assert initials("American Water Works Company, Inc.") == ["AWW"]
    assert initials("Walmart Inc.") == []  # one word
    assert initials("JPMorgan Chase & Co.") == []  # "JC": two letters, the "&" before the legal form dropped
    assert initials("General Mills, Inc.") == []  # two letters name too much else


def test_defined_names_and_listing() -> None:
    text = (
        'Johnson & Johnson ("J&J" or the "Company") is a holding company. Its common stock is listed on the New '
        'York Stock Exchange under the symbol "JNJ". The "Notes" are due 2030.'
    )
    assert defined_names(text, "Johnson & Johnson") == ["J&J"]
    assert listed_symbols(text) == ["JNJ"]
    release = "NEW BRUNSWICK, N.J.--Johnson & Johnson (NYSE: JNJ) today announced results."
    assert listed_symbols(release) == ["JNJ"]
    walmart = 'Walmart Inc. ("Walmart," the "Company" or "we") operates retail stores.'
    assert defined_names(walmart, "Walmart Inc.") == ["Walmart"]
    assert filing_aliases(walmart, "Walmart Inc.") == {"aliases": ["Walmart"]}
    assert defined_names('the terms "we," "us," and the "Company" refer to Acme', "Acme Corp") == []


def test_a_name_two_companies_claim_is_contested() -> None:
    contested: dict[str, set[str]] = {}
    table = alias_table({"acmewidgets": {"Acme Widgets Inc."}, "acmeholdings": {"Acme Holdings Corp"}}, contested)
    assert "acme" not in table and contested == {"acme": {"acmewidgets", "acmeholdings"}}


JNJ = """JOHNSON & JOHNSON
(Exact name of registrant as specified in its charter)
Annual report on Form 10-K for the fiscal year ended January 1, 2023.

Johnson & Johnson ("J&J" or the "Company") researches, develops and sells health care products. Its common
stock is traded on the New York Stock Exchange under the symbol "JNJ".

Item 1A. Risk Factors

Product liability litigation and the talc matters could affect the Company's cash flows and results.

Item 8. Financial Statements

CONSOLIDATED BALANCE SHEETS (Dollars in Millions)

| | January 1, 2023 | January 2, 2022 |
|---|---|---|
| Cash and cash equivalents | 14,127 | 14,487 |
| Inventories | 12,483 | 10,387 |
| Total current assets | 55,294 | 60,979 |
| Total assets | 187,378 | 182,018 |
| Accounts payable | 11,703 | 11,055 |
| Total current liabilities | 55,802 | 45,226 |
| Total liabilities | 110,574 | 107,995 |
"""


def _other(name: str, short: str) -> str:
    return f"""{name}
(Exact name of registrant as specified in its charter)
Annual report on Form 10-K for the fiscal year ended December 31, 2022.

{name} ("{short}" or the "Company") makes widgets. Accounts payable and inventories are discussed in the notes,
and the balance sheet is managed for liquidity, as every risk factor about the balance sheet says.
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> IndexSettings:
    docs = tmp_path_factory.mktemp("filings")
    (docs / "filing-a.md").write_text(JNJ)
    (docs / "filing-b.md").write_text(_other("Acme Widgets Inc.", "Acme"))
    (docs / "filing-c.md").write_text(_other("Acme Holdings Corp", "Acme"))
    settings = IndexSettings(path=str(tmp_path_factory.mktemp("index") / "qdrant"))
    report = ingest_paths([docs], settings, show_progress=False)
    assert not report.skipped and report.documents == 3
    assert report.statements == 1 and report.line_items == 7 and report.statements_unread == 0
    return settings


@pytest.mark.parametrize("name", ["JnJ", "J&J", "JNJ"])
def test_an_everyday_name_filters_to_its_company(index: IndexSettings, name: str) -> None:
    with open_index(index) as idx:
        hits = idx.search(f"What were {name}'s inventories at year end?", 3)
        assert hits and {h.document.company for h in hits} == {"JOHNSON & JOHNSON"}


def test_a_contested_name_is_not_used_to_filter_and_the_search_says_so(index: IndexSettings) -> None:
    with open_index(index) as idx:
        hits = idx.search("What are Acme's accounts payable?", 5)
        assert len({h.document.company for h in hits}) > 1
        assert any("'Acme' names more than one company" in note for note in hits.notes)


def test_a_balance_sheet_question_gets_the_statement(index: IndexSettings) -> None:
    with open_index(index) as idx:
        hits = idx.search("Basing your judgments off of the balance sheet, what are the accounts payable?", 3)
        assert hits[0].statement == "balance_sheet" and "11,703" in hits[0].chunk.text
        assert hit_json(1, hits[0])["statement"] == "balance_sheet"
        [sheet] = idx.statements(hits[0].chunk.doc_id)
        payable = next(row for row in sheet.rows if row.label == "Accounts payable")
        assert payable.values == ["11,703", "11,055"] and sheet.periods == ["January 1 2023", "January 2 2022"]
        assert idx.document_text(hits[0].chunk.doc_id)[payable.char_start : payable.char_end].startswith("| Acc")


def test_the_ingest_report_counts_statements_and_unread_pages(tmp_path: Path) -> None:
    """A statement whose rows cannot be read (a title, its vocabulary, no figures) is counted, not tagged."""
    (tmp_path / "filing-a.md").write_text(JNJ)
    unread = "CONSOLIDATED BALANCE SHEETS\n\n| Total assets | Current assets | Inventories | Accounts payable |\n|---|---|---|---|\n"
    (tmp_path / "filing-b.md").write_text(_other("Beta Corp", "Beta") + "\n" + unread)
    result = CliRunner().invoke(app, ["ingest", str(tmp_path), "--index-path", str(tmp_path / "qdrant"), "--json"])
    report = json.loads(result.output[result.output.index("{") :])
    assert (report["statements"], report["line_items"], report["statements_unread"]) == (1, 7, 1)
    table = CliRunner().invoke(app, ["ingest", str(tmp_path / "filing-a.md"), "--index-path", str(tmp_path / "q2")])
    assert "statements_unread" in table.output


def test_the_paper_profile_switches_it_off(tmp_path: Path) -> None:
    (tmp_path / "filing-a.md").write_text(JNJ)
    settings = IndexSettings(path=str(tmp_path / "qdrant"), statements=False, filing_aliases=False)
    report = ingest_paths([tmp_path / "filing-a.md"], settings, show_progress=False)
    assert report.statements == 0 and report.line_items == 0
    with open_index(settings) as idx:
        hits = idx.search("Basing your judgments off of the balance sheet, what are the accounts payable?", 3)
        assert all(h.statement is None for h in hits)
        assert idx.recognise("What were JnJ's inventories?").companies == []
        assert idx.documents()[0].entities.get("aliases") is None
