"""`finmbs export`: qualified problems -> decontaminated, split training rows -> veRL / HF / JSONL files."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from finmbs.errors import FinmbsError
from finmbs.export import hf, jsonl, trl, verl
from finmbs.export.card import CARD, dataset_card
from finmbs.export.decontaminate import Contamination, Decontaminator, load_eval_sets
from finmbs.export.files import MARKER, replacing_dir
from finmbs.export.rows import rows_table, training_row
from finmbs.export.splits import DEFAULT_SPLIT, assign_splits, parse_splits
from finmbs.records import Problem
from finmbs.runs.folder import QUALIFIED, safe_name
from finmbs.runs.load import Run, RunReadError, load_run

Format = Literal["verl", "trl", "hf", "jsonl"]
Policy = Literal["drop", "flag"]
Nodes = Literal["roots", "all"]
WRITERS = {"verl": verl.write, "trl": trl.write, "hf": hf.write, "jsonl": jsonl.write}


class EmptyExport(FinmbsError, ValueError):
    """Nothing to export (no qualified problem, or every one dropped); allowed only with allow_empty."""

    exit_code = 1


T = TypeVar("T")
Track = Callable[[Sequence[T], str], Iterable[T]]


class SplitCount(BaseModel):
    rows: int = 0
    seeds: int = 0
    by_domain: dict[str, int] = Field(default_factory=dict)


class ExportReport(BaseModel):
    """What an export wrote and what decontamination removed; saved as export_report.json next to the data."""

    run: str
    run_name: str = ""
    format: Format
    split_spec: str = DEFAULT_SPLIT
    nodes: Nodes = "roots"
    not_roots: int = 0
    out: str
    problems: int
    by_domain: dict[str, int]
    decontaminated: bool
    contamination_policy: Policy
    ngram: int
    min_coverage: float
    eval_sets: dict[str, int] = Field(default_factory=dict)
    seeds_checked: int = 0
    dropped: int = 0
    flagged: int = 0
    contamination_by_source: dict[str, int] = Field(default_factory=dict)
    splits: dict[str, SplitCount] = Field(default_factory=dict)
    files: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def default_eval_data() -> list[Path]:
    """FINMBS_EVAL_DATA, else ../shared/data (relative to the working folder) when it exists."""
    path = Path(os.environ.get("FINMBS_EVAL_DATA", "../shared/data"))
    return [path] if path.is_dir() else []


def _no_progress(items: Sequence[T], description: str) -> Iterable[T]:
    return items


def export_run(
    run_dir: str | Path,
    fmt: Format = "verl",
    out: str | Path | None = None,
    split: str = DEFAULT_SPLIT,
    decontaminate: bool = True,
    eval_data: Sequence[str | Path] | None = None,
    policy: Policy = "drop",
    ngram: int = 13,
    min_coverage: float = 0.5,
    track: Track = _no_progress,
    allow_empty: bool = False,
    nodes: Nodes = "roots",
    band_policy: str | None = None,
) -> ExportReport:
    """Export a run's qualified problems, split by seed lineage, with a dataset card; the output folder is
    replaced atomically. No problem to export raises EmptyExport (nothing written) unless `allow_empty`.
    `band_policy` (`--policy NAME`): the problems in the band for that policy by their latest `finmbs requalify`
    entry instead (`run_dir` a run folder, or a requalify folder)."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(WRITERS)}")
    fractions = parse_splits(split)
    run = _band_run(Path(run_dir), band_policy) if band_policy else load_run(run_dir)
    default = f"{fmt}-{safe_name(band_policy)}" if band_policy else fmt
    out = Path(out) if out is not None else run.root / "export" / default
    candidates = [p for p in run.qualified if nodes == "all" or is_root(p)]
    report = ExportReport(
        run=str(run.root),
        run_name=run.name,
        format=fmt,
        out=str(out),
        split_spec=split,
        nodes=nodes,
        not_roots=len(run.qualified) - len(candidates),
        problems=len(run.qualified),
        by_domain=dict(Counter(p.domain for p in candidates)),
        decontaminated=decontaminate,
        contamination_policy=policy,
        ngram=ngram,
        min_coverage=min_coverage,
    )
    if not candidates:
        _empty(
            report,
            allow_empty,
            f"no qualified problems in {run.root / QUALIFIED}"
            + (f" ({report.not_roots} non-root nodes left out; --nodes all ships them)" if report.not_roots else ""),
        )
    hits = _decontaminate(candidates, run.seeds, eval_data, report, track) if decontaminate else {}
    kept = [p for p in candidates if not (policy == "drop" and p.id in hits)]
    report.dropped = len(candidates) - len(kept)
    if candidates and not kept:
        _empty(
            report,
            allow_empty,
            f"all {len(candidates)} qualified problems were dropped as contaminated (see --contamination flag)",
        )
    report.flagged = len(hits) if policy == "flag" else 0
    tables = {}
    splits = assign_splits(kept, fractions)
    for name, problems in splits.items():
        rows = []
        for index, problem in enumerate(problems):
            hit = hits.get(problem.id)
            try:
                rows.append(training_row(problem, index, name, f"{hit.source}:{hit.ref}" if hit else ""))
            except ValueError as exc:
                raise RunReadError(f"{run.root / QUALIFIED} record {problem.id}: {exc}") from None
        tables[name] = rows_table(rows)
        report.splits[name] = SplitCount(
            rows=len(rows),
            seeds=len({p.provenance.seed_id or p.id for p in problems}),
            by_domain=dict(Counter(p.domain for p in problems)),
        )
        if kept and not rows:
            report.warnings.append(f"split {name!r} is empty: too few seed groups for the fractions {split!r}")
    with replacing_dir(out) as staging:
        files = WRITERS[fmt](tables, staging)
        report.files = [str(out / f.relative_to(staging)) for f in files]
        with (staging / "contamination.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(hit.model_dump_json() + "\n" for hit in hits.values())
        (staging / CARD).write_text(dataset_card(run, report, splits), encoding="utf-8")
        report.files.append(str(out / CARD))
        (staging / MARKER).write_text(json.dumps(report.model_dump(), indent=2) + "\n", encoding="utf-8")
    return report


def _band_run(path: Path, policy: str) -> Run:
    """The run (or the requalify folder) at `path` with its qualified problems replaced by the latest band of
    `policy` from its requalify history."""
    from finmbs.runs.requalify import latest_band, requalify_folder

    folder = requalify_folder(path)
    run = load_run(path)
    run.qualified = latest_band(folder, policy)
    return run


def is_root(problem: Problem) -> bool:
    """A problem that is a tree's root (or carries no `kind` at all: runs that keep only roots)."""
    kind = getattr(problem, "kind", None) or problem.meta.get("kind")
    return kind in (None, "root")


def _empty(report: ExportReport, allow_empty: bool, reason: str) -> None:
    if not allow_empty:
        raise EmptyExport(f"nothing to export: {reason}; nothing was written (--allow-empty writes empty files)")
    report.warnings.append(f"empty export: {reason}")


def _decontaminate(
    problems: list[Problem],
    seeds: list[Problem],
    eval_data: Sequence[str | Path] | None,
    report: ExportReport,
    track: Track,
) -> dict[str, Contamination]:
    eval_sets = load_eval_sets(default_eval_data() if eval_data is None else eval_data)
    report.eval_sets = {name: len(refs) for name, refs in eval_sets.items()}
    report.seeds_checked = len(seeds)
    if not eval_sets:
        report.warnings.append("no evaluation sets found (give --eval-data): only overlap with the seeds was checked")
    checker = Decontaminator(eval_sets, seeds, n=report.ngram, min_coverage=report.min_coverage)
    hits = {}
    for problem in track(problems, "decontaminating"):
        hit = checker.check(problem)
        if hit is not None:
            hits[problem.id] = hit
    report.contamination_by_source = dict(Counter(hit.source for hit in hits.values()))
    return hits
