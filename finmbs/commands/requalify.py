"""`finmbs requalify POOL --target ENDPOINT`: re-screen a pool against a new policy (finmbs's, not the paper's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, with_run_options
from finmbs.commands.calibrate import policy_endpoint


def requalify(
    pool: Annotated[
        Path, typer.Argument(help="Run folder, its qualified.jsonl, a seeds file, or a dataset `finmbs export` wrote.")
    ],
    target: Annotated[
        str,
        typer.Option(
            "--target",
            help="The policy: a role or endpoint name from the config (default: roles.target; configure it with "
            "--set roles.target.model=...), or a litellm model (openai/NAME with --api-base, embedded/NAME).",
        ),
    ] = "target",
    api_base: Annotated[str | None, typer.Option("--api-base", help="OpenAI-compatible server URL.")] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", "-L", min=1, help="Rollout budget L in tokens (default stages.L).")
    ] = None,
    n: Annotated[int | None, typer.Option("--n", "-n", min=1, help="Rollouts per problem (default stages.N).")] = None,
    weights: Annotated[
        Path | None,
        typer.Option(help="The policy's weights file: its SHA-256 identifies the checkpoint (embedded: automatic)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="History and refreshed pools (default RUN/requalify, or POOL.requalify/)."),
    ] = None,
    options: RunOptions = RunOptions(),
) -> None:
    """Re-run final calibration's Goldilocks + in-budget screen on every problem of a pool against a policy
    (a new checkpoint), append each problem's pass rate to its history, and write the refreshed pool, the
    hard problems held back and the seeds whose descendants all went stale (a seeds file for `finmbs grow`).
    A rerun resumes. `finmbs export RUN --policy NAME` exports the band; `finmbs report RUN` draws the drift."""
    from finmbs.executors import no_tick
    from finmbs.llm import Gateway
    from finmbs.runs.pool import read_pool
    from finmbs.runs.requalify import Policy, default_out, run_requalify, weights_sha256

    read = read_pool(pool)
    for error in read.errors:
        console.print(f"[yellow]skipped:[/] {error}", highlight=False, soft_wrap=True)
    resolved = options.load(weak_roles=("judge",))
    endpoint = policy_endpoint(resolved, target, api_base)
    policy = Policy(endpoint=endpoint, weights_sha256=weights_sha256(endpoint, weights))
    folder = out or default_out(pool)
    gateway = Gateway.from_config(resolved)
    runner = options.make_executor(resolved, gateway=gateway)
    try:
        with console.status(
            f"requalifying {len(read.problems)} problems with {endpoint.name} "
            f"(n={n or resolved.stages.N}, L={budget or resolved.stages.L})"
        ):
            summary = run_requalify(
                resolved, read, policy, folder, n=n, budget=budget, gateway=gateway, executor=runner, tick=no_tick
            )
    finally:
        runner.close()
        gateway.close()
    table = Table(title=f"{summary.policy} at L={summary.budget} (n={summary.n}): {summary.problems} problems")
    for column in ("was", "now hard", "now goldilocks", "now stale"):
        table.add_column(column, justify="right")
    for was, now in summary.moved.items():
        table.add_row(was, *(str(now.get(band, 0)) for band in ("hard", "goldilocks", "stale")))
    console.print(table)
    console.print(
        f"screened {summary.screened} ({summary.resumed} already done) in {summary.wall_s:.1f} s, "
        f"{summary.rollouts_per_s:.2f} rollouts/s; in the band: {summary.qualified}, hard held back: "
        f"{summary.bands.get('hard', 0)}, stale seeds: {len(summary.stale_seeds)}"
        + (f" (+{len(summary.stale_seeds_unknown)} with no seed record)" if summary.stale_seeds_unknown else "")
        + (f"; {len(summary.bad_lines)} bad line(s) skipped" if summary.bad_lines else ""),
        highlight=False,
    )
    console.print(f"wrote {folder}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(requalify, executor=True)))
