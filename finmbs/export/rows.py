"""Problem -> training row: the columns veRL reads (data_source, prompt, ability, reward_model, extra_info).

The same rows feed every format (veRL parquet, Hugging Face dataset, JSONL), so lineage is identical everywhere.
`data_source` is what `finmbs.reward.compute_score` routes on.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from finmbs.mbs.solve import train_prompt
from finmbs.records import DifficultyReport, Problem
from finmbs.verify.program import program_text

DATA_SOURCES = {"math": "finmbs/math", "finance": "finmbs/finance"}

EXTRA_INFO = pa.struct(
    [
        ("index", pa.int64()),
        ("split", pa.string()),
        ("id", pa.string()),
        ("domain", pa.string()),
        ("seed_id", pa.string()),
        ("tree_path", pa.string()),
        ("method", pa.string()),
        ("stage", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("entity", pa.string()),
        ("snippet_id", pa.string()),
        ("doc_id", pa.string()),
        ("document_sha256", pa.string()),
        ("policy", pa.string()),
        ("budget", pa.int64()),
        ("band", pa.string()),
        ("pass_rate", pa.float64()),
        ("rollouts", pa.int64()),
        ("correct", pa.int64()),
        ("in_budget", pa.bool_()),
        ("contamination", pa.string()),
        # verify.programs: the program that computes the answer (with the children's functions it calls) and the
        # answer stated before a relabel; null without programs
        ("program", pa.string()),
        ("relabeled_from", pa.string()),
    ]
)

SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", EXTRA_INFO),
    ]
)


def prompt_messages(problem: Problem) -> list[dict[str, str]]:
    """The chat prompt of a problem: the prompt final calibration asked the target with (`solve.train_prompt`),
    so the target's measured band carries over to training; a finance problem carries its snippet inside it."""
    return [{"role": "user", "content": train_prompt(problem)}]


def difficulty(problem: Problem) -> DifficultyReport | None:
    """The target-policy DifficultyReport final calibration stored in meta["difficulty"]."""
    data = problem.meta.get("difficulty")
    return DifficultyReport.model_validate(data) if data else None


def snippet_id(problem: Problem) -> str | None:
    """A stable id of the snippet text (first 16 hex digits of its SHA-256)."""
    if problem.snippet is None:
        return None
    return hashlib.sha256(problem.snippet.text.encode("utf-8")).hexdigest()[:16]


@lru_cache(maxsize=1024)
def _file_sha256(path: str) -> str | None:
    file = Path(path)
    if not file.is_file():
        return None
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def document_sha256(problem: Problem) -> str | None:
    """The SHA-256 of the snippet's source document: from meta, else hashed from the file when it is readable."""
    known = problem.meta.get("document_sha256")
    if known:
        return str(known)
    if problem.snippet is None or not problem.snippet.source_path:
        return None
    return _file_sha256(problem.snippet.source_path)


def training_row(problem: Problem, index: int, split: str, contamination: str = "") -> dict[str, Any]:
    """One veRL row with full lineage in extra_info."""
    report = difficulty(problem)
    return {
        "data_source": DATA_SOURCES[problem.domain],
        "prompt": prompt_messages(problem),
        "ability": problem.domain,
        "reward_model": {"style": "rule", "ground_truth": problem.answer},
        "extra_info": {
            "index": index,
            "split": split,
            "id": problem.id,
            "domain": problem.domain,
            "seed_id": problem.provenance.seed_id,
            "tree_path": problem.provenance.tree_path,
            "method": problem.provenance.method,
            "stage": problem.provenance.stage,
            "question": problem.question,
            "answer": problem.answer,
            "entity": problem.entity,
            "snippet_id": snippet_id(problem),
            "doc_id": problem.snippet.doc_id if problem.snippet else None,
            "document_sha256": document_sha256(problem),
            "policy": report.policy if report else None,
            "budget": report.budget if report else None,
            "band": report.band if report else None,
            "pass_rate": report.success_rate if report else None,
            "rollouts": report.n if report else None,
            "correct": report.k if report else None,
            "in_budget": report.in_budget if report else None,
            "contamination": contamination,
            "program": program_text(problem.meta),
            "relabeled_from": problem.meta.get("relabeled_from"),
        },
    }


def rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as an Arrow table with the fixed veRL schema (stable types even when a column is all null)."""
    return pa.Table.from_pylist(rows, schema=SCHEMA)
