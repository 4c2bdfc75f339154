"""Seed files: JSONL rows -> verified seed Problems, every bad line reported before any model call.

One JSON object per line: `id`, `question`, `answer`, optional `domain`, `snippet` (an object
or a plain string), `entity` and `meta` (and `provenance`, so a run's qualified.jsonl reads back).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from finmbs.records import Problem, Provenance, first_error

_FIELDS = {"id", "question", "answer", "domain", "snippet", "entity", "meta", "provenance"}


class SeedsError(ValueError):
    """One or more bad lines in a seeds file; the message names the file and every line."""


def _problem(row: Any, domain: str | None) -> Problem:
    if not isinstance(row, dict):
        raise ValueError("a line must be a JSON object")
    unknown = sorted(set(row) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}")
    for key in ("id", "question", "answer"):
        value = row.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError(f"missing {key}")
    data = dict(row, id=str(row["id"]), answer=str(row["answer"]))
    if isinstance(data.get("snippet"), str):
        data["snippet"] = {"text": data["snippet"]}
    data.setdefault("domain", domain or "math")
    data.setdefault("provenance", Provenance(seed_id=data["id"], method="seed", stage="seed"))
    try:
        return Problem.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc)
        raise ValueError(f"field {where}: {message}") from None


def load_seeds(path: str | Path, domain: str | None = None) -> list[Problem]:
    """Read a seeds JSONL file; raise SeedsError naming every bad line (malformed, missing, duplicate)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"seeds file not found: {path}")
    seeds: list[Problem] = []
    first_line: dict[str, int] = {}
    errors: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            problem = _problem(json.loads(line), domain)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: malformed JSON ({exc.msg} at column {exc.colno})")
            continue
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
            continue
        if problem.id in first_line:
            errors.append(f"line {number}: duplicate id '{problem.id}' (first on line {first_line[problem.id]})")
            continue
        first_line[problem.id] = number
        seeds.append(problem)
    if errors:
        raise SeedsError(f"{path}: {len(errors)} bad line(s): " + "; ".join(errors))
    if not seeds:
        raise SeedsError(f"{path}: no seeds")
    return seeds
