"""veRL: one parquet file per split (`data.train_files=.../train.parquet`), columns as veRL's RLHFDataset reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def write(tables: dict[str, pa.Table], folder: Path) -> list[Path]:
    paths = []
    for split, table in tables.items():
        path = folder / f"{split}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths
