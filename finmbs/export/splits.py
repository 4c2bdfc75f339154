"""Train/test splits by seed lineage: all descendants of one seed land in the same split (no leakage).

The default holds out 5% (`train=0.95,test=0.05`) so a trainer has validation files; every split with a
positive fraction gets at least one seed group when the run has enough seeds.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict

from finmbs.records import Problem

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
DEFAULT_SPLIT = "train=0.95,test=0.05"  # a held-out split by seed lineage, for a trainer's validation files


def parse_splits(spec: str) -> dict[str, float]:
    """`train=0.95,test=0.05` -> {"train": 0.95, "test": 0.05}; a bare name means all of it."""
    fractions: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = part.partition("=")
        name = name.strip()
        if not _NAME.match(name) or name in fractions:
            raise ValueError(f"--split: bad or repeated split name {name!r} in {spec!r}")
        try:
            fractions[name] = float(value) if value else 1.0
        except ValueError:
            raise ValueError(f"--split: {value!r} is not a number in {spec!r}") from None
        if not 0 <= fractions[name] <= 1:
            raise ValueError(f"--split: fraction of {name} must be within 0..1 in {spec!r}")
    if not fractions or abs(sum(fractions.values()) - 1) > 1e-6:
        raise ValueError(f"--split: fractions must add up to 1 in {spec!r}")
    return fractions


def _order(group: str) -> str:
    return hashlib.sha256(group.encode("utf-8")).hexdigest()


def assign_splits(problems: list[Problem], fractions: dict[str, float]) -> dict[str, list[Problem]]:
    """Problems per split; seed groups are placed in hash order by where their midpoint falls."""
    groups: dict[str, list[Problem]] = defaultdict(list)
    for problem in problems:
        groups[problem.provenance.seed_id or problem.id].append(problem)
    chosen: dict[str, str] = {}
    total, before = len(problems), 0
    for group in sorted(groups, key=_order):
        middle = (before + len(groups[group]) / 2) / total
        edge = 0.0
        for name, fraction in fractions.items():
            edge += fraction
            chosen[group] = name
            if middle < edge:
                break
        before += len(groups[group])
    _fill_empty_splits(chosen, groups, fractions)
    result: dict[str, list[Problem]] = {name: [] for name in fractions}
    for problem in problems:
        result[chosen[problem.provenance.seed_id or problem.id]].append(problem)
    return result


def _fill_empty_splits(chosen: dict[str, str], groups: dict[str, list[Problem]], fractions: dict[str, float]) -> None:
    """A split with a positive fraction that got no seed group takes the smallest group of the split with the
    most groups (while that one keeps at least one): a small run still gets a validation file with rows."""
    for name, fraction in fractions.items():
        members = {split: [g for g, s in chosen.items() if s == split] for split in fractions}
        donor = max(members, key=lambda split: len(members[split]))
        if fraction > 0 and not members[name] and len(members[donor]) > 1:
            smallest = min(members[donor], key=lambda g: (len(groups[g]), _order(g)))
            chosen[smallest] = name
