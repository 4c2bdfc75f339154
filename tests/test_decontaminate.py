"""Decontamination: planted benchmark questions and seed copies are caught against the real eval sets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from export_fixtures import NEW_SNIPPET, finance_run, math_run, problem

from finmbs.export import export_run
from finmbs.export.decontaminate import Decontaminator, load_eval_sets
from finmbs.ngrams import NgramIndex, Reference, words


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def benchmark(shared_data: Path, name: str, key: str, value: str) -> dict:
    return next(row for row in rows_of(shared_data / name / "test.jsonl") if str(row[key]) == value)


def test_planted_benchmark_questions_and_seed_copies_are_dropped(tmp_path, shared_data):
    long_one = benchmark(shared_data, "math500", "unique_id", "test/precalculus/807.json")
    short_one = benchmark(shared_data, "math500", "unique_id", "test/counting_and_probability/116.json")
    gsm = rows_of(shared_data / "gsm8k" / "test.jsonl")[17]
    planted = [
        # a real MATH-500 problem with a lead-in: shares its 13-grams
        problem(
            "plant/math500", "Here is a good exercise. " + long_one["problem"], long_one["answer"], "s1", "t9/0", k=2
        ),
        # a short MATH-500 problem (4 words) asked verbatim: caught by exact match
        problem("plant/short", short_one["problem"], short_one["answer"], "s2", "t9/0", k=2),
        # a GSM8K question with its numbers kept and a different final ask appended
        problem("plant/gsm8k", gsm["question"] + " Then double it.", "1", "s2", "t9/1", k=2),
        # a copy of seed s1 with one extra sentence
        problem(
            "plant/seed",
            "Consider the cubic below. Let f(x) = x^3 - 6x^2 + 11x - 6. Find the sum of the "
            "squares of the roots of f, then multiply it by the product of the roots.",
            "84",
            "s1",
            "t9/1",
            k=4,
        ),
    ]
    run = math_run(tmp_path / "run", extra_qualified=planted)
    report = export_run(run, "verl", split="train", eval_data=[shared_data])
    assert report.eval_sets["math500"] == 500 and report.eval_sets["gsm8k"] == 1319 and report.seeds_checked == 3
    assert report.dropped == 4 and report.flagged == 0
    assert report.contamination_by_source == {"math500": 2, "gsm8k": 1, "seeds": 1}
    kept = pq.read_table(Path(report.out) / "train.parquet").column("extra_info").to_pylist()
    assert sorted(row["id"] for row in kept) == ["s1/t0/0", "s1/t0/0.0", "s2/t0/0"]  # clean ones all survive
    hits = {h["problem_id"]: h for h in rows_of(Path(report.out) / "contamination.jsonl")}
    assert hits["plant/math500"]["ref"] == "test/precalculus/807.json" and hits["plant/math500"]["coverage"] == 1.0
    assert hits["plant/short"]["ref"] == "test/counting_and_probability/116.json"
    assert (hits["plant/seed"]["source"], hits["plant/seed"]["ref"]) == ("seeds", "s1")
    saved = json.loads((Path(report.out) / "export_report.json").read_text())
    assert saved["dropped"] == 4 and saved["contamination_by_source"]["seeds"] == 1


def test_flag_keeps_rows_and_marks_them(tmp_path, shared_data):
    fb = rows_of(shared_data / "financebench" / "financebench_open_source.jsonl")[3]
    leaked = NEW_SNIPPET.model_copy(update={"text": NEW_SNIPPET.text + " Note: " + fb["question"]})
    planted = [
        problem("plant/fb-question", fb["question"], fb["answer"], "f1", "t9/0", snippet=NEW_SNIPPET, k=3),
        problem(
            "plant/fb-snippet",
            "What is the Applicable Margin on Base Rate Loans for Globex, in percent per "
            "annum, when no leverage step-up applies?",
            "1.10%",
            "f1",
            "t9/1",
            snippet=leaked,
            k=3,
        ),
    ]
    run = finance_run(tmp_path / "run", extra_qualified=planted)
    report = export_run(run, "jsonl", split="train", eval_data=[shared_data], policy="flag")
    assert (report.dropped, report.flagged, report.contamination_by_source) == (0, 2, {"financebench": 2})
    rows = {r["extra_info"]["id"]: r["extra_info"] for r in rows_of(Path(report.out) / "train.jsonl")}
    assert rows["plant/fb-question"]["contamination"] == f"financebench:{fb['financebench_id']}"
    assert rows["plant/fb-snippet"]["contamination"] == f"financebench:{fb['financebench_id']}"
    assert rows["f1/t0/0"]["contamination"] == ""
    fields = {h["problem_id"]: h["field"] for h in rows_of(Path(report.out) / "contamination.jsonl")}
    assert fields == {"plant/fb-question": "question", "plant/fb-snippet": "snippet"}


def test_extra_eval_jsonl_and_bad_lines(tmp_path):
    extra = tmp_path / "private_eval.jsonl"
    extra.write_text(
        json.dumps(
            {
                "id": "pe-1",
                "prompt": [
                    {
                        "role": "user",
                        "content": "Find how many odd positive integers n below 2000 make n^2 + 3n + 5 divisible by 121 and leave remainder 2.",
                    }
                ],
            }
        )
        + "\n"
    )
    sets = load_eval_sets([extra])
    assert sets == {"private_eval": [Reference("private_eval", "pe-1", sets["private_eval"][0].text)]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "fine"}\n{"answer": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:line 2: no question text"):
        load_eval_sets([bad])
    (tmp_path / "data" / "math500").mkdir(parents=True)
    (tmp_path / "data" / "math500" / "test.jsonl").write_text('{"problem": "p", "answer": "1"}\n{"problem": \n')
    with pytest.raises(ValueError, match=r"data/math500/test.jsonl:line 2: malformed row: not valid JSON"):
        load_eval_sets([tmp_path / "data"])
    with pytest.raises(FileNotFoundError, match="evaluation data not found"):
        load_eval_sets([tmp_path / "missing"])
    run = math_run(tmp_path / "run")
    report = export_run(run, "jsonl", split="train", eval_data=[extra])
    assert report.eval_sets == {"private_eval": 1} and report.contamination_by_source == {"private_eval": 1}
    assert report.dropped == 1 and report.splits["train"].rows == 2


def test_ngram_index_rules():
    index = NgramIndex(
        [
            Reference("bench", "long", "the quick brown fox jumps over the lazy dog"),
            Reference("bench", "short", "compute two plus"),
            Reference("bench", "tiny", "hello there"),
        ],
        n=5,
        min_words=3,
    )
    ref, coverage, gram = index.overlaps("Yesterday THE quick, brown fox jumps over the lazy cat.")
    assert (ref.ref, coverage, gram) == ("long", 0.8, "the quick brown fox jumps")
    assert index.overlaps("Yesterday THE quick, brown fox jumps high.") is None  # 1 of 5 grams: below half
    assert index.overlaps("please compute two plus three")[0].ref == "short"
    assert index.overlaps("well hello there friend") is None  # below min_words: exact match only
    assert index.overlaps("Hello, there!", whole=True)[0].ref == "tiny"
    assert words("\\frac{3}{20} = 0.15") == ["frac", "3", "20", "0", "15"]
    seeds = [problem("s1", "the quick brown fox jumps over the lazy dog", "1", "s1", "0")]
    checker = Decontaminator({}, seeds, n=5)
    assert checker.check(seeds[0]) is None  # a seed is not a copy of itself
    assert (
        checker.check(problem("x", "so the quick brown fox jumps over the lazy dog", "1", "s1", "t0/0")).source
        == "seeds"
    )


def test_real_training_data_copies_are_caught_and_stock_phrasing_is_not(shared_data):
    """DAPO-Math-17K holds AMC 2023 and MATH-500 problems verbatim; its other problems share only phrasing."""
    rows = rows_of(shared_data / "dapo_math_17k" / "dapo_math_17k_sample2000.jsonl")
    checker = Decontaminator(load_eval_sets([shared_data]), [])
    hits = {r["id"]: h for r in rows if (h := checker.check(problem(str(r["id"]), r["problem"], r["answer"], "", "")))}
    assert {i: (h.source, h.ref) for i, h in hits.items()} == {
        6199: ("math500", "test/intermediate_algebra/345.json"),
        7147: ("math500", "test/geometry/947.json"),
        15848: ("amc23", "46"),
        15850: ("amc23", "47"),
        15885: ("amc23", "10"),
    }
    # 5963 shares AIME 2024 #65's answer-format sentence ("... m, n, and p are positive integers ...") only
    stock = next(r for r in rows if r["id"] == 5963)
    assert "relatively prime" in stock["problem"] and 5963 not in hits
