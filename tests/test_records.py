"""Records round-trip through JSON exactly."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from finmbs.records import (
    Chunk,
    Decision,
    DecompositionTree,
    DifficultyReport,
    Document,
    Problem,
    Provenance,
    Rejection,
    RoleUsage,
    Rollout,
    RunMetrics,
    Snippet,
    SyntheticTree,
    Trace,
    TreeNode,
)


def sample_tree() -> DecompositionTree:
    snippet = Snippet(
        text="Total Net Leverage Ratio shall not exceed 3.50:1.00",
        doc_id="d1",
        section_path="ARTICLE VII",
        page=3,
        char_start=10,
        char_end=61,
    )
    root = Problem(
        id="s1", question="Max leverage?", answer="3.50:1.00", domain="finance", snippet=snippet, entity="Acme"
    )
    child = Problem(
        id="s1.0",
        question="What ratio?",
        answer="3.5",
        provenance=Provenance(seed_id="s1", method="mbs", stage="decompose", tree_path="0.0", parent_ids=["s1"]),
    )
    report = DifficultyReport(policy="pi", budget=8192, n=8, k=3, band="goldilocks", in_budget=True)
    node = TreeNode(
        problem=root,
        trace=Trace(text="... Final answer: 3.50:1.00", answer="3.50:1.00", verified=True),
        children=[TreeNode(problem=child, path="0.0")],
        student_accuracy={"s": 0.0},
        conditioned_accuracy={"s": 0.25},
        target=report,
        decisions=[Decision(stage="decompose", outcome="accepted", reason="effective")],
    )
    return DecompositionTree(seed_id="s1", root=node)


def test_tree_round_trip():
    tree = sample_tree()
    again = DecompositionTree.model_validate_json(tree.model_dump_json())
    assert again == tree
    assert [n.path for n in again.root.walk()] == ["0", "0.0"]
    assert again.root.target.qualified and not again.root.is_leaf


@pytest.mark.parametrize(
    "record",
    [
        Document(doc_id="d", source_path="a.pdf", sha256="x", entities={"borrower": ["Acme"]}),
        Chunk(chunk_id="c", text="t", kind="definition", term="EBITDA"),
        Rollout(text="x", extracted_answer=None, reward=0.0, finish_reason="length", completion_tokens=5),
        Rejection(problem=Problem(id="p", question="q", answer="a"), stage="leaf", reason="too easy"),
        SyntheticTree(seed_id="s", index=0, root=TreeNode(problem=Problem(id="p", question="q", answer="a"))),
    ],
)
def test_records_round_trip(record):
    assert type(record).model_validate_json(record.model_dump_json()) == record


def test_metrics_rates():
    metrics = RunMetrics(
        seeds_in=5,  # one unfinished: conversion is over the finished seeds, as tokens per seed are
        seeds_done=4,
        seeds_converted=3,
        descendants=10,
        goldilocks=6,
        qualified=4,
        usage={"teacher": RoleUsage(cache_hits=2), "target": RoleUsage(cache_hits=3)},
    )
    summary = summary_again = metrics.summary()
    assert summary["seed_conversion"] == 0.75 and summary["qualified_rate"] == 0.4
    assert summary_again["cache_hits"] == 5
    assert RunMetrics.model_validate_json(metrics.model_dump_json()) == metrics


def test_unknown_field_rejected():
    with pytest.raises(ValidationError):
        Problem(id="p", question="q", answer="a", snipet=None)


def test_band_report():
    hard = DifficultyReport(policy="pi", budget=16, n=8, k=0, band="hard", in_budget=False, verified_hard=True)
    assert not hard.qualified and hard.success_rate == 0


def test_a_rejection_reason_lists_the_traces_answers_last():
    p = Problem(id="x", question="q", answer="1")
    unverified = Rejection(
        problem=p,
        stage="leaf",
        reason="unverified: no verified trace after 1x2 tries; answers: t#0: '6' (stop), t#1: '0' (stop)",
    )
    assert unverified.brief == "unverified: no verified trace after 1x2 tries"
    assert unverified.answers == ["t#0: '6' (stop)", "t#1: '0' (stop)"]
    too_easy = Rejection(problem=p, stage="leaf", reason="too easy: weakest student s accuracy 1.000 > alpha 0.8")
    assert too_easy.brief == too_easy.reason and too_easy.answers == []
