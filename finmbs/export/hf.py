"""Hugging Face `datasets`: a DatasetDict saved to disk (`datasets.load_from_disk(folder)`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def write(tables: dict[str, pa.Table], folder: Path) -> list[Path]:
    from datasets import Dataset, DatasetDict, disable_progress_bars

    disable_progress_bars()
    DatasetDict({split: Dataset(table) for split, table in tables.items()}).save_to_disk(str(folder))
    return [folder / "dataset_dict.json", *(folder / split for split in tables)]
