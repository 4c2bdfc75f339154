"""TRL: one parquet file per split with a conversational `prompt` and flat columns for GRPOTrainer.

GRPOTrainer passes every dataset column except `prompt` to each reward function as a keyword list, so
`finmbs.reward.trl_reward(completions, answer=..., data_source=..., question=...)` needs no lookup.

    load_dataset("parquet", data_files={"train": "train.parquet", "test": "test.parquet"})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from finmbs.export.rows import EXTRA_INFO, SCHEMA

_FLAT = [field for field in EXTRA_INFO if field.name not in ("question", "answer", "split", "index")]
TRL_SCHEMA = pa.schema(
    [
        SCHEMA.field("prompt"),
        ("answer", pa.string()),
        ("data_source", pa.string()),
        ("question", pa.string()),
        ("split", pa.string()),
        *_FLAT,
    ]
)


def trl_row(row: dict[str, Any]) -> dict[str, Any]:
    """A veRL row flattened: prompt, answer, data_source, question, then the lineage and band columns."""
    info = row["extra_info"]
    flat = {field.name: info[field.name] for field in _FLAT}
    return {
        "prompt": row["prompt"],
        "answer": row["reward_model"]["ground_truth"],
        "data_source": row["data_source"],
        "question": info["question"],
        "split": info["split"],
        **flat,
    }


def write(tables: dict[str, pa.Table], folder: Path) -> list[Path]:
    paths = []
    for split, table in tables.items():
        path = folder / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist([trl_row(r) for r in table.to_pylist()], schema=TRL_SCHEMA), path)
        paths.append(path)
    return paths
