"""Word n-gram overlap: which reference text (an evaluation question, a seed) a text reproduces most of.

Texts are lower-cased word tokens; every contiguous span has a stable 64-bit rolling hash, so results
are deterministic across processes. Used by export's decontamination and by the novelty guard, which
counts a problem that copies its seed's wording as no new problem (the same test, the same thresholds).
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Reference:
    """One text the problems must not overlap: an evaluation question or a seed."""

    source: str
    ref: str
    text: str


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

    def __init__(
        self,
        references: Iterable[Reference],
        n: int = 13,
        min_words: int = 6,
        min_coverage: float = 0.5,
        common: int = 3,
    ):
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
