"""The shipped demo run (corpora/demo/quickstart-run): `finmbs report` and `finmbs export` work on it as shipped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.export import load_run

DEMO = Path(__file__).resolve().parents[1] / "corpora" / "demo" / "quickstart-run"
SHIPPED = {
    "config.yaml",
    "seeds.jsonl",
    "trees",
    "qualified.jsonl",
    "rejected.jsonl",
    "metrics.json",
    "done",
    "usage.jsonl",
    "config_changes.jsonl",
}


@pytest.fixture(scope="module")
def demo() -> Path:
    if not (DEMO / "seeds.jsonl").is_file():
        pytest.skip(f"no demo run shipped at {DEMO}")
    return DEMO


def test_demo_run_holds_only_the_run_records(demo):
    assert {p.name for p in demo.iterdir()} <= SHIPPED, "ship no cache, .lock, export, report or *.tmp"
    config = (demo / "config.yaml").read_text()
    assert not re.search(r"(^|[\s:'\"])/(work|root|home|tmp|Users)/", config), "no absolute paths in the config"
    run = load_run(demo)
    assert run.seeds and run.metrics.get("seeds_in") == len(run.seeds) == len(run.trees)


def test_report_on_the_demo_run(demo, tmp_path):
    out = tmp_path / "demo.html"
    result = CliRunner().invoke(app, ["report", str(demo), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "quickstart-run" in html and html.count('class="seed') >= len(load_run(demo).seeds)


def test_export_on_the_demo_run(demo, tmp_path):
    qualified = len(load_run(demo).qualified)
    assert qualified, "the shipped demo run shows qualified problems"
    result = CliRunner().invoke(app, ["export", str(demo), "-o", str(tmp_path / "verl"), "--eval-data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "verl" / "export_report.json").read_text())
    assert saved["problems"] == qualified and (tmp_path / "verl" / "README.md").is_file()
    assert not (demo / "export").exists()


async def test_every_demo_problem_program_reexecutes_to_its_answer(demo):
    from finmbs.mbs.programs import reexecute_all

    checks = await reexecute_all(load_run(demo).qualified)
    assert checks and [c.outcome for c in checks] == ["agree"] * len(checks), checks
