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

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from finmbs.evaluate.benchmarks import known_benchmarks, load_benchmark
from finmbs.evaluate.loaders import RowError, load_items, read_rows
from finmbs.records import Problem

_WORD = re.compile(r"\w+")
TEXT_FIELDS = ("question", "problem", "Question", "prompt")
ID_FIELDS = ("unique_id", "financebench_id", "QID", "id")


@dataclass(frozen=True)
class Reference:
    """One text the problems must not overlap: an evaluation question or a seed."""

    source: str
    ref: str
    text: str


class Contamination(BaseModel):
    """A problem field that overlaps a reference text."""

    problem_id: str
    field: str
    source: str
    ref: str
    coverage: float
    ngram: str


def words(text: str) -> list[str]:
    """Lower-cased word tokens (LaTeX commands and numbers become words too)."""
    return _WORD.findall(text.lower())


_MASK = (1 << 64) - 1
_BASE = 0x100000001B3


@lru_cache(maxsize=1 << 17)
def _token_hash(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big")


class _Hashes:
    """Rolling 64-bit hashes of every contiguous word span of one text (stable across processes)."""

    def __init__(self, tokens: list[str]):
        self.prefix = [0]
        for token in tokens:
            self.prefix.append((self.prefix[-1] * _BASE + _token_hash(token)) & _MASK)

    def key(self, start: int, length: int) -> int:
        return (self.prefix[start + length] - self.prefix[start] * pow(_BASE, length, 1 << 64)) & _MASK

    def grams(self, length: int) -> Iterator[tuple[int, int]]:
        power = pow(_BASE, length, 1 << 64)
        prefix = self.prefix
        for start in range(len(prefix) - length):
            yield start, (prefix[start + length] - prefix[start] * power) & _MASK


class NgramIndex:
    """Hashed word n-grams of reference texts, with the references each gram came from.

    Stock phrasing is not evidence: an n-gram found in `common` or more references ("... where m and n are
    relatively prime positive integers. Find m+n.") is left out, and a match must reproduce at least
    `min_coverage` of a reference's remaining distinct n-grams.
    """

    def __init__(self, references: Iterable[Reference], n: int = 13, min_words: int = 6,
                 min_coverage: float = 0.5, common: int = 3):
        if n < 1 or min_words < 1 or common < 2 or not 0 < min_coverage <= 1:
            raise ValueError("need n >= 1, min_words >= 1, common >= 2 and 0 < min_coverage <= 1")
        self.n, self.min_words, self.min_coverage = n, min_words, min_coverage
        self.refs: list[Reference] = []
        self.sizes: list[int] = []
        self.grams: dict[int, set[int]] = defaultdict(set)
        self.short: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        self.exact: dict[tuple[int, int], set[int]] = defaultdict(set)
        per_ref: list[set[int]] = []
        for reference in references:
            tokens = words(reference.text)
            if not tokens:
                continue
            label = len(self.refs)
            self.refs.append(reference)
            hashes = _Hashes(tokens)
            whole = hashes.key(0, len(tokens))
            self.exact[(len(tokens), whole)].add(label)
            keys = {key for _, key in hashes.grams(n)}
            per_ref.append(keys)
            for key in keys:
                self.grams[key].add(label)
            if len(tokens) < n and len(tokens) >= min_words:
                self.short[len(tokens)][whole].add(label)
        stock = {key for key, labels in self.grams.items() if len(labels) >= common}
        for key in stock:
            del self.grams[key]
        self.sizes = [max(1, len(keys - stock)) for keys in per_ref]

    def __len__(self) -> int:
        return len(self.refs)

    def overlaps(
        self, text: str, exclude: str | None = None, whole: bool = False
    ) -> tuple[Reference, float, str] | None:
        """The reference `text` reproduces most of (ignoring ref id `exclude`): it, the share reproduced, one gram."""
        tokens = words(text)
        hashes = _Hashes(tokens)
        matched: dict[int, set[int]] = defaultdict(set)
        sample: dict[int, str] = {}

        def hit(labels: set[int], key: int, start: int, length: int) -> None:
            for label in labels:
                if self.refs[label].ref != exclude:
                    matched[label].add(key)
                    sample.setdefault(label, " ".join(tokens[start : start + length]))

        for length, table in [(self.n, self.grams), *self.short.items()]:
            for start, key in hashes.grams(length):
                if key in table:
                    hit(table[key], key, start, length)
        if whole and tokens:
            key = hashes.key(0, len(tokens))
            hit(self.exact.get((len(tokens), key), set()), key, 0, len(tokens))
        coverage = {label: min(1.0, len(keys) / self.sizes[label]) for label, keys in matched.items()}
        best = min(coverage, key=lambda label: (-coverage[label], label), default=None)
        if best is None or coverage[best] < self.min_coverage:
            return None
        return self.refs[best], coverage[best], sample[best]


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

    def __init__(self, eval_sets: dict[str, list[Reference]], seeds: Iterable[Problem], n: int = 13,
                 min_coverage: float = 0.5):
        references = [reference for refs in eval_sets.values() for reference in refs]
        self.eval_index = NgramIndex(references, n, min_coverage=min_coverage)
        seed_refs = [Reference("seeds", seed.id, seed.question) for seed in seeds]
        self.seed_index = NgramIndex(seed_refs, n, min_coverage=min_coverage)

    def check(self, problem: Problem) -> Contamination | None:
        """The strongest overlap of a problem, or None when it is clean."""
        fields = [("question", problem.question, self.eval_index, None),
                  ("question", problem.question, self.seed_index, problem.id)]
        if problem.snippet is not None:
            fields.append(("snippet", problem.snippet.text, self.eval_index, None))
        for field, text, index, exclude in fields:
            found = index.overlaps(text, exclude=exclude, whole=field == "question")
            if found:
                reference, coverage, gram = found
                return Contamination(problem_id=problem.id, field=field, source=reference.source,
                                     ref=reference.ref, coverage=round(coverage, 4), ngram=gram)
        return None
