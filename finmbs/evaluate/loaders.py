"""Benchmark loaders: rows from local JSONL/JSON/parquet (or the Hugging Face hub when online) -> EvalItems.

A malformed row (bad JSON, a missing field, a duplicate id) is reported as a Skipped entry naming
its file and line; every other row is still loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field

from finmbs.errors import FinmbsError
from finmbs.evaluate.benchmarks import Benchmark
from finmbs.records import Domain, Record


class Evidence(Record):
    """One gold evidence passage: its document, zero-indexed page and text."""

    doc_name: str | None = None
    page: int | None = None
    text: str = ""
    full_page: str = ""


class EvalItem(Record):
    """One benchmark question with its gold answer and whatever context the benchmark gives."""

    id: str
    question: str
    answer: str
    domain: Domain
    question_type: str = "all"
    company: str | None = None
    doc_name: str | None = None
    context: str | None = None
    evidence: list[Evidence] = Field(default_factory=list)


class Skipped(Record):
    """A question that could not be evaluated, and why."""

    id: str
    reason: str


class RowError(FinmbsError, ValueError):
    """A row that does not fit the benchmark's fields."""


def _match(root: Path, patterns: list[str]) -> list[Path]:
    """Files under `root` for the first pattern that matches any."""
    for pattern in patterns:
        found = sorted(p for p in root.glob(pattern) if p.is_file())
        if found:
            return found
    return []


def hub_files(bench: Benchmark) -> list[Path]:
    """Download (or find in the local HF cache) the benchmark's hub files."""
    if not bench.hub:
        raise FileNotFoundError(f"benchmark '{bench.name}' has no hub dataset: pass --data PATH")
    from huggingface_hub import snapshot_download

    try:
        root = snapshot_download(
            bench.hub, repo_type="dataset", revision=bench.hub_revision, allow_patterns=bench.hub_files
        )
    except Exception as exc:  # offline, not cached, gated: all mean "give a local copy"
        raise FileNotFoundError(
            f"no --data given and hub dataset {bench.hub} is not available ({type(exc).__name__}); "
            "pass --data PATH, or set HF_HUB_OFFLINE=0 to download it"
        ) from None
    files = _match(Path(root), bench.hub_files)
    if not files:
        raise FileNotFoundError(f"hub dataset {bench.hub} has no files matching {bench.hub_files}")
    return files


def data_files(bench: Benchmark, data: Path | None) -> list[Path]:
    """The files holding the benchmark: `data` itself, files in the folder `data`, or the hub."""
    if data is None:
        return hub_files(bench)
    if data.is_file():
        return [data]
    if not data.is_dir():
        raise FileNotFoundError(f"benchmark data not found: {data}")
    files = _match(data, bench.files)
    if not files:
        raise FileNotFoundError(f"no {bench.name} files ({', '.join(bench.files)}) in {data}")
    return files


def read_rows(path: Path) -> Iterator[tuple[str, dict[str, Any] | RowError]]:
    """(where, row) pairs: `where` names file and line; a bad row comes back as a RowError."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path.name}:row {i}", row
        return
    if path.suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        for i, row in enumerate(rows if isinstance(rows, list) else [rows], 1):
            yield f"{path.name}:item {i}", row if isinstance(row, dict) else RowError("not a JSON object")
        return
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path.name}:line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, RowError(f"not valid JSON ({exc.msg})")
                continue
            yield where, row if isinstance(row, dict) else RowError("not a JSON object")


def as_text(value: Any) -> str:
    """A field value as text; a float that is an integer (AMC's 27.0) loses its '.0'."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value).strip()


def parse_row(bench: Benchmark, row: dict[str, Any], default_id: str) -> EvalItem:
    """One source row -> EvalItem, or RowError naming the missing or empty field."""
    fields = bench.fields

    def get(name: str | None, required: bool = False) -> str | None:
        if name is None:
            return None
        if required and as_text(row.get(name)) == "":
            raise RowError(f"missing or empty field '{name}'")
        return as_text(row.get(name)) or None

    answer = get(fields.answer, required=True) or ""
    if bench.answer_marker:
        if bench.answer_marker not in answer:
            raise RowError(f"answer has no '{bench.answer_marker.strip()}' marker")
        answer = answer.rsplit(bench.answer_marker, 1)[1].replace(",", "").strip()
    evidence = row.get(fields.evidence) if fields.evidence else None
    if evidence is not None and not isinstance(evidence, list):
        raise RowError(f"field '{fields.evidence}' is not a list")
    keys = bench.evidence_fields
    return EvalItem(
        id=get(fields.id) or default_id,
        question=get(fields.question, required=True) or "",
        answer=answer,
        domain=bench.domain,
        question_type=get(fields.question_type) or bench.question_type or "all",
        company=get(fields.company),
        doc_name=get(fields.doc_name),
        context=get(fields.context),
        evidence=[
            Evidence(
                doc_name=as_text(e.get(keys.doc_name)) or get(fields.doc_name),
                page=e.get(keys.page),
                text=as_text(e.get(keys.text)),
                full_page=as_text(e.get(keys.full_page)),
            )
            for e in evidence or []
        ],
    )


def load_items(bench: Benchmark, data: Path | None) -> tuple[list[EvalItem], list[Skipped]]:
    """All items of a benchmark, and the rows skipped (with file, line and reason)."""
    items: list[EvalItem] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    rows = (pair for path in data_files(bench, data) for pair in read_rows(path))
    for ordinal, (where, row) in enumerate(rows):
        try:
            if isinstance(row, RowError):
                raise row
            item = parse_row(bench, row, default_id=f"{bench.name}-{ordinal}")
            if item.id in seen:
                raise RowError(f"duplicate id '{item.id}'")
        except ValueError as exc:
            skipped.append(Skipped(id=where, reason=f"malformed row: {exc}"))
            continue
        seen.add(item.id)
        items.append(item)
    return items, skipped
