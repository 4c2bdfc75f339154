"""Ingest real documents into a real Qdrant Edge index with the real MiniLM embedder, then search.

One module-scoped ingest (small real documents: excerpts of two credit agreements, a FinanceBench
8-K PDF, an EDGAR submission cut to four of its documents) is shared by the tests.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.config import IndexSettings
from finmbs.ingest import find_verbatim, ingest_paths, normalize_ws, open_index
from finmbs.ingest.pipeline import chunking
from finmbs.ingest.search import hit_json

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FOOTLOCKER = "FOOTLOCKER_2022_8K_dated-2022-05-20.pdf"


KEEP = ("10-K", "EX-10.2", "EX-21", "EX-23.1")


def _excerpt_submission(text: str) -> str:
    """The EDGAR submission with only four of its twelve documents (to keep embedding time small)."""

    def keep(match: re.Match[str]) -> str:
        return match[0] if match[1] in KEEP else ""

    return re.sub(r"<DOCUMENT>\n<TYPE>([^\n]+).*?</DOCUMENT>\n", keep, text, flags=re.S)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, IndexSettings]:
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED}")
    docs = tmp_path_factory.mktemp("docs")
    agreements = SHARED / "credit_agreements/docs"
    (docs / "brown_forman_excerpt.txt").write_text(
        (agreements / "brown_forman_2023_credit_agreement.txt").read_text()[:30000]
    )
    (docs / "amazon_excerpt.html").write_bytes(
        (agreements / "amazon_2023_term_loan_agreement.html").read_bytes()[:90000]
    )
    shutil.copy(SHARED / "financebench/pdfs" / FOOTLOCKER, docs / FOOTLOCKER)
    nc = (SHARED / "sec_10k/tetra_tech_2004_10k_0001047469-05-000037.nc").read_text(encoding="latin-1")
    (docs / "filings").mkdir()
    (docs / "filings/tetra_tech_2004_10k.nc").write_text(_excerpt_submission(nc), encoding="latin-1")
    settings = IndexSettings(path=str(tmp_path_factory.mktemp("index") / "qdrant"))
    report = ingest_paths([docs], settings, show_progress=False)
    return docs, settings, report


@pytest.fixture
def index(corpus):
    with open_index(corpus[1]) as opened:
        yield opened


def test_ingest_report(corpus):
    report = corpus[2]
    assert report.files == 4 and not report.skipped
    assert report.documents == 3 + len(KEEP)
    assert report.pages >= 4 and report.tables > 10 and report.definitions > 30


def test_documents_metadata_and_verbatim_text(index):
    doc = index.document("tetra_tech_2004_10k/6-EX-21")
    assert (doc.doc_type, doc.company, doc.period) == ("EX-21", "TETRA TECH INC", "20041003")
    text = index.document_text(doc.doc_id)
    chunks = index.chunks(doc.doc_id)
    assert chunks and all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert any("| Tetra Tech Canada Ltd. | ONTARIO, CANADA |" in c.text for c in chunks)
    pdf = index.document("FOOTLOCKER_2022_8K_dated-2022-05-20")
    assert pdf.n_pages == 4 and pdf.company == "FOOTLOCKER" and pdf.doc_type == "8-K" and pdf.summary
    pdf_chunks = index.chunks(pdf.doc_id)
    assert {c.page for c in pdf_chunks} == {1, 2, 3, 4}
    passage = normalize_ws(pdf_chunks[2].text)
    assert find_verbatim(passage, index.document_text(pdf.doc_id)) == (pdf_chunks[2].char_start, pdf_chunks[2].char_end)


def test_search_finds_definition_with_section_path(index):
    hits = index.search("definition of Adjusted Term SOFR", 5)
    top = [h for h in hits if h.chunk.kind == "definition"]
    assert top and top[0].chunk.term.startswith("Adjusted Term SOFR")
    assert top[0].chunk.section_path.endswith("Section 1.01 Defined Terms")
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_filters_exclude_company_doc_type_period(index):
    query = "shareholder votes for the election of directors"
    first = index.search(query, 5)[0].chunk.doc_id
    assert first == "FOOTLOCKER_2022_8K_dated-2022-05-20"
    assert all(h.chunk.doc_id != first for h in index.search(query, 20, exclude_doc_ids=[first]))
    assert {h.chunk.doc_id for h in index.search(query, 10, company="FOOT LOCKER, INC.")} == {
        "FOOTLOCKER_2022_8K_dated-2022-05-20"
    }
    assert {h.document.doc_type for h in index.search(query, 10, doc_type="10-k")} == {"10-K"}
    assert {h.document.company for h in index.search(query, 10, period="2004")} == {"TETRA TECH INC"}
    none = index.search(query, 5, company="nonexistent corp")
    assert none == [] and "no document of 'nonexistent corp' in the index" in none.notes[0]


def test_a_query_naming_a_company_the_index_lacks_says_so(index):
    # as `--company` does: the question asks about a company none of the index's documents is of
    hits = index.search("What was Tesla's revenue in FY2022?", 5)
    assert hits and "the query names 'Tesla', and no company of the index goes by that name" in hits.notes[0]
    assert "FOOTLOCKER" in hits.notes[0]  # the index's companies are listed
    held = index.search("What was Foot Locker's dividend?", 3)  # a company it holds
    assert held and not any("no company of the index" in note for note in held.notes)
    assert not index.search("What is the Company's total debt?", 5).notes  # no company named


def test_a_company_filter_names_a_company_as_a_query_would(index):
    # `--company Tetra` found nothing while "Tetra's ..." in the query chose TETRA TECH INC's filing
    query = "net revenue of the company"
    tetra = {d.doc_id for d in index.documents() if d.company == "TETRA TECH INC"}
    short = index.search(query, 5, company="Tetra")
    assert short and {h.chunk.doc_id for h in short} <= tetra and not short.notes
    same = index.search(query, 5, company="Tetra Tech, Inc.")
    assert {h.chunk.chunk_id for h in short} == {h.chunk.chunk_id for h in same}  # equal RRF scores tie in any order


def test_similar_documents_unseen(index):
    seed = index.document("brown_forman_excerpt")
    similar = index.similar_documents(seed.summary, 3, exclude_doc_ids=[seed.doc_id])
    assert similar and seed.doc_id not in {d.doc_id for d, _ in similar}
    assert similar[0][0].doc_id == "amazon_excerpt"


def test_reingest_is_idempotent_and_changed_file_replaces(corpus):
    docs, settings, _ = corpus
    with open_index(settings) as index:
        before = {d.doc_id: len(index.chunks(d.doc_id)) for d in index.documents()}
    again = ingest_paths([docs], settings, show_progress=False)
    assert (again.unchanged, again.documents, again.chunks) == (4, 0, 0)
    changed = docs / "brown_forman_excerpt.txt"
    changed.write_text(
        changed.read_text() + "\nSECTION 9.99 Added Provision. The Lenders agree to a new test clause.\n"
    )
    third = ingest_paths([docs], settings, show_progress=False)
    assert (third.unchanged, third.replaced, third.documents) == (3, 1, 1)
    with open_index(settings) as index:
        after = {d.doc_id: len(index.chunks(d.doc_id)) for d in index.documents()}
        assert set(after) == set(before)
        new_chunks = index.chunks("brown_forman_excerpt")
        assert len({c.chunk_id for c in new_chunks}) == len(new_chunks) == after["brown_forman_excerpt"]
        assert new_chunks[-1].section_path.endswith("Section 9.99 Added Provision")
        assert index.search("Lenders agree to a new test clause", 1)[0].chunk.doc_id == "brown_forman_excerpt"
    # unchanged files chunked another way (another chunk overlap; an older chunker) are ingested again
    other = settings.model_copy(update={"chunk_overlap": settings.chunk_overlap + 1})
    fourth = ingest_paths([docs], other, show_progress=False)
    assert (fourth.unchanged, fourth.replaced, fourth.documents) == (0, 4, len(after))
    back = ingest_paths([docs], settings, show_progress=False)
    assert (back.unchanged, back.replaced) == (0, 4)
    with open_index(settings) as index:
        assert {d.chunking for d in index.documents()} == {chunking(settings)} and "chunker-v" in chunking(settings)
        assert {d.doc_id: len(index.chunks(d.doc_id)) for d in index.documents()} == after


def test_search_cli_table_and_json(corpus):
    runner = CliRunner()
    path = corpus[1].path
    result = runner.invoke(
        app, ["search", "subsidiaries jurisdiction of formation", "-k", "3", "--index-path", path, "--json"]
    )
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert [h["rank"] for h in hits] == [1, 2, 3] and hits[0]["doc_id"] == "tetra_tech_2004_10k/6-EX-21"
    assert set(hit_json(1, _any_hit(path)).keys()) == set(hits[0].keys())
    excluded = runner.invoke(
        app,
        [
            "search",
            "subsidiaries jurisdiction of formation",
            "--exclude-doc",
            "tetra_tech_2004_10k/6-EX-21",
            "--doc-type",
            "EX-21",
            "--index-path",
            path,
            "--json",
        ],
    )
    assert json.loads(excluded.stdout) == []
    table = runner.invoke(app, ["search", "facility fee", "-k", "2", "--index-path", path])
    assert table.exit_code == 0 and "score" in table.stdout and "section" in table.stdout


def test_search_hits_name_their_file_relative_to_the_working_directory(corpus, monkeypatch):
    docs, settings, _ = corpus
    query = [
        "search",
        "subsidiaries jurisdiction of formation",
        "-k",
        "1",
        "--index-path",
        str(Path(settings.path).resolve()),
        "--json",
    ]
    monkeypatch.chdir(docs)
    [hit] = json.loads(CliRunner().invoke(app, query).stdout)
    assert hit["source_path"] == "filings/tetra_tech_2004_10k.nc"
    monkeypatch.chdir(Path(settings.path).parent)  # the file is not under the cwd: its stored path, as it is
    [hit] = json.loads(CliRunner().invoke(app, query).stdout)
    assert hit["source_path"] == str((docs / "filings/tetra_tech_2004_10k.nc").resolve())


def _any_hit(path: str):
    with open_index(IndexSettings(path=path)) as index:
        return index.search("anything", 1)[0]
