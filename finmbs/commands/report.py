"""`finmbs report RUN`: a self-contained static HTML report with a tree browser."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finmbs.commands._common import cli_errors, console


def report(
    run: Annotated[Path, typer.Argument(help="Run folder, e.g. runs/NAME.")],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="HTML file to write (default RUN/report.html).")
    ] = None,
) -> None:
    """Write a static HTML report (metrics, band plots, yields, usage, tree browser) that opens from disk."""
    from finmbs.report import write_report

    path = write_report(run, out)
    console.print(f"wrote {path} (open it in a browser; no server needed)", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(report))
