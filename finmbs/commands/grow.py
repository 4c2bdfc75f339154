"""`finmbs grow`: seeds -> calibrated synthetic problems (MBS or the direct-synthesis baseline)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, fail, with_run_options
from finmbs.llm import BudgetExceeded, GatewayError
from finmbs.mbs import stages
from finmbs.records import Problem, RunMetrics
from finmbs.runs.folder import QUALIFIED, REJECTED, RunDir
from finmbs.runs.load import read_records
from finmbs.runs.progress import PROGRESS_LOG, GrowProgress, best, open_log, short, why_qualified
from finmbs.seeds import load_seeds

if TYPE_CHECKING:
    from finmbs.mbs.outcome import SeedOutcome

STATUS_EVERY_S = 5  # the terminal's status row (counts, each seed's stage, time left) is refreshed this often
HEARTBEAT_S = 60  # and a status line printed and logged this often, ticks or not (a long model call)


def summary_table(metrics: RunMetrics, out: Path) -> Table:
    table = Table(title=f"finmbs grow ({metrics.method}) -> {out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("seeds in", metrics.seeds_in),
        ("seeds with verified trace", metrics.seeds_with_trace),
        (
            "effective / attempted decompositions",
            f"{metrics.decompositions_effective} / {metrics.decompositions_attempted}",
        ),
        (
            "from program slices: effective / attempted, nodes decomposed from prose",
            f"{metrics.from_program_effective} / {metrics.decompositions_from_program}, {metrics.prose_fallbacks}",
        ),
        ("seeds too easy (weakest student solves the root)", metrics.seeds_too_easy),
        (
            "roots from too-easy seeds: calibrated / qualified (in the counts below)",
            f"{metrics.too_easy_roots} / {metrics.too_easy_qualified}",
        ),
        ("descendants (calibrated synthetic roots)", metrics.descendants),
        ("roots rejected by novelty / quality before calibration (in the rates)", metrics.gated_roots),
        ("goldilocks", f"{metrics.goldilocks} ({metrics.goldilocks_rate:.1%})"),
        ("qualified", f"{metrics.qualified} ({metrics.qualified_rate:.1%})"),
        (
            "seed conversion (of the finished seeds)",
            f"{metrics.seeds_converted} ({metrics.seed_conversion:.1%}) of {metrics.seeds_done} finished, "
            f"{metrics.seeds_in} in",
        ),
        (
            "rejected: answer leaks (by answer, question, solution) / novelty / not well-posed",
            f"{metrics.answer_leaks} ({metrics.leaks_by_answer}, {metrics.leaks_by_question}, "
            f"{metrics.leaks_by_solution}) / {metrics.novelty_rejected} / {metrics.not_well_posed}",
        ),
        ("rejected by program / qualified relabeled", f"{metrics.program_rejected} / {metrics.relabeled}"),
        *(
            [
                (
                    "qualified new in structure (skeleton) / variants of their source's structure",
                    f"{metrics.new_structure} of {metrics.qualified} ({metrics.new_structure_rate:.1%}) / "
                    f"{metrics.same_structure}",
                )
            ]
            if metrics.by_operator or metrics.same_structure
            else []
        ),
        *(
            [
                (
                    "other nodes (keep all): calibrated / qualified",
                    f"{metrics.other_descendants} / {metrics.other_qualified}",
                )
            ]
            if metrics.keep == "all"
            else []
        ),
        *(
            [
                (
                    "screen-Goldilocks roots out of the band on fresh draws",
                    f"{metrics.screen_goldilocks_out} of {metrics.screen_goldilocks}",
                )
            ]
            if metrics.screen_goldilocks
            else []
        ),
        ("construction tokens per finished seed", f"{metrics.construction_tokens_per_seed:.0f}"),
        ("LLM calls / cache hits", f"{sum(u.calls for u in metrics.usage.values())} / {metrics.cache_hits}"),
        ("tokens", sum(u.prompt_tokens + u.completion_tokens for u in metrics.usage.values())),
        ("cost (USD)", f"{sum(u.cost_usd for u in metrics.usage.values()):.4f}"),
        ("wall time (s)", f"{metrics.wall_time_s:.1f}"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def grow(
    seeds: Annotated[
        Path, typer.Option("--seeds", help="Seeds JSONL: id, question, answer[, domain, snippet, entity, meta].")
    ],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run folder (default runs/SEEDS-METHOD).")] = None,
    method: Annotated[
        Literal["mbs", "direct"], typer.Option(help="mbs, or the direct seed-synthesis baseline.")
    ] = "mbs",
    keep: Annotated[
        Literal["roots", "all"] | None,
        typer.Option(
            help="roots: keep the synthetic roots (the paper); all: also calibrate every other synthetic node, "
            "reported apart (qualified_nodes.jsonl). Default: stages.keep of the config."
        ),
    ] = None,
    match_budget: Annotated[
        Path | None,
        typer.Option(
            help="--method direct: oversample each seed to the construction tokens this MBS run folder spent on it."
        ),
    ] = None,
    options: RunOptions = RunOptions(),
    allow_config_change: Annotated[
        bool,
        typer.Option(
            "--allow-config-change",
            help="Continue an existing run folder under a changed config (the change is "
            "logged in its config_changes.jsonl).",
        ),
    ] = False,
) -> None:
    """Grow seeds into calibrated synthetic problems; rerun the same command to resume.

    Stage parameters are the paper's symbols under stages.* (N rollouts, Nt traces, K children, Nd retries,
    D depth, N_leaf variants, R rounds, alpha_leaf, alpha_parent, Nc combinations, Kd documents, L budget):
    `finmbs config explain` says what each means and its value.
    """
    from finmbs.runs.grow import regrounds, run_grow

    problems = load_seeds(seeds)
    resolved = options.with_overrides(*([f"stages.keep={keep}"] if keep else [])).load()
    if match_budget is not None:
        from finmbs.mbs.direct import with_budgets
        from finmbs.runs.budgets import construction_budgets

        if method != "direct":
            fail("--match-budget is for --method direct", code=2)
        try:
            problems = with_budgets(problems, construction_budgets(match_budget))
        except ValueError as exc:
            fail(str(exc), code=2)
    out = out or Path("runs") / f"{seeds.stem}-{method}"
    runner = options.make_executor(resolved)
    done_before = sum(RunDir(out).is_done(p.id) for p in problems)
    with (
        open_log(out) as log,
        Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress,
    ):
        reground = regrounds(resolved, problems, method)
        tasks = {stage: progress.add_task(stage, total=None) for stage in stages.progress(method, reground)}
        progress.update(tasks[stages.Progress.SEEDS], description=f"seeds (of {len(problems)})")
        live = GrowProgress(
            problems,
            method,
            done_before=done_before,
            emit=lambda line: progress.console.print(line, highlight=False, markup=False, soft_wrap=True),
            log=log,
        )
        status = progress.add_task(live.status(), total=None)
        live.say(
            f"finmbs grow ({method}): {len(problems)} seed{'' if len(problems) == 1 else 's'}, "
            f"{done_before} finished by an earlier run; "
            f"this progress is also in {out / PROGRESS_LOG}"
        )

        def tick(stage: str, advance: int = 1) -> None:
            if stage in tasks:
                progress.advance(tasks[stage], advance)
            live.tick(stage)
            progress.update(status, description=live.status())

        def on_seed(seed: Problem, outcome: SeedOutcome) -> None:
            live.finished(seed, outcome.qualified)
            progress.update(status, description=live.status())

        def heartbeat(stop: threading.Event) -> None:  # the status row kept current, a status line now and then
            beats = 0
            while not stop.wait(STATUS_EVERY_S):
                beats += 1
                progress.update(status, description=live.status())
                if beats % (HEARTBEAT_S // STATUS_EVERY_S) == 0:
                    live.say(live.status())

        stop = threading.Event()
        beating = threading.Thread(target=heartbeat, args=(stop,), name="grow-heartbeat", daemon=True)
        beating.start()
        try:
            metrics = asyncio.run(
                run_grow(
                    resolved,
                    problems,
                    out,
                    method=method,
                    tick=tick,
                    executor=runner,
                    allow_config_change=allow_config_change,
                    on_seed=on_seed,
                )
            )
        except BudgetExceeded as exc:
            live.say(f"stopped: {exc}")
            fail(f"{exc}; finished seeds are saved in {out}: raise budget.max_tokens and rerun to continue", code=3)
        except GatewayError as exc:
            live.say(f"stopped: {exc}")
            fail(f"{exc}; finished seeds are saved in {out}: rerun the same command to resume", code=1)
        finally:
            stop.set()
            beating.join()
            runner.close()
        live.say(f"done: {live.status()}")
    console.print(summary_table(metrics, out))
    print_best(out)


def print_best(out: Path, limit: int = 3) -> None:
    """The run's best qualified problems (`progress.best`), each with its answer and why it qualified, and
    the one command that writes and opens the report."""
    qualified = read_records(out / QUALIFIED, Problem)
    if qualified:
        console.print(f"best of the {len(qualified)} qualified problems (all in {out / QUALIFIED}):", highlight=False)
        for rank, problem in enumerate(best(qualified, limit), start=1):
            console.print(
                f"  {rank}. {short(problem.question, 400)}\n     answer: {short(problem.answer, 120)}"
                f"\n     why: {why_qualified(problem)}",
                highlight=False,
                markup=False,
            )
    else:
        console.print(
            f"no problem qualified yet: the report says what each candidate was rejected for ({out / REJECTED})",
            highlight=False,
        )
    report = out / "report.html"
    console.print(
        f"open the report: finmbs report {out} && python -m webbrowser -t {report.resolve().as_uri()}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(grow, executor=True)))
