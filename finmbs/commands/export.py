"""`finmbs export RUN`: training files (veRL parquet, HF dataset, JSONL) with decontamination and a report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import track
from rich.table import Table

from finmbs.commands._common import UsageError, cli_errors, console

if TYPE_CHECKING:
    from finmbs.export import ExportReport


def report_table(report: ExportReport) -> Table:
    table = Table(title=f"export {report.format} -> {report.out}")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("qualified problems", str(report.problems))
    for domain, count in sorted(report.by_domain.items()):
        table.add_row(f"  {domain}", str(count))
    if report.decontaminated:
        sets = ", ".join(f"{name} {count}" for name, count in report.eval_sets.items()) or "none"
        table.add_row(f"checked ({report.ngram}-grams, >= {report.min_coverage:.0%}) against",
                      f"{sets}; seeds {report.seeds_checked}")
        for source, count in sorted(report.contamination_by_source.items()):
            table.add_row(f"  overlap with {source}", str(count))
        table.add_row(f"{'dropped' if report.contamination_policy == 'drop' else 'flagged'} as contaminated",
                      str(report.dropped or report.flagged))
    for name, split in report.splits.items():
        table.add_row(f"split {name}", f"{split.rows} rows from {split.seeds} seeds")
    return table


FormatOption = Annotated[str, typer.Option("--format", "-f", help="verl | hf | jsonl")]
SplitOption = Annotated[str, typer.Option(help="Split fractions by seed lineage, e.g. train=0.95,test=0.05.")]
OutOption = Annotated[Path | None, typer.Option(help="Output folder (default RUN/export/FORMAT); replaced whole.")]
EvalDataOption = Annotated[list[Path] | None, typer.Option(
    help="Eval data folder (benchmarks of eval/*.yaml inside) or JSONL file; repeatable. "
         "Default: $FINMBS_EVAL_DATA or ../shared/data.")]
CoverageOption = Annotated[float, typer.Option(
    help="Share of an eval question's n-grams a problem must reproduce to count as contaminated.")]


def register(app: typer.Typer) -> None:
    @app.command()
    @cli_errors
    def export(
        run: Annotated[Path, typer.Argument(help="Run folder, e.g. runs/NAME.")],
        format: FormatOption = "verl",
        split: SplitOption = "train",
        out: OutOption = None,
        decontaminate: Annotated[bool, typer.Option(help="Check n-gram overlap with eval sets and seeds.")] = True,
        eval_data: EvalDataOption = None,
        contamination: Annotated[str, typer.Option(help="drop | flag contaminated problems.")] = "drop",
        ngram: Annotated[int, typer.Option(help="Word n-gram size for decontamination.")] = 13,
        min_coverage: CoverageOption = 0.5,
    ) -> None:
        """Export a run's qualified problems for training (veRL parquet, Hugging Face dataset, or JSONL)."""
        from finmbs.export import RunReadError, export_run

        if format not in ("verl", "hf", "jsonl"):
            raise UsageError(f"--format must be verl, hf or jsonl, not {format!r}")
        if contamination not in ("drop", "flag"):
            raise UsageError(f"--contamination must be drop or flag, not {contamination!r}")
        try:
            report = export_run(
                run, format, out=out, split=split, decontaminate=decontaminate, eval_data=eval_data,
                policy=contamination, ngram=ngram, min_coverage=min_coverage,
                track=lambda items, what: track(items, description=what, console=console, transient=True),
            )
        except (RunReadError, ValueError, FileExistsError) as exc:
            raise UsageError(str(exc)) from None
        console.print(report_table(report))
        for warning in report.warnings:
            console.print(f"[yellow]warning:[/] {warning}", highlight=False)
        console.print(f"wrote {len(report.files)} files and export_report.json to {report.out}", highlight=False)
