"""The labeled set bench/bench_labels.py measures verification on: it loads as seeds, its finance passages are
verbatim in the shipped agreements, and right and wrong labels are balanced in each domain."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from finmbs.ingest.verbatim import find_verbatim, normalize_ws
from finmbs.seeds import load_seeds

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "bench" / "data" / "labels.jsonl"


@pytest.fixture(scope="module")
def problems():
    return load_seeds(LABELS)


def test_loads_with_the_seed_loader_and_every_row_is_labeled(problems):
    assert len(problems) >= 44
    for p in problems:
        assert p.meta["label"] in ("right", "wrong"), p.id
        if p.meta["label"] == "wrong":
            assert p.meta["right_answer"] and p.meta["flaw"], p.id
            assert normalize_ws(p.meta["right_answer"]) != normalize_ws(p.answer), p.id
        else:
            assert "right_answer" not in p.meta and "flaw" not in p.meta, p.id


def test_balanced_per_domain_and_label(problems):
    counts = Counter((p.domain, p.meta["label"]) for p in problems)
    assert set(counts) == {("math", "right"), ("math", "wrong"), ("finance", "right"), ("finance", "wrong")}
    assert len(set(counts.values())) == 1, counts  # as many right as wrong, as many math as finance


def test_finance_passages_are_verbatim_in_their_shipped_document(problems):
    finance = [p for p in problems if p.domain == "finance"]
    assert finance
    for p in finance:
        assert p.snippet and p.snippet.doc_id and p.entity, p.id
        path = ROOT / p.snippet.source_path
        assert path.parent == ROOT / "corpora" / "finance" / "docs" and path.stem == p.snippet.doc_id, p.id
        document = normalize_ws(path.read_text(encoding="utf-8"))
        assert find_verbatim(normalize_ws(p.snippet.text), document), f"{p.id}: passage not verbatim in {path.name}"


def test_finance_figures_the_flaws_name_come_from_the_passage(problems):
    """The day counts and rates the finance labels turn on are in the passage shown, not only in the question."""
    by_id = {p.id: p for p in problems}
    expect = {
        "f-al-undrawn-fee-daycount": "360-day year",
        "f-av-commitment-fee-daycount": "three hundred sixty (360)",
        "f-bf-abr-daycount": "365 days",
        "f-al-same-day": "one (1) day’s interest",
        "f-al-default-rate": "(2.0%)",
        "f-av-margin-boundary": "less than or equal to 0.75 to 1.00",
        "f-ri-leverage-cash": "in excess of $30,000,000",
    }
    for seed_id, figure in expect.items():
        assert figure in by_id[seed_id].snippet.text, seed_id


def test_the_file_is_what_its_generator_writes(tmp_path):
    """labels.jsonl is generated (answers computed in Python); a hand edit that the generator would undo fails."""
    before = LABELS.read_text(encoding="utf-8")
    out = tmp_path / "labels.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "data" / "make_labels.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert out.read_text(encoding="utf-8") == before
    rows = [json.loads(line) for line in before.splitlines()]
    assert len({r["id"] for r in rows}) == len(rows)
