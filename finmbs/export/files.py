"""Atomic output folders: an export is built in a temporary folder beside the target, then swapped in."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = "export_report.json"


@contextmanager
def replacing_dir(target: Path) -> Iterator[Path]:
    """Yield an empty folder; on success it replaces `target` whole, on failure it is removed."""
    if target.exists() and any(target.iterdir()) and not (target / MARKER).exists():
        raise FileExistsError(f"{target} exists and is not a finmbs export; choose another --out")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield staging
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{staging.name}")
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
