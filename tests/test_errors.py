"""One error root: every exception class finmbs defines derives from FinmbsError (keeping its other bases, so
existing `except ValueError` clauses still catch it), and the command line turns any of them into one line and
the class's exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from typer.testing import CliRunner

import finmbs
from finmbs.cli import app
from finmbs.errors import FinmbsError


def finmbs_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module under finmbs/ (each module imported)."""
    found = []
    for info in pkgutil.walk_packages(finmbs.__path__, "finmbs."):
        module = importlib.import_module(info.name)
        found += [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
        ]
    return found


def test_every_finmbs_exception_derives_from_finmbs_error():
    classes = finmbs_exceptions()
    assert len(classes) >= 23  # the walk found them (23 when the root was introduced)
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, FinmbsError)] == []


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("finmbs.config.ConfigError", ValueError),
        ("finmbs.seeds.SeedsError", ValueError),
        ("finmbs.ingest.parse.ParseError", ValueError),
        ("finmbs.export.exporter.EmptyExport", ValueError),
        ("finmbs.llm.types.GatewayError", RuntimeError),
        ("finmbs.llm.types.BudgetExceeded", RuntimeError),
        ("finmbs.runs.RunFolderBusy", RuntimeError),
        ("finmbs.executors.ExecutorError", RuntimeError),
    ],
)
def test_the_root_keeps_each_class_s_other_base(name, base):
    module, _, cls = name.rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), cls), base)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("stages:\n  nope: 1\n")
    (tmp_path / "emptyrun").mkdir()
    (tmp_path / "emptyrun" / "qualified.jsonl").write_text("")
    return tmp_path


@pytest.mark.parametrize(
    ("command", "code", "line"),
    [
        (["config", "show", "--config", "bad.yaml"], 2, "error: Field required (+1 more) (file bad.yaml, key roles)"),
        (["config", "show", "--config", "missing.yaml"], 2, "error: config file not found (file missing.yaml)"),
        (["grow", "--seeds", "missing.jsonl"], 2, "error: seeds file not found: missing.jsonl"),
        (["report", "missing-run"], 2, "error: run folder not found: missing-run"),
        (
            ["export", "emptyrun"],
            1,
            "error: nothing to export: no qualified problems in emptyrun/qualified.jsonl; nothing "
            "was written (--allow-empty writes empty files)",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_an_expected_failure_is_one_line_and_its_exit_code(scratch, command, code, line):
    result = CliRunner().invoke(app, command, env={"COLUMNS": "300", "NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code
    assert [row for row in result.output.splitlines() if row.startswith("error:")] == [line]
