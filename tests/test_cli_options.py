"""The CLI's commands are plain module-level functions taking one RunOptions; `with_run_options` shows typer
the shared --config/--set/--profile/--executor/--ray-* options declared once in commands/_common.py."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.commands import config as config_command
from finmbs.commands._common import RunOptions, with_run_options
from finmbs.resources import resource_dir

runner = CliRunner()
EXECUTOR_COMMANDS = [["grow"], ["calibrate"], ["eval", "run"]]


def test_a_command_runs_without_typer(capsys):
    config_command.show(options=RunOptions(overrides=("stages.L=512", "stages.N=3")))
    shown = capsys.readouterr().out
    assert re.search(r"^  L: 512$", shown, re.M) and re.search(r"^  N: 3$", shown, re.M)


def test_the_command_line_gathers_the_shared_options_into_one_object():
    seen: list[RunOptions] = []

    def probe(path: Path, options: RunOptions = RunOptions(), last: int = 0) -> None:
        seen.append(options)

    command = with_run_options(probe, executor=True)
    assert list(inspect.signature(command).parameters) == [
        "path",
        "config",
        "set_",
        "profile",
        "executor",
        "ray_address",
        "ray_workers",
        "last",
    ]
    command(
        path=Path("x"),
        config=Path("c.yaml"),
        set_=["stages.N=2", "stages.L=9"],
        profile="paper",
        executor="ray",
        ray_address="auto",
        ray_workers=3,
        last=1,
    )
    assert seen == [
        RunOptions(
            config=Path("c.yaml"),
            overrides=("stages.N=2", "stages.L=9"),
            profile="paper",
            executor="ray",
            ray_address="auto",
            ray_workers=3,
        )
    ]
    assert seen[0].with_overrides("stages.keep=all").overrides == ("stages.N=2", "stages.L=9", "stages.keep=all")
    with pytest.raises(TypeError, match="takes no `options: RunOptions`"):
        with_run_options(lambda path: None)


def test_overrides_and_profile_reach_the_config():
    result = runner.invoke(app, ["config", "show", "--profile", "paper", "--set", "stages.L=512", "-s", "stages.L=640"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^  L: 640$", result.output, re.M) and re.search(r"^profile: paper$", result.output, re.M)


@pytest.mark.parametrize("command", EXECUTOR_COMMANDS, ids=" ".join)
def test_every_command_that_runs_work_takes_the_executor_options(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    for option in ("--config", "--set", "--executor", "--ray-address", "--ray-workers"):
        assert option in result.output, option


SEED = '{"id": "s1", "question": "What is 2 + 3?", "answer": "5"}\n'
# every command that reads a run config, with the arguments it needs to get as far as reading it
CONFIG_READERS = {
    "grow": ["grow", "--seeds", "seeds.jsonl"],
    "calibrate": ["calibrate", "seeds.jsonl", "-o", "out.jsonl"],
    "eval run": ["eval", "run", "gsm8k", "--model", "x/y"],
    "audit": ["audit", "run"],
    "models": ["models"],
    "ingest": ["ingest", "docs"],
    "search": ["search", "anything"],
    "config explain": ["config", "explain"],
    "config show": ["config", "show"],
    "seeds mine": ["seeds", "mine", "-o", "mined.jsonl"],
    "verify": ["verify", "seeds.jsonl"],
}


@pytest.mark.parametrize("name", CONFIG_READERS)
def test_every_config_reading_command_takes_the_profile_and_a_set_that_contradicts_it_is_named(
    name, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "seeds.jsonl").write_text(SEED)
    result = runner.invoke(
        app,
        [*CONFIG_READERS[name], "--profile", "paper", "--set", "novelty.enabled=true"],
        env={"COLUMNS": "300", "NO_COLOR": "1"},
    )
    assert result.exit_code == 2, result.output
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        "error: --profile paper runs the method as published, where novelty.enabled is False (--set "
        "novelty.enabled=true sets True): drop the --set, or drop --profile paper (key novelty.enabled)"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_set_profile_contradicting_the_profile_option_is_one_error_naming_both(tmp_path):
    result = runner.invoke(
        app,
        ["config", "show", "--profile", "paper", "--set", "profile=finmbs"],
        env={"COLUMNS": "300", "NO_COLOR": "1"},
    )
    assert result.exit_code == 2, result.output
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        "error: --set profile=finmbs contradicts --profile paper: give one of them (key profile)"
    ]
    # a file's own profile: paper names the file's profile, not an option
    path = tmp_path / "paper.yaml"
    path.write_text((resource_dir("configs") / "paper-math.yaml").read_text())
    result = runner.invoke(
        app, ["config", "show", "--config", str(path), "--set", "stages.keep=all"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2 and "--set stages.keep=all sets 'all'): drop the --set, or drop profile: paper" in (
        " ".join(result.output.split())
    )


def test_a_bad_value_from_a_set_names_the_set_not_the_file(tmp_path):
    result = runner.invoke(app, ["config", "show", "--set", "stages.N=abc"], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: Input should be a valid integer, unable to parse string as an integer: "
        "--set stages.N=abc (key stages.N)"
    )
    # a contradiction the file makes still names the file
    config = tmp_path / "paper.yaml"
    config.write_text("profile: paper\nnovelty:\n  enabled: true\n")
    result = runner.invoke(app, ["config", "show", "--config", str(config)], env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exit_code == 2 and f"(file {config}, key novelty.enabled)" in result.output
    assert "this config sets True" in result.output
