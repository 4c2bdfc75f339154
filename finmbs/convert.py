"""Seed converters: FinanceBench JSONL and plain CSV -> finmbs finance seeds (Problem JSONL).

A finance seed is `p = (q, d)` with its answer and entity: `question`, `answer`, `domain="finance"`,
`snippet` {text, doc_id, source_path, section_path, page} and `entity` (the company or borrower).
Pages are 1-based (FinanceBench's zero-based `evidence_page_num` is kept in `meta`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path

from finmbs.errors import FinmbsError
from finmbs.records import Problem, Provenance, Snippet
from finmbs.runs import atomic_write_text


class SeedFormatError(FinmbsError, ValueError):
    """A bad input row; the message names the file and the line."""


def _where(path: Path, line: int) -> str:
    return f"{path}:{line}"


def financebench_seed(row: dict, pdf_dir: Path | None = None) -> Problem:
    """One FinanceBench question as a seed: its evidence passages (joined) are the snippet."""
    evidence = row.get("evidence") or []
    texts = [e.get("evidence_text") or e.get("evidence_text_full_page") or "" for e in evidence]
    if not any(t.strip() for t in texts):
        raise ValueError("no evidence text")
    first = evidence[0]
    doc_name = first.get("doc_name") or row.get("doc_name")
    pdf = pdf_dir / f"{doc_name}.pdf" if pdf_dir is not None else None
    page = first.get("evidence_page_num")
    snippet = Snippet(
        text="\n\n".join(t.strip() for t in texts if t.strip()),
        doc_id=doc_name,
        source_path=str(pdf) if pdf is not None and pdf.is_file() else None,
        page=page + 1 if isinstance(page, int) else None,
    )
    meta = {key: row.get(key) for key in ("question_type", "question_reasoning", "justification") if row.get(key)}
    meta["evidence_pages"] = [e.get("evidence_page_num") for e in evidence]
    return Problem(
        id=str(row["financebench_id"]),
        question=row["question"],
        answer=str(row["answer"]),
        domain="finance",
        snippet=snippet,
        entity=row.get("company"),
        provenance=Provenance(seed_id=str(row["financebench_id"]), source="financebench"),
        meta=meta,
    )


def from_financebench(path: str | Path, pdf_dir: str | Path | None = None) -> list[Problem]:
    """Every row of a FinanceBench JSONL file as a seed; a bad row raises naming its line."""
    path = Path(path)
    seeds = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            seeds.append(financebench_seed(json.loads(line), Path(pdf_dir) if pdf_dir else None))
        except json.JSONDecodeError as exc:
            raise SeedFormatError(f"{_where(path, number)}: malformed JSON ({exc.msg})") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise SeedFormatError(f"{_where(path, number)}: not a FinanceBench row ({exc})") from None
    return seeds


def from_csv(
    path: str | Path,
    *,
    question_col: str = "question",
    answer_col: str = "answer",
    snippet_col: str | None = None,
    entity_col: str = "entity",
    doc_col: str = "doc",
    id_prefix: str | None = None,
) -> list[Problem]:
    """Rows of a CSV (question, answer, snippet or evidence, entity, optional doc/id/page) as seeds."""
    path = Path(path)
    prefix = id_prefix or path.stem
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        snippet_col = snippet_col or next((c for c in ("snippet", "evidence") if c in columns), "snippet")
        missing = [c for c in (question_col, answer_col, snippet_col) if c not in columns]
        if missing:
            raise SeedFormatError(f"{_where(path, 1)}: missing column(s) {missing}; header has {columns}")
        seeds = []
        for row in reader:
            line = reader.line_num
            if None in row or None in row.values():
                raise SeedFormatError(f"{_where(path, line)}: expected {len(columns)} fields, got a different count")
            for col in (question_col, answer_col, snippet_col):
                if not row[col].strip():
                    raise SeedFormatError(f"{_where(path, line)}: empty '{col}'")
            page = (row.get("page") or "").strip()
            if page and not page.isdigit():
                raise SeedFormatError(f"{_where(path, line)}: page '{page}' is not a number")
            seed_id = (row.get("id") or "").strip() or f"{prefix}-{len(seeds) + 1:04d}"
            doc = (row.get(doc_col) or "").strip() or None
            seeds.append(
                Problem(
                    id=seed_id,
                    question=row[question_col].strip(),
                    answer=row[answer_col].strip(),
                    domain="finance",
                    snippet=Snippet(
                        text=row[snippet_col].strip(),
                        doc_id=doc,
                        source_path=doc,
                        section_path=(row.get("section") or "").strip(),
                        page=int(page) if page else None,
                    ),
                    entity=(row.get(entity_col) or "").strip() or None,
                    provenance=Provenance(seed_id=seed_id, source=path.name),
                )
            )
    return seeds


def write_seeds(seeds: Iterable[Problem], out: str | Path) -> int:
    """Write seeds as JSONL atomically; returns how many."""
    lines = [s.model_dump_json(exclude_none=True) for s in seeds]
    atomic_write_text(out, "".join(line + "\n" for line in lines))
    return len(lines)
