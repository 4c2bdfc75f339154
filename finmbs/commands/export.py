"""`finmbs export RUN`: training files (veRL parquet, HF dataset, JSONL) with decontamination and a report."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import track
from rich.table import Table

from finmbs.commands._common import UsageError, cli_errors, console
from finmbs.errors import FinmbsError
from finmbs.export.splits import DEFAULT_SPLIT


class ExportFormat(str, Enum):
    verl = "verl"
    trl = "trl"
    hf = "hf"
    jsonl = "jsonl"


class Contamination(str, Enum):
    drop = "drop"
    flag = "flag"


class NodesChoice(str, Enum):
    roots = "roots"
    all = "all"


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
        table.add_row(
            f"checked ({report.ngram}-grams, >= {report.min_coverage:.0%}) against",
            f"{sets}; seeds {report.seeds_checked}",
        )
        for source, count in sorted(report.contamination_by_source.items()):
            table.add_row(f"  overlap with {source}", str(count))
        table.add_row(
            f"{'dropped' if report.contamination_policy == 'drop' else 'flagged'} as contaminated",
            str(report.dropped or report.flagged),
        )
    if report.not_roots and report.nodes == "roots":
        table.add_row("left out: qualified nodes below a root (--nodes all)", str(report.not_roots))
    for name, split in report.splits.items():
        table.add_row(f"split {name} (by seed lineage)", f"{split.rows} rows from {split.seeds} seeds")
    return table


FormatOption = Annotated[ExportFormat, typer.Option("--format", "-f", help="Output format.")]
SplitOption = Annotated[
    str,
    typer.Option(
        help="Split fractions by seed lineage (every descendant of a seed lands in one split); "
        "the default holds out 5% for validation (veRL's data.val_files)."
    ),
]
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Output folder (default RUN/export/FORMAT); replaced whole.")
]
EvalDataOption = Annotated[
    list[Path] | None,
    typer.Option(
        metavar="PATH",
        help="Eval data folder (benchmarks of eval/*.yaml inside) or JSONL file; repeatable. "
        "Default: $FINMBS_EVAL_DATA or ../shared/data.",
    ),
]
CoverageOption = Annotated[
    float, typer.Option(help="Share of an eval question's n-grams a problem must reproduce to count as contaminated.")
]


def export(
    run: Annotated[Path, typer.Argument(help="Run folder, e.g. runs/NAME.")],
    format: FormatOption = ExportFormat.verl,
    split: SplitOption = DEFAULT_SPLIT,
    out: OutOption = None,
    decontaminate: Annotated[
        bool, typer.Option("--decontaminate/--no-decontaminate", help="Check n-gram overlap with eval sets and seeds.")
    ] = True,
    eval_data: EvalDataOption = None,
    contamination: Annotated[
        Contamination, typer.Option(help="What to do with contaminated problems.")
    ] = Contamination.drop,
    ngram: Annotated[int, typer.Option(help="Word n-gram size for decontamination.")] = 13,
    min_coverage: CoverageOption = 0.5,
    nodes: Annotated[
        NodesChoice, typer.Option(help="Ship tree roots only, or every qualified node (runs grown with --keep all).")
    ] = NodesChoice.roots,
    allow_empty: Annotated[
        bool,
        typer.Option("--allow-empty", help="Write empty files instead of failing when there is nothing to export."),
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            metavar="NAME",
            help="Export the problems in the band for this policy by their latest `finmbs requalify` entry "
            "(default out: RUN/export/FORMAT-NAME).",
        ),
    ] = None,
    push_to_hub: Annotated[
        str | None,
        typer.Option(
            "--push-to-hub",
            metavar="REPO",
            help="Also upload the export to this Hugging Face dataset repo (needs the network and HF_TOKEN).",
        ),
    ] = None,
) -> None:
    """Export a run's qualified problems for training (veRL or TRL parquet, Hugging Face dataset, or JSONL),
    split train/test by seed lineage, with a dataset card (README.md)."""
    from finmbs.export import export_run
    from finmbs.export.hub import push_export

    try:
        report = export_run(
            run,
            format.value,
            out=out,
            split=split,
            decontaminate=decontaminate,
            eval_data=eval_data,
            policy=contamination.value,
            ngram=ngram,
            min_coverage=min_coverage,
            allow_empty=allow_empty,
            nodes=nodes.value,
            band_policy=policy,
            track=lambda items, what: track(items, description=what, console=console, transient=True),
        )
    except FinmbsError:
        raise  # one line and its exit code (nothing to export: 1; a bad run file: 2)
    except (ValueError, FileExistsError) as exc:
        raise UsageError(str(exc)) from None
    console.print(report_table(report))
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    console.print(f"wrote {len(report.files)} files and export_report.json to {report.out}", highlight=False)
    if push_to_hub:
        url = push_export(Path(report.out), report.format, push_to_hub)  # HubError: one line, exit 1
        console.print(f"pushed to {url}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(export))
