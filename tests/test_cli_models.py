"""`finmbs models` and the CLI's handling of bad configs (one clear line, non-zero exit)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from finmbs.cli import app

runner = CliRunner()


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_help_lists_commands():
    result = subprocess.run([sys.executable, "-m", "finmbs.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "models" in result.stdout


def test_models_reachable_scripted_endpoint(openai_server, tmp_path):
    result = run(
        "models", "--set", "roles.judge.model=openai/judge", "--set", f"roles.judge.api_base={openai_server.base_url}"
    )
    assert result.exit_code == 0, result.output
    assert "judge" in result.output
    assert openai_server.request_count == 0  # /models is a GET, completions untouched


def test_models_probe_sends_one_request(openai_server):
    result = run(
        "models",
        "--probe",
        "--set",
        "roles.judge.model=openai/judge",
        "--set",
        f"roles.judge.api_base={openai_server.base_url}",
    )
    assert result.exit_code == 0, result.output
    assert openai_server.request_count == 1


def test_models_unreachable_endpoint_fails():
    result = run(
        "models", "--set", "roles.judge.model=openai/judge", "--set", "roles.judge.api_base=http://127.0.0.1:9/v1"
    )
    assert result.exit_code == 1
    assert "unreachable" in result.output


def test_missing_key_env_named(monkeypatch):
    monkeypatch.delenv("FINMBS_MISSING_KEY", raising=False)
    result = run(
        "models", "--set", "roles.judge.model=openai/gpt-5.2", "--set", "roles.judge.api_key_env=FINMBS_MISSING_KEY"
    )
    assert result.exit_code == 1
    assert "FINMBS_MISSING_KEY" in result.output


def test_invalid_yaml_one_line_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("roles: [unclosed\n")
    result = run("models", "--config", str(bad))
    assert result.exit_code == 2
    assert "invalid YAML" in result.output and "bad.yaml" in result.output


def test_unknown_key_names_key():
    result = run("models", "--set", "roles.target.temprature=0.5")
    assert result.exit_code == 2
    assert "roles.target.temprature" in result.output
