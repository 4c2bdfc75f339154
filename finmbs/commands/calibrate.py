"""`finmbs calibrate`: hard / Goldilocks / stale bands and in-budget solvability of any problem set."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, with_run_options
from finmbs.config import ConfigError, Endpoint, RunConfig
from finmbs.llm import Gateway
from finmbs.records import DifficultyReport
from finmbs.runs import atomic_write_json, atomic_write_text, safe_name
from finmbs.seeds import load_seeds


def policy_endpoint(config: RunConfig, model: str, api_base: str | None) -> Endpoint:
    """A configured role or endpoint name, else a litellm model string."""
    try:
        endpoint = config.roles.endpoint(model)
    except ConfigError:
        endpoint = Endpoint(name=safe_name(model), model=model, api_base=api_base)
    return endpoint.model_copy(update={"api_base": api_base}) if api_base else endpoint


def calibrate(
    problems: Annotated[Path, typer.Argument(help="Problems JSONL (seeds format, or a run's qualified.jsonl).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Annotated problems JSONL; a .summary.json beside it.")],
    model: Annotated[str, typer.Option(help="Role or endpoint name from the config, or a litellm model.")] = "target",
    api_base: Annotated[str | None, typer.Option("--api-base", help="OpenAI-compatible server URL.")] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="Rollouts per problem.")] = 8,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", min=1, help="Rollout budget L (default stages.L).")
    ] = None,
    options: RunOptions = RunOptions(),
) -> None:
    """Classify problems into hard / Goldilocks / stale for one policy at budget L (corpus filtering)."""
    from finmbs.mbs.calibrate import band_summary, calibrate_all
    from finmbs.mbs.context import Context

    rows = load_seeds(problems)
    resolved = options.load(weak_roles=("judge",))
    target = policy_endpoint(resolved, model, api_base)
    gateway = Gateway.from_config(resolved)
    ctx = Context(config=resolved, gateway=gateway)
    budget = max_tokens or resolved.stages.L
    runner = options.make_executor(resolved, gateway=gateway)
    try:
        with console.status(f"calibrating {len(rows)} problems with {target.name} (n={n}, L={budget})"):
            annotated = asyncio.run(
                calibrate_all(
                    ctx, rows, target=target, n=n, budget=budget, concurrency=target.max_concurrency, executor=runner
                )
            )
    finally:
        runner.close()
        gateway.close()
    atomic_write_text(out, "".join(p.model_dump_json() + "\n" for p in annotated))
    summary = band_summary([DifficultyReport.model_validate(p.meta["difficulty"]) for p in annotated])
    summary.update(policy=target.name, n=n, budget=budget)
    atomic_write_json(out.with_suffix(".summary.json"), summary)
    table = Table(title=f"bands for {target.name} at L={budget} (n={n})")
    for key in ("problems", "hard", "goldilocks", "stale", "in_budget", "qualified", "verified_hard"):
        table.add_column(key, justify="right")
    table.add_row(
        *(
            str(summary[k])
            for k in ("problems", "hard", "goldilocks", "stale", "in_budget", "qualified", "verified_hard")
        )
    )
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(calibrate, executor=True)))
