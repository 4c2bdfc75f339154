"""The run loader: a finished (or partly finished) run folder read into typed records, naming file and line
on bad input. Export, report, audit and the run's metrics read run folders through it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from finmbs.errors import FinmbsError
from finmbs.records import RULES_VERSION, Problem, Rejection, SeedTrees, first_error
from finmbs.runs.folder import CONFIG, METRICS, QUALIFIED, REJECTED, SEEDS, TREES

M = TypeVar("M", bound=BaseModel)


class RunReadError(FinmbsError, ValueError):
    """A run file that cannot be read; the message names the file and the line or record."""


@dataclass
class Run:
    """Everything a run folder holds, as records."""

    root: Path
    config: dict[str, Any] = field(default_factory=dict)
    seeds: list[Problem] = field(default_factory=list)
    trees: dict[str, SeedTrees] = field(default_factory=dict)
    qualified: list[Problem] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.root.resolve().name


def _error_text(exc: ValidationError) -> str:
    where, message = first_error(exc)
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where or 'record'}: {message}{more}"


def read_records(path: Path, model: type[M]) -> list[M]:
    """Validate every line of a JSONL file; a torn final line (killed writer) is skipped."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not path.read_bytes().endswith(b"\n"):
                continue
            raise RunReadError(f"{path} line {number}: not JSON ({exc.msg})") from None
        try:
            records.append(model.model_validate(data))
        except ValidationError as exc:
            raise RunReadError(f"{path} line {number}: not a {model.__name__}: {_error_text(exc)}") from None
    return records


def unique_by_id(problems: list[Problem], path: Path) -> list[Problem]:
    """One row per id: exact repeats (two writers on one folder) dropped; differing rows with one id refused."""
    seen: dict[str, tuple[int, Problem]] = {}
    for number, problem in enumerate(problems, start=1):
        if problem.id not in seen:
            seen[problem.id] = (number, problem)
        elif seen[problem.id][1] != problem:
            raise RunReadError(
                f"{path}: rows {seen[problem.id][0]} and {number} share id '{problem.id}' "
                "but differ; the folder was written by two runs at once"
            )
    return [problem for _, problem in seen.values()]


def read_json(path: Path, model: type[M]) -> M:
    """One JSON file as a record (a tree file: `SeedTrees`); RunReadError names the file."""
    try:
        return model.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise RunReadError(f"{path}: not a {model.__name__} file: {_error_text(exc)}") from None


def load_run(root: str | Path) -> Run:
    """Load a run folder (layout in `finmbs.runs.folder`); missing parts are empty, bad parts raise RunReadError."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"run folder not found: {root}")
    if not (root / SEEDS).exists() and not (root / QUALIFIED).exists():
        raise RunReadError(f"{root} is not a run folder (no {SEEDS} or {QUALIFIED})")
    run = Run(root=root)
    config_path = root / CONFIG
    if config_path.exists():
        try:
            run.config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise RunReadError(f"{config_path}: not YAML ({exc})") from None
    run.seeds = read_records(root / SEEDS, Problem)
    for tree_file in sorted((root / TREES).glob("*.json")):
        trees = read_json(tree_file, SeedTrees)
        run.trees[trees.seed.id] = trees
    run.qualified = unique_by_id(read_records(root / QUALIFIED, Problem), root / QUALIFIED)
    run.rejected = read_records(root / REJECTED, Rejection)
    metrics_path = root / METRICS
    if metrics_path.exists():
        try:
            run.metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunReadError(f"{metrics_path} line {exc.lineno}: not JSON ({exc.msg})") from None
        run.metrics = current_metrics(run.metrics, metrics_path)
    return run


def rules_of(metrics: dict[str, Any]) -> int:
    """The rules version a metrics.json was written under (1: before versions were written)."""
    return int(metrics.get("rules_version", 1))


def current_metrics(metrics: dict[str, Any], path: Path) -> dict[str, Any]:
    """metrics.json as this finmbs's rules define it: one written under older rules has the metrics whose
    meaning changed recomputed from its own counts (seed conversion over the finished seeds, version 2),
    the per-form leak counts it never had left absent rather than read as 0; one a newer finmbs wrote is
    refused."""
    version = rules_of(metrics)
    if version > RULES_VERSION:
        raise RunReadError(
            f"{path}: written under finmbs rules version {version}; this finmbs reads up to {RULES_VERSION}"
        )
    if version < 2:
        done = metrics.get("seeds_done") or 0
        metrics = {**metrics, "seed_conversion": (metrics.get("seeds_converted") or 0) / done if done else 0.0}
    return metrics
