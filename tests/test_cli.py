"""CLI consistency: --version, flags shown as flags, choices listed, -o/--out and --config/--set where they belong,
and the stage symbols explained."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from finmbs import __version__
from finmbs.cli import app

runner = CliRunner()
WRITERS = [
    ["grow"],
    ["calibrate"],
    ["requalify"],
    ["eval", "run"],
    ["eval", "compare"],
    ["audit"],
    ["export"],
    ["report"],
    ["seeds", "from-financebench"],
    ["seeds", "from-csv"],
]
CONFIG_READERS = [
    ["grow"],
    ["calibrate"],
    ["requalify"],
    ["eval", "run"],
    ["audit"],
    ["models"],
    ["ingest"],
    ["search"],
    ["config", "explain"],
    ["config", "show"],
]


def help_text(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"finmbs {__version__}"


@pytest.mark.parametrize(
    "command",
    [c for c in WRITERS + CONFIG_READERS if c != ["config", "show"]] + [[]],
    ids=lambda c: " ".join(c) or "finmbs",
)
def test_flags_are_shown_as_flags(command):
    assert "<bool>" not in help_text(*command)


@pytest.mark.parametrize("command", WRITERS, ids=" ".join)
def test_every_writing_command_takes_dash_o(command):
    assert re.search(r"--out\s+-o\b", help_text(*command))


@pytest.mark.parametrize("command", CONFIG_READERS, ids=" ".join)
def test_every_config_reading_command_takes_config_and_set(command):
    text = help_text(*command)
    assert "--config" in text and "--set" in text and "KEY=VALUE" in text


def test_choices_are_listed():
    text = help_text("export")
    assert "<verl|trl|hf|jsonl>" in text and "<drop|flag>" in text
    assert "<closed-book|oracle|retrieval>" in help_text("eval", "run")
    result = runner.invoke(app, ["export", "x", "--format", "csv"])
    assert result.exit_code == 2 and "'csv' is not one of" in result.output


def test_stage_symbols_are_explained_with_their_values():
    result = runner.invoke(app, ["config", "explain", "--set", "stages.N=16"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for symbol in ("N", "Nt", "K", "Nd", "D", "N_leaf", "R", "alpha_leaf", "alpha_parent", "Nc", "Kd", "L"):
        assert re.search(rf"│ {symbol}\s+│", result.output), symbol
    assert re.search(r"│ N\s+│ 16\s+│", result.output)
    # finmbs's own switches, with the default config's values
    for key, value in (
        ("stages.relabel", "False"),
        ("stages.extract", "retrieve"),
        ("novelty.enabled", "True"),
        ("quality.enabled", "False"),
        ("stages.keep", "roots"),
    ):
        assert re.search(rf"│ {re.escape(key)}\s+│ {value}\s+│ \w", result.output), key
    assert "commands beyond the paper" in " ".join(result.output.split()) and "requalify" in result.output
    assert "finmbs config explain" in help_text("grow")
    shown = runner.invoke(app, ["config", "show", "--set", "stages.L=512"])
    assert shown.exit_code == 0 and "L: 512" in shown.output


def test_bad_set_key_is_one_line():
    result = runner.invoke(app, ["config", "explain", "--set", "stages.nope=1"])
    assert result.exit_code == 2 and "stages.nope" in result.output
