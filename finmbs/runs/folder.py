"""The run folder: atomic writes, append-only JSONL keyed by id, and the layout every stage shares.

    runs/NAME/
      config.yaml          resolved run config (no secrets)
      seeds.jsonl          the seeds as read (Problem records)
      trees/SEED_ID.json   the seed's tree file, a `records.SeedTrees`: its DecompositionTree and SyntheticTrees,
                           tokens, per-stage usage and counts (one file per seed, atomic)
      qualified.jsonl      Problem records that passed final calibration (meta holds the DifficultyReport)
      qualified_nodes.jsonl  keep: all -- the other qualified synthetic nodes
      rejected.jsonl       Rejection records: every candidate that did not make it, with stage and reason
      metrics.json         RunMetrics.summary()
      usage.jsonl          per-process LLM usage snapshots, written as calls are paid for (budget and totals
                           of every run on this folder, killed ones included)
      config_changes.jsonl what a rerun with --allow-config-change changed
      done/SEED_ID         marker: the seed is finished (holds when, UTC); a resumed run skips it
      .lock                held (flock) by the one process writing the folder; names its pid and host

SEED_ID in file names is `file_name(id)`: the id itself when it is a plain lower-case name, otherwise
a readable prefix plus a hash of the id, so distinct ids never share a file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from finmbs.errors import FinmbsError

CONFIG = "config.yaml"
SEEDS = "seeds.jsonl"
TREES = "trees"
QUALIFIED = "qualified.jsonl"
REJECTED = "rejected.jsonl"
METRICS = "metrics.json"
DONE = "done"
USAGE = "usage.jsonl"
CONFIG_CHANGES = "config_changes.jsonl"
CONTAMINATION = "contamination.json"  # finance: the documents re-grounding never targets, and why
QUALIFIED_NODES = "qualified_nodes.jsonl"  # keep: all -- qualified non-root nodes, apart from qualified.jsonl
LOCK = ".lock"
TMP_SUFFIX = ".tmp"


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


class RunFolderBusy(FinmbsError, RuntimeError):
    """Another live process holds the run folder."""


class RunDir:
    """Paths, markers and the lock of one run folder."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise NotADirectoryError(f"run folder {self.root} is a file, not a folder")
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = None

    def path(self, name: str) -> Path:
        return self.root / name

    def tree_path(self, seed_id: str) -> Path:
        return self.root / TREES / f"{file_name(seed_id)}.json"

    def is_done(self, seed_id: str) -> bool:
        return (self.root / DONE / file_name(seed_id)).exists()

    def mark_done(self, seed_id: str) -> None:
        """The seed is finished: its marker holds the time (ISO 8601, UTC), the date of the seed's calibration
        that `finmbs requalify` enters in a pool's history."""
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        atomic_write_text(self.root / DONE / file_name(seed_id), stamp + "\n")

    def done_at(self, seed_id: str) -> str | None:
        """When the seed finished (ISO 8601, UTC): its marker's time, or for a marker written before it held
        one (empty) the marker's modification time; None when the seed is not finished."""
        marker = self.root / DONE / file_name(seed_id)
        try:
            text = marker.read_text(encoding="utf-8").strip()
            if text:
                return datetime.fromisoformat(text).isoformat(timespec="seconds")
            return datetime.fromtimestamp(marker.stat().st_mtime, UTC).isoformat(timespec="seconds")
        except FileNotFoundError:
            return None
        except ValueError:  # not a time: the marker's modification time
            return datetime.fromtimestamp(marker.stat().st_mtime, UTC).isoformat(timespec="seconds")

    # the one writer ----------------------------------------------------------------------------
    def lock(self) -> None:
        """Hold the folder for this process; RunFolderBusy (naming the holder) when another live one does.

        The lock is an flock on `.lock`: the kernel drops it when its holder dies, however it dies,
        so a lock left by a killed process is simply taken over.
        """
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise RunFolderBusy(
                f"run folder {self.root} is in use by {holder}; wait for it to finish or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0
        )
        self._lock_fd = fd
        self.remove_leftover_tmp()

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunDir:
        self.lock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unlock()

    def remove_leftover_tmp(self) -> int:
        """Delete the temporary files of atomic writes a killed process left behind; how many."""
        leftovers = [p for p in self.root.rglob(f".*{TMP_SUFFIX}") if p.is_file()]
        for path in leftovers:
            path.unlink(missing_ok=True)
        return len(leftovers)


_PLAIN_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,99}")


def file_name(seed_id: str) -> str:
    """A safe file name for an id, never shared by two ids.

    Plain lower-case ids ("fb-0042") are used as they are; any other id (".", "..", "a/b", long,
    upper-case or non-ASCII) becomes a readable prefix plus "~" and a hash of the whole id. "~" never
    appears in a plain id, so the two forms cannot meet.
    """
    if _PLAIN_ID.fullmatch(seed_id) and seed_id not in (".", ".."):
        return seed_id
    digest = hashlib.sha256(seed_id.encode("utf-8")).hexdigest()[:16]
    return f"{safe_name(seed_id)[:60].strip('.')}~{digest}"


def safe_name(name: str) -> str:
    """A file-name-safe form of a name (lossy: for display names, not ids; see `file_name`)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:180] or "_"


# usage that survives kills -------------------------------------------------------------------------
class UsageLedger:
    """Append-only snapshots of each process's cumulative usage on a run folder.

    A process appends its whole per-role usage whenever it changes; the totals of the folder are the
    last snapshot of every process, so a run killed at any point still counts every call it paid for.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.session = uuid.uuid4().hex
        self._lock = threading.Lock()
        self.before = self._compact()

    def _compact(self) -> dict[str, dict[str, Any]]:
        """Earlier processes' last snapshots (the file rewritten to just those)."""
        last: dict[str, dict[str, Any]] = {}
        for row in read_jsonl(self.path):
            if isinstance(row, dict) and "session" in row:
                last[row["session"]] = row["usage"]
        if self.path.exists():
            atomic_write_text(
                self.path, "".join(json.dumps({"session": k, "usage": v}) + "\n" for k, v in last.items())
            )
        return last

    def write(self, usage: dict[str, BaseModel]) -> None:
        line = json.dumps({"session": self.session, "usage": {r: u.model_dump(mode="json") for r, u in usage.items()}})
        with self._lock, self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
