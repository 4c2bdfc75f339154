"""The real path: `finmbs grow` on two shipped seeds with the embedded 0.5B playing every role (short outputs)."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.resources import resource_dir
from finmbs.runs import read_jsonl

pytest.importorskip("llama_cpp")

SMALL = "embedded/qwen2.5-coder-0.5b-instruct"
TINY = [
    "stages.N=2",
    "stages.Nt=2",
    "stages.Nd=0",
    "stages.D=1",
    "stages.N_leaf=1",
    "stages.R=1",
    "stages.Nc=1",
    "stages.L=48",
    "roles.teachers.0.max_tokens=96",
    "roles.students.0.max_tokens=48",
    "roles.students.1.max_tokens=48",
    "roles.target.max_tokens=48",
    "roles.judge.max_tokens=32",
    *(f"roles.{role}.model={SMALL}" for role in ("teachers.0", "students.0", "judge")),
]


@pytest.mark.slow
def test_grow_with_the_embedded_model(tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    rows = (resource_dir("corpora") / "math" / "seeds.jsonl").read_text().splitlines()[:2]
    seeds.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    args = ["grow", "--seeds", str(seeds), "--out", str(out), "--set", f"cache_path={tmp_path / 'cache.sqlite'}"]
    for override in TINY:
        args += ["--set", override]
    began = time.monotonic()
    result = CliRunner().invoke(app, args)
    elapsed = time.monotonic() - began
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["seeds_in"] == 2 and metrics["usage"]["teacher"]["calls"] >= 2
    trees = [json.loads(p.read_text()) for p in (out / "trees").glob("*.json")]
    assert len(trees) == 2 and all(t["dropped"] or t["decomposition"] for t in trees)
    rejected = list(read_jsonl(out / "rejected.jsonl"))
    assert all(r["stage"] and r["reason"] for r in rejected)
    print(
        f"\nembedded grow: {elapsed:.1f}s, seeds with trace {metrics['seeds_with_trace']}, "
        f"descendants {metrics['descendants']}, qualified {metrics['qualified']}, "
        f"calls {sum(u['calls'] for u in metrics['usage'].values())}, rejected stages "
        f"{sorted({r['stage'] for r in rejected})}"
    )
