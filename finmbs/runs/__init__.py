"""The run layer, above the engine (`finmbs.mbs`): the run folder and its one writer (`folder`), the run
loop with resume, done markers, config record and signal handling (`grow`), the run's metrics
(`metrics`), the run loader export, report and audit read through (`load`), and the direct baseline's
matched budgets (`budgets`).

The names are loaded on first use (PEP 562), so a user of the run folder alone (an atomic write, a
layout name) does not import the engine."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_FOLDER = (
    "CONFIG",
    "CONFIG_CHANGES",
    "CONTAMINATION",
    "DONE",
    "LOCK",
    "METRICS",
    "QUALIFIED",
    "QUALIFIED_NODES",
    "REJECTED",
    "SEEDS",
    "TMP_SUFFIX",
    "TREES",
    "USAGE",
    "JsonlLog",
    "RunDir",
    "RunFolderBusy",
    "UsageLedger",
    "atomic_write_json",
    "atomic_write_text",
    "file_name",
    "read_jsonl",
    "safe_name",
)
_WHERE = {
    **dict.fromkeys(_FOLDER, "folder"),
    **dict.fromkeys(("record_config", "regrounds", "run_grow", "save_seed", "sigterm_as_interrupt"), "grow"),
    **dict.fromkeys(("collect_metrics",), "metrics"),
    **dict.fromkeys(("Run", "RunReadError", "load_run", "read_json"), "load"),
    **dict.fromkeys(("construction_budgets",), "budgets"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'finmbs.runs' has no attribute {name!r}")
    return getattr(import_module(f"finmbs.runs.{_WHERE[name]}"), name)
