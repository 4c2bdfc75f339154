"""A pool of problems to re-screen (`finmbs requalify`), read from whatever holds one: a run folder (its
qualified problems and the ones final calibration alone rejected), its qualified.jsonl, a seeds file, or a
dataset `finmbs export` wrote (a folder of veRL / TRL parquet or JSONL rows). A bad line is that line's error, named
with its file and line; the other lines are read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from finmbs.errors import FinmbsError
from finmbs.mbs.stages import Stage
from finmbs.records import Problem, Provenance, Rejection, Snippet, first_error
from finmbs.resources import render_prompt
from finmbs.runs.folder import QUALIFIED, REJECTED, SEEDS
from finmbs.seeds import _problem, _read_text

CONTAMINATION = "contamination.jsonl"  # what an export writes beside its rows: not rows


class PoolError(FinmbsError, ValueError):
    """A pool that cannot be read at all (no such file, no problem in it); one line."""


@dataclass
class Pool:
    """The problems of a pool (unique by id, in file order), the seeds they descend from where the pool
    says, and one error line per line that could not be read."""

    source: Path
    kind: str  # run, problems, dataset
    problems: list[Problem] = field(default_factory=list)
    seeds: list[Problem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    by_id: dict[str, Problem] = field(default_factory=dict, repr=False)


def read_pool(path: str | Path) -> Pool:
    """The pool at `path`: a run folder, an export folder, or a JSONL / parquet file of problems,
    seed rows or training rows."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"pool not found: {path}")
    if path.is_dir() and not is_run_folder(path):
        pool = Pool(source=path, kind="dataset")
        files = [f for f in sorted([*path.glob("*.jsonl"), *path.glob("*.parquet")]) if f.name != CONTAMINATION]
        if not files:
            raise PoolError(f"{path} is neither a run folder (no {SEEDS} or {QUALIFIED}) nor a dataset (no rows)")
        for file in files:
            _read_rows(pool, file)
    elif path.is_dir():
        pool = Pool(source=path, kind="run")
        _read_rows(pool, path / QUALIFIED)
        _read_calibration_rejects(pool, path / REJECTED)
        pool.seeds = _read_seeds(path / SEEDS, pool.errors)
    else:
        pool = Pool(source=path, kind="problems")
        _read_rows(pool, path)
        beside = path.parent / SEEDS
        if beside.is_file() and beside != path:
            pool.seeds = _read_seeds(beside, pool.errors)
        else:  # a seeds file: the seeds are its own problems
            pool.seeds = [p for p in pool.problems if p.provenance.method == "seed"]
    if not pool.problems:
        raise PoolError(f"{path}: no problem could be read" + (f" ({pool.errors[0]})" if pool.errors else ""))
    return pool


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / SEEDS).is_file() or (path / QUALIFIED).is_file())


def _read_seeds(path: Path, errors: list[str]) -> list[Problem]:
    seeds = Pool(source=path, kind="problems", errors=errors)
    if path.is_file():
        _read_rows(seeds, path)
    return seeds.problems


def _read_calibration_rejects(pool: Pool, path: Path) -> None:
    """The problems final calibration alone rejected (hard or stale for the run's policy): every other gate
    passed them, so a new policy may find them in the band. A problem rejected by any other stage is not
    read: re-screening never brings back what a check refused."""
    for number, row in _json_lines(pool, path):
        try:
            rejection = Rejection.model_validate(row)
        except ValidationError as exc:
            where, message = first_error(exc)
            pool.errors.append(f"{path} line {number}: not a rejection record ({where}: {message})")
            continue
        if rejection.stage == Stage.CALIBRATE:
            _add(pool, rejection.problem, path, number)


def _json_lines(pool: Pool, path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of a JSONL file's lines (none when it is absent); a malformed line is the pool's error."""
    rows: list[tuple[int, Any]] = []
    if not path.is_file():
        return rows
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            pool.errors.append(f"{path} line {number}: malformed JSON ({exc.msg} at column {exc.colno})")
    return rows


def _read_rows(pool: Pool, path: Path) -> None:
    """Problems, seed rows or training rows (JSONL, or parquet rows numbered from 1)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[tuple[int, Any]] = list(enumerate(pq.read_table(path).to_pylist(), start=1))
    else:
        rows = _json_lines(pool, path)
    for number, row in rows:
        try:
            problem = from_training_row(row) if isinstance(row, dict) and "prompt" in row else _problem(row, None)
        except ValueError as exc:
            pool.errors.append(f"{path} line {number}: {exc}")
            continue
        _add(pool, problem, path, number)


def _add(pool: Pool, problem: Problem, path: Path, number: int) -> None:
    """One problem per id: an exact repeat is dropped; a different problem under a known id is that line's error."""
    known = pool.by_id.get(problem.id)
    if known is None:
        pool.by_id[problem.id] = problem
        pool.problems.append(problem)
    elif known.question != problem.question or known.answer != problem.answer:
        pool.errors.append(f"{path} line {number}: id '{problem.id}' already read with another question or answer")


def from_training_row(row: dict[str, Any]) -> Problem:
    """A problem from an exported training row: veRL / JSONL (`reward_model`, `extra_info`) or TRL (flat)."""
    info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else row
    answer = (row.get("reward_model") or {}).get("ground_truth") if "reward_model" in row else row.get("answer")
    if answer is None or not str(answer).strip():
        raise ValueError("missing answer (reward_model.ground_truth)")
    if not info.get("id") or not info.get("question"):
        raise ValueError("missing id or question (extra_info)")
    domain = info.get("domain") or "math"
    snippet = _snippet_of(row["prompt"]) if domain == "finance" else None
    if domain == "finance" and snippet is None:
        raise ValueError("a finance row whose prompt holds no <document> excerpt")
    meta: dict[str, Any] = {}
    if info.get("policy") and info.get("band") and info.get("rollouts") is not None:
        meta["difficulty"] = {
            "policy": info["policy"],
            "budget": info.get("budget") or 0,
            "n": info["rollouts"],
            "k": info.get("correct") or 0,
            "band": info["band"],
            "in_budget": bool(info.get("in_budget")),
        }
    if info.get("program"):
        meta["program"] = info["program"]
    try:
        return Problem(
            id=str(info["id"]),
            question=str(info["question"]),
            answer=str(answer),
            domain=domain,
            snippet=snippet,
            entity=info.get("entity"),
            provenance=Provenance(
                seed_id=info.get("seed_id"),
                method=info.get("method") or "mbs",
                stage=info.get("stage") or "leaf",
                tree_path=info.get("tree_path") or "",
            ),
            meta=meta,
        )
    except ValidationError as exc:
        where, message = first_error(exc)
        raise ValueError(f"field {where}: {message}") from None


def _snippet_of(prompt: Any) -> Snippet | None:
    """The excerpt inside a finance training prompt (`prompts/train_prompt_finance.txt`, inverted)."""
    text = prompt[-1]["content"] if isinstance(prompt, list) and prompt else str(prompt)
    marker_q, marker_s = "\x00QUESTION\x00", "\x00SNIPPET\x00"
    template = re.escape(render_prompt("train_prompt_finance", question=marker_q, snippet=marker_s))
    pattern = template.replace(re.escape(marker_s), "(?P<snippet>.*)").replace(re.escape(marker_q), ".*")
    found = re.fullmatch(pattern, text, flags=re.DOTALL)
    return Snippet(text=found.group("snippet")) if found else None
