"""`finmbs seeds from-financebench|from-csv`: convert question sets into finance seed JSONL; `finmbs seeds mine`:
mine hard, verified seed questions from an ingested corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from finmbs.commands._common import RunOptions, cli_errors, console, fail, with_run_options
from finmbs.convert import from_csv, from_financebench, write_seeds

OutOption = Annotated[Path, typer.Option("--out", "-o", help="Seeds JSONL to write (replaced atomically).")]


def _write(seeds, out: Path) -> None:
    count = write_seeds(seeds, out)
    console.print(f"wrote {count} finance seeds to {out}")


def financebench(
    path: Annotated[Path, typer.Argument(help="financebench_open_source.jsonl")],
    out: OutOption,
    pdf_dir: Annotated[Path | None, typer.Option(help="Folder of DOC_NAME.pdf files, recorded as source_path.")] = None,
) -> None:
    """FinanceBench JSONL -> seeds (snippet = the evidence text, entity = the company)."""
    _write(from_financebench(path, pdf_dir), out)


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
    seeds = from_csv(
        path,
        question_col=question_col,
        answer_col=answer_col,
        snippet_col=snippet_col,
        entity_col=entity_col,
        doc_col=doc_col,
    )
    _write(seeds, out)


def mine(
    out: OutOption,
    index_path: Annotated[
        Path | None, typer.Option("--index-path", help="Embedded index folder (default: index.path of the config).")
    ] = None,
    documents: Annotated[
        list[str] | None,
        typer.Option(
            "--documents",
            "--document",
            metavar="DOC",
            help=("Mine only this document (doc id, file name or file stem); repeatable. Default: every document."),
        ),
    ] = None,
    companies: Annotated[
        list[str] | None,
        typer.Option(
            "--companies", "--company", metavar="NAME", help=("Mine only this company's documents; repeatable.")
        ),
    ] = None,
    per_document: Annotated[
        int, typer.Option(min=1, help="Candidate questions asked per document (one per passage).")
    ] = 4,
    types: Annotated[
        str,
        typer.Option(
            help="Question types, asked in turn: comma-separated of lookup, one_step, multi_step, cross_passage."
        ),
    ] = "lookup,one_step,multi_step,cross_passage",
    hard_only: Annotated[
        bool,
        typer.Option(
            "--hard-only",
            help=("Keep only questions the target policy fails in all N rollouts at L (the paper's seed criterion)."),
        ),
    ] = False,
    evidence: Annotated[
        str,
        typer.Option(
            help=(
                "quote: the teacher copies its evidence, proven verbatim in the document; select (finmbs's, for small "
                "teachers that paraphrase their quotes): it names the passage's numbered lines, "
                "verbatim by construction."
            )
        ),
    ] = "quote",
    eval_data: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="PATH",
            help=(
                "Eval data folder or JSONL file a question must not overlap (n-gram decontamination as in export); "
                "repeatable. Default: $FINMBS_EVAL_DATA or ../shared/data when present."
            ),
        ),
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Run folder (default runs/mine-OUT_STEM); rerun to resume.")
    ] = None,
    options: RunOptions = RunOptions(),
    allow_config_change: Annotated[
        bool, typer.Option("--allow-config-change", help="Continue an existing run folder under a changed config.")
    ] = False,
) -> None:
    """Mine hard, verified seed questions from an ingested corpus (the seeds file `finmbs grow --seeds` reads).

    For each document: the passages worth asking about (figures and finance terms, no model call), one
    teacher question each, kept only when its evidence is verbatim in the document, it names its company,
    a teacher trace verifies its answer, the judge finds the passage answers it, it restates no other
    mined question and overlaps no eval question; each kept one records the target's measured accuracy.
    Every rejected candidate is in RUN/rejected.jsonl with its reason. Rerun the same command to resume.
    """
    import asyncio

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from finmbs.export.exporter import default_eval_data
    from finmbs.llm import BudgetExceeded, GatewayError
    from finmbs.mine.questions import Options
    from finmbs.mine.run import run_mine

    resolved = options.load()
    if index_path is not None:
        resolved = resolved.model_copy(update={"index": resolved.index.model_copy(update={"path": str(index_path)})})
    options = Options(
        per_document=per_document,
        types=[t.strip() for t in types.split(",") if t.strip()],
        hard_only=hard_only,
        evidence=evidence,
    )
    run_dir = run_dir or Path("runs") / f"mine-{out.stem}"
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        docs = progress.add_task("documents", total=None)
        counters = {
            stage: progress.add_task(stage, total=None) for stage in ("mine", "traces", "judge", "calibrate", "kept")
        }

        def tick(stage: str, advance: int = 1) -> None:
            task = docs if stage == "documents" else counters.get(stage)
            if task is not None:
                progress.advance(task, advance)

        try:
            metrics = asyncio.run(
                run_mine(
                    resolved,
                    options,
                    out,
                    run_dir,
                    documents=documents,
                    companies=companies,
                    eval_data=default_eval_data() if eval_data is None else eval_data,
                    tick=tick,
                    allow_config_change=allow_config_change,
                    on_start=lambda n: progress.update(docs, total=n),
                )
            )
        except BudgetExceeded as exc:
            fail(
                f"{exc}; finished documents are saved in {run_dir}: raise budget.max_tokens and rerun to continue",
                code=3,
            )
        except GatewayError as exc:
            fail(f"{exc}; finished documents are saved in {run_dir}: rerun the same command to resume", code=1)
    console.print(mine_table(metrics, out, run_dir))


def register(app: typer.Typer) -> None:
    seeds_app = typer.Typer(
        help="Convert question sets into finmbs seed JSONL, or mine them from documents.", no_args_is_help=True
    )
    app.add_typer(seeds_app, name="seeds")
    seeds_app.command("from-financebench")(cli_errors(financebench))
    seeds_app.command("from-csv")(cli_errors(csv_))
    seeds_app.command("mine")(cli_errors(with_run_options(mine)))


def mine_table(metrics, out: Path, run_dir: Path):
    """The run's figures: candidates, kept per type, rejections per reason, hard share, cost."""
    from rich.table import Table

    table = Table(title=f"finmbs seeds mine -> {out} (run folder {run_dir})")
    table.add_column("metric")
    table.add_column("value", justify="right", overflow="fold")
    kinds = lambda counts: ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"  # noqa: E731
    rows = [
        ("documents (finished / selected)", f"{metrics.documents_done} / {metrics.documents}"),
        ("documents without a usable passage", metrics.documents_without_passage),
        ("candidates", f"{metrics.candidates} ({kinds(metrics.candidates_by_type)})"),
        ("kept seeds", f"{metrics.kept} ({kinds(metrics.kept_by_type)})"),
        ("rejected, by reason", kinds(metrics.rejected_by_check)),
        (
            f"hard for {metrics.target} (0 of N) / calibrated",
            f"{metrics.hard} / {metrics.calibrated} ({metrics.hard_share:.0%})",
        ),
        ("tokens (construction / all)", f"{metrics.construction_tokens} / {metrics.tokens}"),
        ("tokens per kept seed", f"{metrics.tokens / metrics.kept:.0f}" if metrics.kept else "-"),
        ("wall time (s)", f"{metrics.wall_time_s:.1f}"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table
