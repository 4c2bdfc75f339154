"""Decontamination: word n-gram overlap of every problem against evaluation sets and against the seeds.

Word n-grams (default n=13, as in GPT-3 appendix C) of every problem are looked up in the n-grams of the
evaluation questions; a problem is contaminated when it reproduces at least half (`min_coverage`) of one
question's n-grams, leaving out stock phrasing shared by several questions (in the spirit of Tulu 3's
decontamination). Evaluation questions shorter than n words match when the problem contains them whole
(at least `min_words` words), or when the problem's question equals them exactly. Questions are checked
against the evaluation sets and the seeds (a copied seed); snippets against the evaluation sets. The index is a
table of stable 64-bit rolling hashes of word n-grams, so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

from finmbs.evaluate.benchmarks import known_benchmarks, load_benchmark
from finmbs.evaluate.loaders import RowError, load_items, read_rows
from finmbs.ngrams import NgramIndex, Reference
from finmbs.records import Problem

TEXT_FIELDS = ("question", "problem", "Question", "prompt")
ID_FIELDS = ("unique_id", "financebench_id", "QID", "id")


class Contamination(BaseModel):
    """A problem field that overlaps a reference text."""

    problem_id: str
    field: str
    source: str
    ref: str
    coverage: float
    ngram: str


def _text_field(row: dict) -> str | None:
    for name in TEXT_FIELDS:
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value:  # a chat prompt
            return " ".join(str(m.get("content", "")) for m in value if isinstance(m, dict))
    return None


def read_eval_file(path: Path) -> list[Reference]:
    """The questions of any JSONL/JSON/parquet file (fields question, problem, Question or a chat prompt)."""
    references = []
    for where, row in read_rows(path):
        text = None if isinstance(row, RowError) else _text_field(row)
        if text is None:
            why = row if isinstance(row, RowError) else f"no question text (fields tried: {', '.join(TEXT_FIELDS)})"
            raise ValueError(f"{path.parent / where}: {why}")
        ref = next((str(row[k]) for k in ID_FIELDS if row.get(k) is not None), where)
        references.append(Reference(path.stem, ref, text))
    return references


def read_benchmarks(folder: Path) -> dict[str, list[Reference]]:
    """Every known benchmark (eval/*.yaml) found as FOLDER/NAME, read by the evaluator's loaders."""
    sets = {}
    for name in known_benchmarks():
        if not (folder / name).is_dir():
            continue
        bench = load_benchmark(name)
        try:
            items, skipped = load_items(bench, folder / name)
        except FileNotFoundError:  # a folder without the data (e.g. only a README)
            continue
        if skipped:
            raise ValueError(f"{folder / name / skipped[0].id}: {skipped[0].reason}")
        sets[name] = [Reference(name, item.id, item.question) for item in items]
    return sets


def load_eval_sets(paths: Iterable[str | Path]) -> dict[str, list[Reference]]:
    """Evaluation questions by set name, from data folders (known benchmarks inside) and extra files."""
    sets: dict[str, list[Reference]] = {}
    for path in map(Path, paths):
        if path.is_file():
            sets.setdefault(path.stem, []).extend(read_eval_file(path))
        elif path.is_dir():
            for name, references in read_benchmarks(path).items():
                sets.setdefault(name, []).extend(references)
        else:
            raise FileNotFoundError(f"evaluation data not found: {path}")
    return sets


class Decontaminator:
    """Checks problems against the evaluation sets (question and snippet) and the seeds (question)."""

    def __init__(
        self, eval_sets: dict[str, list[Reference]], seeds: Iterable[Problem], n: int = 13, min_coverage: float = 0.5
    ):
        references = [reference for refs in eval_sets.values() for reference in refs]
        self.eval_index = NgramIndex(references, n, min_coverage=min_coverage)
        seed_refs = [Reference("seeds", seed.id, seed.question) for seed in seeds]
        self.seed_index = NgramIndex(seed_refs, n, min_coverage=min_coverage)

    def check(self, problem: Problem) -> Contamination | None:
        """The strongest overlap of a problem, or None when it is clean."""
        fields = [
            ("question", problem.question, self.eval_index, None),
            ("question", problem.question, self.seed_index, problem.id),
        ]
        if problem.snippet is not None:
            fields.append(("snippet", problem.snippet.text, self.eval_index, None))
        for field, text, index, exclude in fields:
            found = index.overlaps(text, exclude=exclude, whole=field == "question")
            if found:
                reference, coverage, gram = found
                return Contamination(
                    problem_id=problem.id,
                    field=field,
                    source=reference.source,
                    ref=reference.ref,
                    coverage=round(coverage, 4),
                    ngram=gram,
                )
        return None
