"""`finmbs ingest PATH...` and `finmbs search QUERY`: build and query the document index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from finmbs.commands._common import RunOptions, UsageError, cli_errors, console, with_run_options
from finmbs.config import IndexSettings, RunConfig
from finmbs.llm import Gateway

QdrantUrlOption = Annotated[
    str | None,
    typer.Option("--qdrant-url", envvar="QDRANT_URL", help="Qdrant server/cluster URL (API key from QDRANT_API_KEY)."),
]
IndexPathOption = Annotated[
    Path | None, typer.Option("--index-path", help="Embedded index folder (default: index.path of the config).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]


def index_settings(config: RunConfig, qdrant_url: str | None, index_path: Path | None) -> IndexSettings:
    """The config's index settings with the command-line overrides applied."""
    updates = {k: v for k, v in (("url", qdrant_url), ("path", str(index_path) if index_path else None)) if v}
    return config.index.model_copy(update=updates)


def report_table(report) -> Table:
    table = Table(title="ingest report", show_header=False)
    for key in (
        "files",
        "documents",
        "unchanged",
        "replaced",
        "pages",
        "chunks",
        "over_window",
        "tables",
        "definitions",
        "statements",  # primary statements recognised, their rows read (index.statements)
        "line_items",
        "statements_unread",  # pages that look like a statement whose rows could not be read: ordinary chunks
    ):
        table.add_row(key, str(getattr(report, key)))
    table.add_row("time", f"{report.seconds:.1f} s")
    for skipped in report.skipped:
        table.add_row("[red]skipped[/]", f"{skipped.path}: {skipped.reason}")
    return table


def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (searched recursively).")],
    options: RunOptions = RunOptions(),
    qdrant_url: QdrantUrlOption = None,
    index_path: IndexPathOption = None,
    summarize_with: Annotated[
        str | None, typer.Option(help="Role or endpoint name that writes document summaries (default: extractive).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Processes that parse files (default: the CPU cores).")
    ] = None,
    embed: Annotated[
        str | None,
        typer.Option(
            "--embed",
            help="full: every chunk embedded by index.embedding_model now; cascade: "
            "BM25 and a static embedder now, the model re-ranks at search time (default: index.embed).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Parse, chunk, summarize and index documents; unchanged files are skipped, changed ones replaced."""
    from finmbs.ingest import ingest_paths

    if embed not in (None, "full", "cascade"):
        raise UsageError(f"--embed must be full or cascade, not {embed!r}")
    resolved = options.load() if summarize_with else options.load_quietly()
    settings = index_settings(resolved, qdrant_url, index_path)
    if embed:
        settings = settings.model_copy(update={"embed": embed})
    endpoint = resolved.roles.endpoint(summarize_with) if summarize_with else None
    gateway = Gateway.from_config(resolved) if endpoint else None
    report = ingest_paths(
        paths, settings, gateway, endpoint, show_progress=not as_json, console=console, workers=workers
    )
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        console.print(report_table(report))
    if report.failed:
        raise typer.Exit(1)


def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", min=1, help="Number of hits.")] = 5,
    exclude_doc: Annotated[
        list[str] | None, typer.Option("--exclude-doc", help="Leave out this doc id (repeatable).")
    ] = None,
    doc_type: Annotated[
        str | None, typer.Option("--doc-type", help="Only this document type (10-K, credit_agreement, EX-10.2...).")
    ] = None,
    company: Annotated[str | None, typer.Option("--company", help="Only this company.")] = None,
    period: Annotated[str | None, typer.Option("--period", help="Only this period or year.")] = None,
    dense: Annotated[
        bool, typer.Option("--dense", help="Dense vectors only (default: dense + BM25 fused by RRF).")
    ] = False,
    no_metadata: Annotated[
        bool, typer.Option("--no-metadata", help="Do not filter by a company/year the query names.")
    ] = False,
    no_concepts: Annotated[
        bool,
        typer.Option(
            "--no-concepts",
            help="Do not add the statement and line items of a finance concept the query names "
            "(quick ratio, capex...).",
        ),
    ] = False,
    per_page: Annotated[
        int, typer.Option("--per-page", min=0, help="Hits allowed from one PDF page (0: no limit).")
    ] = 1,
    options: RunOptions = RunOptions(),
    qdrant_url: QdrantUrlOption = None,
    index_path: IndexPathOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ranked chunks with document, section, page and score."""
    from finmbs.ingest import open_index
    from finmbs.ingest.search import hit_json, hits_table
    from finmbs.ingest.store import store_url

    settings = index_settings(options.load_quietly(), qdrant_url, index_path)
    with open_index(settings) as index:
        hits = index.search(
            query,
            k,
            exclude_doc_ids=exclude_doc or (),
            doc_type=doc_type,
            company=company,
            period=period,
            hybrid=not dense,
            metadata=not no_metadata,
            concepts=not no_concepts,
            per_page=per_page,
        )
        if not hits and not index.documents():
            raise UsageError(
                f"the index at {store_url(settings) or settings.path} holds no documents: run "
                "`finmbs ingest PATH` first (or point --index-path / --qdrant-url at the index)"
            )
        for note in [index.upgrade_note(), *hits.notes]:
            if note:
                console.print(f"[yellow]note:[/] {note}")
    if as_json:
        typer.echo(json.dumps([hit_json(rank, hit) for rank, hit in enumerate(hits, 1)], indent=2, ensure_ascii=False))
    elif not hits:
        console.print("no hits")
    else:
        from rich.console import Console

        Console().print(hits_table(query, hits))


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(ingest)))
    app.command()(cli_errors(with_run_options(search)))
