"""Benchmark definitions and loaders on the real shared files and a SecQue-schema fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finmbs.config import ConfigError
from finmbs.evaluate.benchmarks import known_benchmarks, load_benchmark
from finmbs.evaluate.contexts import SkipItem, build_prompt
from finmbs.evaluate.loaders import load_items

FIXTURES = Path(__file__).parent / "fixtures"


def test_every_shipped_benchmark_definition_loads():
    assert set(known_benchmarks()) >= {"financebench", "secque", "math500", "aime2024", "amc23", "gsm8k"}
    for name in known_benchmarks():
        bench = load_benchmark(name)
        assert bench.default_mode in bench.modes


def test_unknown_benchmark_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unknown benchmark 'nope'; known: aime2024, amc23, financebench"):
        load_benchmark("nope")


def test_financebench_real_file(shared_data):
    items, skipped = load_items(load_benchmark("financebench"), shared_data / "financebench")
    assert len(items) == 110 and skipped == []
    first = items[0]
    assert first.id == "financebench_id_04672" and first.answer == "$8.70" and first.domain == "finance"
    assert first.question_type == "metrics-generated" and first.company == "3M" and first.doc_name == "3M_2018_10K"
    assert first.evidence[0].page == 57 and "Property, plant and equipment" in first.evidence[0].text
    assert {i.question_type for i in items} == {"metrics-generated", "domain-relevant", "novel-generated"}


def test_math_benchmarks_real_files(shared_data):
    math500, skipped = load_items(load_benchmark("math500"), shared_data / "math500")
    assert len(math500) == 500 and not skipped
    assert math500[0].id == "test/precalculus/807.json" and math500[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert math500[0].question_type == "Precalculus" and len({i.question_type for i in math500}) == 7

    aime, _ = load_items(load_benchmark("aime2024"), shared_data / "aime2024")
    assert len(aime) == 30 and aime[0].id == "60" and aime[0].answer == "204" and aime[0].question_type == "aime2024"

    amc, _ = load_items(load_benchmark("amc23"), shared_data / "amc23")
    assert len(amc) == 40 and amc[0].answer == "27"  # stored as 27.0

    gsm, _ = load_items(load_benchmark("gsm8k"), shared_data / "gsm8k" / "test.jsonl")
    assert len(gsm) == 1319 and gsm[0].id == "gsm8k-0" and gsm[0].answer == "18"
    assert all("####" not in i.answer and "," not in i.answer for i in gsm)


def test_secque_fixture_in_the_hub_schema():
    bench = load_benchmark("secque")
    items, skipped = load_items(bench, FIXTURES / "secque")
    assert [i.id for i in items] == ["ratio-0001", "ratio-0002", "risk-0001"] and not skipped
    assert items[0].question_type == "Ratio" and items[2].question_type == "Risk"
    assert items[0].context.startswith("Example Corp. 10-K form")
    prompt = build_prompt(bench, items[0], "oracle")
    assert "Total current liabilities | 145,308" in prompt and items[0].question in prompt
    assert "Final answer:" in prompt


def test_malformed_rows_are_skipped_with_file_and_line(tmp_path, shared_data):
    good = (shared_data / "aime2024" / "test.jsonl").read_text().splitlines()[:2]
    rows = [good[0], "{not json", json.dumps({"id": 7, "problem": "What is 1+1?"}), good[1], good[0], "[1, 2]"]
    data = tmp_path / "test.jsonl"
    data.write_text("\n".join(rows) + "\n")
    items, skipped = load_items(load_benchmark("aime2024"), data)
    assert [i.id for i in items] == ["60", "61"]
    assert [(s.id, s.reason) for s in skipped] == [
        ("test.jsonl:line 2", "malformed row: not valid JSON (Expecting property name enclosed in double quotes)"),
        ("test.jsonl:line 3", "malformed row: missing or empty field 'answer'"),
        ("test.jsonl:line 5", "malformed row: duplicate id '60'"),
        ("test.jsonl:line 6", "malformed row: not a JSON object"),
    ]


def test_missing_data_folder_and_offline_hub_are_clear(tmp_path):
    bench = load_benchmark("math500")
    with pytest.raises(FileNotFoundError, match="no math500 files"):
        load_items(bench, tmp_path)
    with pytest.raises(FileNotFoundError, match="pass --data PATH"):
        load_items(bench, None)  # HF_HUB_OFFLINE=1 and nothing cached


def test_oracle_prompt_from_evidence_text_or_the_real_pdf_page(shared_data):
    bench = load_benchmark("financebench")
    items, _ = load_items(bench, shared_data / "financebench")
    item = items[0]  # 3M_2018_10K, zero-indexed page 57: the balance sheet
    from_text = build_prompt(bench, item, "oracle")
    assert "[3M_2018_10K, page 58]" in from_text and item.evidence[0].text.strip()[:40] in from_text
    from_pdf = build_prompt(bench, item, "oracle", pdf_dir=shared_data / "financebench" / "pdfs")
    assert "Consolidated Balance Shee t" in from_pdf and "Accounts receivable — net of allowances" in from_pdf
    assert "Document excerpts" not in build_prompt(bench, item, "closed-book")
    missing = next(i for i in items if i.doc_name == "3M_2023Q2_10Q")
    with pytest.raises(SkipItem, match="evidence PDF 3M_2023Q2_10Q.pdf not found"):
        build_prompt(bench, missing, "oracle", pdf_dir=shared_data / "financebench" / "pdfs")
