"""Seed files: JSONL rows -> verified seed Problems, every bad line reported before any model call.

One JSON object per line: `id`, `question`, `answer`, optional `domain`, `snippet` (an object
or a plain string), `entity` and `meta` (and `provenance`, so a run's qualified.jsonl reads back).
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from finmbs.errors import FinmbsError
from finmbs.records import Problem, Provenance, first_error

_FIELDS = {"id", "question", "answer", "domain", "snippet", "entity", "meta", "provenance"}


class SeedsError(FinmbsError, ValueError):
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
    seed_id = str(row["id"])
    if seed_id != seed_id.strip() or not seed_id.isprintable():
        raise ValueError(f"id {seed_id!r} has surrounding spaces or control characters")
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


def _read_text(path: Path) -> str:
    """The file as UTF-8 text (a byte-order mark allowed); SeedsError naming the line of a non-UTF-8 byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SeedsError(
            f"{path} line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None


def _looks(seed_id: str) -> str:
    """How an id reads: Unicode-normalized and case-folded (ids equal here cannot be told apart)."""
    return unicodedata.normalize("NFKC", seed_id).casefold()


def load_seeds(path: str | Path, domain: str | None = None) -> list[Problem]:
    """Read a seeds JSONL file; raise SeedsError naming every bad line (malformed, missing, duplicate)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"seeds file not found: {path}")
    seeds: list[Problem] = []
    first_line: dict[str, tuple[int, str]] = {}
    errors: list[str] = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
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
        look = _looks(problem.id)
        if look in first_line:
            line, same = first_line[look]
            how = "first on" if same == problem.id else "cannot be told apart from"
            errors.append(f"line {number}: duplicate id '{problem.id}' ({how} line {line})")
            continue
        first_line[look] = (number, problem.id)
        seeds.append(problem)
    if errors:
        raise SeedsError(f"{path}: {len(errors)} bad line(s): " + "; ".join(errors))
    if not seeds:
        raise SeedsError(f"{path}: no seeds")
    return seeds
