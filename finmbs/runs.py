"""The run folder: atomic writes, append-only JSONL keyed by id, and the layout every stage shares.

    runs/NAME/
      config.yaml          resolved run config (no secrets)
      seeds.jsonl          the seeds as read (Problem records)
      trees/SEED_ID.json   the seed's DecompositionTree and SyntheticTrees (one file per seed, atomic)
      qualified.jsonl      Problem records that passed final calibration (meta holds the DifficultyReport)
      rejected.jsonl       Rejection records: every candidate that did not make it, with stage and reason
      metrics.json         RunMetrics.summary()
      done/SEED_ID         marker: the seed is finished; a resumed run skips it
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

CONFIG = "config.yaml"
SEEDS = "seeds.jsonl"
TREES = "trees"
QUALIFIED = "qualified.jsonl"
REJECTED = "rejected.jsonl"
METRICS = "metrics.json"
DONE = "done"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write a file so readers see the old or the new content, never a part (rename over)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, data: Any) -> None:
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (killed writer) is ignored."""
    path = Path(path)
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


class JsonlLog:
    """Append-only JSONL whose rows are unique by a key; safe to reopen after a kill."""

    def __init__(self, path: str | Path, key: str = "id"):
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._repair_tail()
        self.seen = {self._key_of(row) for row in read_jsonl(self.path)}

    def _key_of(self, row: dict[str, Any]) -> str:
        value: Any = row
        for part in self.key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return str(value)

    def _repair_tail(self) -> None:
        """Cut a torn final line left by a killed writer, so appends stay line-aligned."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            atomic_write_text(self.path, data[: data.rfind(b"\n") + 1].decode("utf-8"))

    def append(self, rows: Iterable[BaseModel | dict[str, Any]]) -> int:
        """Append rows whose key is new; returns how many were written."""
        lines = []
        with self._lock:
            for row in rows:
                data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
                key = self._key_of(data)
                if key in self.seen:
                    continue
                self.seen.add(key)
                lines.append(json.dumps(data, ensure_ascii=False, default=str) + "\n")
            if lines:
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write("".join(lines))
                    handle.flush()
                    os.fsync(handle.fileno())
        return len(lines)

    def __contains__(self, key: str) -> bool:
        return key in self.seen


class RunDir:
    """Paths and markers of one run folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.root / name

    def tree_path(self, seed_id: str) -> Path:
        return self.root / TREES / f"{safe_name(seed_id)}.json"

    def is_done(self, seed_id: str) -> bool:
        return (self.root / DONE / safe_name(seed_id)).exists()

    def mark_done(self, seed_id: str) -> None:
        atomic_write_text(self.root / DONE / safe_name(seed_id), "")


def safe_name(name: str) -> str:
    """A file-name-safe form of an id."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:180] or "_"
