"""`finmbs seeds from-financebench|from-csv`: convert question sets into finance seed JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finmbs.commands._common import cli_errors, console, fail
from finmbs.convert import SeedFormatError, from_csv, from_financebench, write_seeds

OutOption = Annotated[Path, typer.Option("--out", "-o", help="Seeds JSONL to write (replaced atomically).")]


def _write(seeds, out: Path) -> None:
    count = write_seeds(seeds, out)
    console.print(f"wrote {count} finance seeds to {out}")


def register(app: typer.Typer) -> None:
    seeds_app = typer.Typer(help="Convert question sets into finmbs seed JSONL.", no_args_is_help=True)
    app.add_typer(seeds_app, name="seeds")

    @seeds_app.command("from-financebench")
    @cli_errors
    def financebench(
        path: Annotated[Path, typer.Argument(help="financebench_open_source.jsonl")],
        out: OutOption,
        pdf_dir: Annotated[Path | None, typer.Option(help="Folder of DOC_NAME.pdf files, recorded as source_path.")] = None,
    ) -> None:
        """FinanceBench JSONL -> seeds (snippet = the evidence text, entity = the company)."""
        try:
            _write(from_financebench(path, pdf_dir), out)
        except SeedFormatError as exc:
            fail(str(exc))

    @seeds_app.command("from-csv")
    @cli_errors
    def csv_(
        path: Annotated[Path, typer.Argument(help="CSV with a header row.")],
        out: OutOption,
        question_col: Annotated[str, typer.Option(help="Question column.")] = "question",
        answer_col: Annotated[str, typer.Option(help="Answer column.")] = "answer",
        snippet_col: Annotated[str | None, typer.Option(help="Snippet column (default: snippet or evidence).")] = None,
        entity_col: Annotated[str, typer.Option(help="Entity column.")] = "entity",
        doc_col: Annotated[str, typer.Option(help="Document id/path column (optional in the file).")] = "doc",
    ) -> None:
        """Plain CSV -> seeds; a malformed row stops with its file and line."""
        try:
            seeds = from_csv(path, question_col=question_col, answer_col=answer_col, snippet_col=snippet_col,
                             entity_col=entity_col, doc_col=doc_col)
        except SeedFormatError as exc:
            fail(str(exc))
        _write(seeds, out)
