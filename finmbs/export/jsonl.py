"""Plain JSONL: one row a line per split, the same columns as the veRL parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa


def write(tables: dict[str, pa.Table], folder: Path) -> list[Path]:
    paths = []
    for split, table in tables.items():
        path = folder / f"{split}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for row in table.to_pylist():
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths
