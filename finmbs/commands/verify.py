"""`finmbs verify FILE`: audit the stated answers of any problem file with the configured teachers."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, with_run_options
from finmbs.llm import Gateway
from finmbs.runs import atomic_write_json, atomic_write_text
from finmbs.seeds import load_seeds


def verify(
    problems: Annotated[
        Path, typer.Argument(help="Problems JSONL (a run's qualified.jsonl, a seeds file, a dataset).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Per-problem verdicts JSONL (default FILE.verify.jsonl); a .summary.json beside it."
        ),
    ] = None,
    relabel: Annotated[
        bool | None,
        typer.Option(
            "--relabel/--no-relabel",
            help="Relabel a problem whose program and traces agree on another answer (default: stages.relabel).",
        ),
    ] = None,
    programs: Annotated[
        bool | None,
        typer.Option(
            "--programs/--no-programs",
            help="Check answers with programs too (default: verify.programs); --no-programs: teacher traces alone.",
        ),
    ] = None,
    options: RunOptions = RunOptions(),
) -> None:
    """Verify each problem's stated answer: verified, relabeled or rejected, with the reason and what its
    program gave (the teacher writes a program for a problem that carries none)."""
    from finmbs.mbs.context import Context
    from finmbs.mbs.labels import check_labels

    rows = load_seeds(problems)
    resolved = options.with_overrides(
        *([f"stages.relabel={str(relabel).lower()}"] if relabel is not None else []),
        *([f"verify.programs={str(programs).lower()}"] if programs is not None else []),
    ).load()
    out = out or problems.with_name(f"{problems.stem}.verify.jsonl")
    gateway = Gateway.from_config(resolved)
    started = time.monotonic()
    try:
        with console.status(f"verifying {len(rows)} problems"):
            checks = asyncio.run(
                check_labels(Context(config=resolved, gateway=gateway), rows, concurrency=resolved.seed_concurrency)
            )
    finally:
        gateway.close()
    atomic_write_text(out, "".join(c.model_dump_json() + "\n" for c in checks))
    counts = Counter(c.outcome for c in checks)
    summary = {
        "file": str(problems),
        "problems": len(checks),
        **{k: counts[k] for k in ("verified", "relabeled", "rejected", "refused")},  # refused: could not be run
        "rejected_by_program": sum(c.check == "program" for c in checks),
        "programs_written": sum(c.program_written for c in checks),
        "programs_skipped": sum(bool(c.program_skipped) for c in checks),  # finance passages with no figure
        "programs": resolved.verify.programs,
        "relabel": resolved.stages.relabel,
        "tokens": sum(u.prompt_tokens + u.completion_tokens for u in gateway.usage.values()),
        "usage": {role: u.model_dump() for role, u in gateway.usage.items()},
        "wall_time_s": round(time.monotonic() - started, 1),
    }
    atomic_write_json(out.with_suffix(".summary.json"), summary)
    table = Table(title=f"finmbs verify {problems} -> {out}")
    shown = ("problems", "verified", "relabeled", "rejected", "refused", "rejected_by_program", "tokens")
    for key in shown:
        table.add_column(key, justify="right")
    table.add_row(*(str(summary[k]) for k in shown))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(verify)))
