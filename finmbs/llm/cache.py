"""Persistent response cache: one row per (request key, sample index), in sqlite."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from finmbs.llm.types import Sample

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    key TEXT NOT NULL,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    PRIMARY KEY (key, idx)
)
"""


def request_key(payload: dict[str, Any]) -> str:
    """A stable hash of everything that determines a response (model, input, sampling)."""
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Samples keyed by request and index; safe across threads and processes (WAL)."""

    def __init__(self, path: str | Path | None):
        self.path = str(path) if path else ":memory:"
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._setup()

    def _setup(self, attempts: int = 50) -> None:
        """Switch to WAL and create the table; another process creating the same file may hold it briefly."""
        for attempt in range(attempts):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute(_SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def get(self, key: str, indices: list[int]) -> dict[int, Sample]:
        if not indices:
            return {}
        marks = ",".join("?" * len(indices))
        with self._lock:
            rows = self._db.execute(
                f"SELECT idx, text, finish_reason, prompt_tokens, completion_tokens FROM samples "
                f"WHERE key = ? AND idx IN ({marks})",
                [key, *indices],
            ).fetchall()
        return {
            idx: Sample(text=t, finish_reason=f, prompt_tokens=p, completion_tokens=c, cached=True)
            for idx, t, f, p, c in rows
        }

    def put(self, key: str, samples: dict[int, Sample]) -> None:
        rows = [(key, i, s.text, s.finish_reason, s.prompt_tokens, s.completion_tokens) for i, s in samples.items()]
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?, ?, ?)", rows)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
