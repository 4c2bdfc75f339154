"""Matched budgets for the direct baseline (appendix C, table 7): what a finished MBS run folder spent
constructing each seed's problems (`finmbs.mbs.direct.budget_tokens` of its tree file)."""

from __future__ import annotations

import json
from pathlib import Path

from finmbs.mbs.direct import budget_tokens
from finmbs.records import SeedTrees
from finmbs.runs.folder import METRICS, SEEDS, RunDir, read_jsonl
from finmbs.runs.load import read_json


def construction_budgets(run: str | Path) -> dict[str, int]:
    """Per-seed matched-budget tokens (`budget_tokens`) of a finished MBS run folder; a folder that is
    no finished MBS run (no metrics, another method, a seed without its done marker) is a ValueError."""
    root = Path(run)
    where = f"--match-budget {run}"
    if not root.is_dir():
        raise ValueError(f"{where}: no such run folder")
    metrics, seeds_file = root / METRICS, root / SEEDS
    if not metrics.is_file() or not seeds_file.is_file():
        raise ValueError(f"{where}: not a run folder of `finmbs grow` (no {METRICS} or {SEEDS})")
    method = json.loads(metrics.read_text(encoding="utf-8")).get("method")
    if method != "mbs":
        raise ValueError(f"{where}: a run of method {method!r}; give the folder of a finished MBS run")
    ids = [row["id"] for row in read_jsonl(seeds_file)]
    folder = RunDir(root)  # exists (checked above); read, never locked
    unfinished = [i for i in ids if not (folder.is_done(i) and folder.tree_path(i).exists())]
    if not ids or unfinished:
        shown = ", ".join(unfinished[:3]) + (f" (+{len(unfinished) - 3} more)" if len(unfinished) > 3 else "")
        raise ValueError(
            f"{where}: the run is not finished ({len(unfinished)} of {len(ids)} seeds not done: "
            f"{shown or 'no seeds'}); rerun its grow command to finish it first"
        )
    budgets = {}
    for i in ids:
        trees = read_json(folder.tree_path(i), SeedTrees)
        budgets[trees.seed.id] = budget_tokens(trees.stages)
    return budgets
