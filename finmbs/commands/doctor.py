"""`finmbs doctor`: what this environment holds, for a bug report: versions against the lock, the
optional extras, the embedded models' cache, the program sandbox's layers; `--smoke` also imports every
integration and ingests and searches one shipped agreement."""

from __future__ import annotations

import importlib.util
import platform
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from finmbs.commands._common import cli_errors, fail

KEY_PACKAGES = (
    "torch",
    "transformers",
    "sentence-transformers",
    "tokenizers",
    "huggingface-hub",
    "model2vec",
    "qdrant-edge-py",
    "qdrant-client",
    "llama-cpp-python",
    "litellm",
    "llama-index-core",
    "pymupdf",
    "unstructured",
    "math-verify",
    "pydantic",
    "typer",
    "numpy",
    "pandas",
    "pyarrow",
    "ray",
    "trl",
    "verl",
)


def versions_table() -> tuple[Table, int]:
    """The key packages: installed version, locked version, and whether they agree."""
    from finmbs.deps import installed, locked, release

    have, pins = installed(), locked()
    table = Table(title="packages", show_lines=False)
    for column in ("package", "installed", "locked", ""):
        table.add_column(column)
    problems = 0
    for name in KEY_PACKAGES:
        got, want = have.get(name), pins.get(name)
        ok = got is None and want is None or (got is not None and want is not None and release(got) == release(want))
        if name == "verl" and got is not None:  # installed without its dependencies: not in the lock
            ok = True
        problems += not ok
        table.add_row(name, got or "-", want or "-", "[green]ok[/]" if ok else "[red]differs[/]")
    return table, problems


def extras_table() -> Table:
    from finmbs.deps import EXTRAS

    table = Table(title="optional extras")
    table.add_column("extra")
    table.add_column("importable")
    for extra, module in EXTRAS.items():
        table.add_row(extra, "yes" if importlib.util.find_spec(module) is not None else "no")
    return table


def models_table() -> Table:
    """Each embedded model: its part packages installed, and whether the assembled GGUF is cached."""
    from importlib.metadata import PackageNotFoundError, version

    from finmbs.llm.embedded import REGISTRY, _verified, cache_dir

    table = Table(title=f"embedded models (cache: {cache_dir()})")
    for column in ("model", "packages", "parts installed", "assembled"):
        table.add_column(column)
    for model in REGISTRY.values():
        present = 0
        for i in range(1, model.parts + 1):
            try:
                present += version(model.part(i)[0]) == model.version
            except PackageNotFoundError:
                pass
        gguf = cache_dir() / f"{model.name}.gguf"
        state = (
            ("yes, verified" if _verified(model, gguf) else "yes, unverified")
            if gguf.is_file()
            else "no (on first use)"
        )
        table.add_row(model.name, model.packages, f"{present}/{model.parts}", state)
    return table


def sandbox_table() -> Table:
    """Which layers of the program sandbox hold on this machine, and what each does not cover (a missing one
    is also warned about once per run that executes programs)."""
    from finmbs.verify.program import NOT_COVERED, OS_LAYERS, sandbox_layers

    layers = sandbox_layers()
    table = Table(title="program sandbox (docs/programs.md)")
    for column in ("layer", "what", "does not cover", "active"):
        table.add_column(column)
    language = {
        "language": "RestrictedPython; imports as read-only views of math, fractions, decimal, statistics, datetime, "
        "sympy (finmbs's linear subset)"
    }
    for name, what in {**language, **OS_LAYERS}.items():
        table.add_row(name, what, NOT_COVERED[name], "[green]yes[/]" if layers.get(name) else "[red]no[/]")
    return table


def smoke(console: Console) -> None:
    """Import every integration, then ingest one shipped agreement into a scratch index and search it."""
    from finmbs.config import load_config
    from finmbs.deps import INTEGRATIONS, integration
    from finmbs.ingest import ingest_paths, open_index
    from finmbs.resources import resource_dir

    for module, dist, what in INTEGRATIONS:
        integration(module)
        console.print(f"import {module} ({dist}: {what}): ok", highlight=False)
    docs = resource_dir("corpora") / "finance" / "docs"
    agreement = sorted(docs.glob("*.txt"))[0]
    with tempfile.TemporaryDirectory(prefix="finmbs-smoke-") as scratch:
        settings = load_config(None, []).index.model_copy(update={"path": str(Path(scratch) / "index"), "url": None})
        report = ingest_paths([agreement], settings, None, None, show_progress=False, console=console)
        if report.failed or not report.chunks:
            fail(f"smoke: ingesting {agreement.name} failed: {report.skipped}", code=1)
        with open_index(settings) as index:
            hits = index.search("interest rate margin after an event of default", 3)
        if not hits:
            fail(f"smoke: searching {agreement.name} returned no hits", code=1)
    console.print(
        f"ingest {agreement.name}: {report.chunks} chunks; search: {len(hits)} hits, top: "
        f"{' '.join(hits[0].chunk.text.split())[:80]!r}",
        highlight=False,
    )


def doctor(
    smoke_test: Annotated[
        bool, typer.Option("--smoke", help="Also import every integration and ingest + search one shipped agreement.")
    ] = False,
) -> None:
    """Versions of the key dependencies against the lock, optional extras, embedded models: paste it into a bug
    report."""
    from finmbs import __version__
    from finmbs.deps import drift, fix, lock_path

    out = Console()
    lock = lock_path()
    out.print(
        f"finmbs {__version__}, Python {platform.python_version()} ({sys.executable}), {platform.platform()}",
        highlight=False,
    )
    out.print(f"lock: {lock or 'none for this Python'}", highlight=False)
    table, problems = versions_table()
    out.print(table)
    out.print(extras_table())
    out.print(models_table())
    out.print(sandbox_table())
    differs = drift()
    for item in differs:
        out.print(f"[red]differs from the lock:[/] {item.line()}", highlight=False)
    if differs or problems or lock is None:
        out.print(f"fix: {fix(differs)}", highlight=False)
    if smoke_test:
        smoke(out)
    if differs or lock is None:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(cli_errors(doctor))
