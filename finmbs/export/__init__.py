"""Export: qualified problems as veRL parquet, a Hugging Face dataset or JSONL, after decontamination."""

from finmbs.export.exporter import EmptyExport, ExportReport, export_run
from finmbs.runs.load import Run, RunReadError, load_run

__all__ = ["EmptyExport", "ExportReport", "Run", "RunReadError", "export_run", "load_run"]
