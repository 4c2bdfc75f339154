"""`finmbs eval BENCH`, `finmbs eval compare A.json B.json`, `finmbs eval list`, and `finmbs audit runs/NAME`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from finmbs.commands._common import RunOptions, UsageError, cli_errors, console, warn_embedded, with_run_options
from finmbs.commands.calibrate import policy_endpoint
from finmbs.config import ConfigError, Endpoint, RunConfig
from finmbs.evaluate.audit import audit, audit_markdown, load_run
from finmbs.evaluate.benchmarks import Mode, known_benchmarks, load_benchmark
from finmbs.evaluate.compare import compare_results, comparison_markdown
from finmbs.evaluate.results import load_result, markdown_table
from finmbs.evaluate.run import EvalSettings, check_settings, refuse_overwrite, result_path, run_eval, write_result
from finmbs.llm import Gateway
from finmbs.runs import atomic_write_json, atomic_write_text

DEFAULT_OUT = Path("eval/results")


def resolve_endpoint(
    config: RunConfig, name: str, api_base: str | None = None, api_key_env: str | None = None
) -> Endpoint:
    """A role or endpoint name from the config, else a litellm model string (provider/model or with a server)."""
    roles = ["target", "judge", "teacher", "student", *(e.name for _, e in config.roles.all())]
    if name not in roles and "/" not in name and api_base is None:
        known = ", ".join(dict.fromkeys(roles))
        raise ConfigError(f"'{name}' is neither a role or endpoint of the config ({known}) nor a litellm model string")
    endpoint = policy_endpoint(config, name, api_base)
    return endpoint.model_copy(update={"api_key_env": api_key_env}) if api_key_env else endpoint


def eval_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """cli_errors, plus invalid option values as one-line usage errors."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise UsageError(f"invalid {'.'.join(map(str, err['loc']))}: {err['msg']}") from None

    return cli_errors(wrapper)


@contextmanager
def question_progress(label: str) -> Iterator[Callable[[int], Callable[[], None]]]:
    """A rich progress bar over questions; yields `start(total) -> tick`."""
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:

        def start(total: int) -> Callable[[], None]:
            task = bar.add_task(label, total=total)
            return lambda: bar.advance(task)

        yield start


class EvalGroup(TyperGroup):
    """`finmbs eval BENCH ...` runs a benchmark; `compare` and `list` are subcommands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def parse_ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UsageError(f"--k must be comma-separated integers such as 1,5, not '{text}'") from None


def parse_limit(text: str | None) -> int | float | None:
    """--limit 50 (a count) or --limit 0.1 (a fraction of the benchmark)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--limit must be a count such as 50 or a fraction such as 0.1, not '{text}'") from None
    whole = value.is_integer() and "." not in text
    if value <= 0 or (not whole and value > 1):
        raise UsageError(f"--limit must be a count >= 1 or a fraction within (0, 1], not '{text}'")
    return int(value) if whole else value


def read_system_prompt(text: str | None) -> str | None:
    """The system prompt as given, or read from FILE when given as @FILE."""
    if text is None or not text.startswith("@"):
        return text
    path = Path(text[1:])
    if not path.is_file():
        raise UsageError(f"--system-prompt {text}: file not found: {path}")
    return path.read_text(encoding="utf-8").strip()


def eval_run(
    benchmark: Annotated[str, typer.Argument(help="Benchmark name (see `finmbs eval list`) or a YAML file.")],
    model: Annotated[
        str, typer.Option("--model", "-m", help="Role/endpoint name from the config, or a litellm model string.")
    ],
    api_base: Annotated[
        str | None, typer.Option(help="Server URL for a litellm model string (vLLM, OpenAI-compatible).")
    ] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Environment variable holding the model's API key.")] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="Judge for finance answers the comparer cannot decide: a role, a litellm model, or 'none' "
            "(default: the config's judge)."
        ),
    ] = None,
    judge_api_base: Annotated[str | None, typer.Option(help="Server URL for a litellm judge model.")] = None,
    data: Annotated[
        Path | None, typer.Option(help="Local benchmark file or folder (default: the Hugging Face hub, when online).")
    ] = None,
    pdf_dir: Annotated[
        Path | None, typer.Option(help="Oracle mode: read evidence pages from these PDFs (FinanceBench pdfs/).")
    ] = None,
    n: Annotated[int | None, typer.Option("-n", help="Samples per question (default: the benchmark's, 8).")] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature (default: the benchmark's, 1.0).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Max response tokens (default: the benchmark's, 8192).")
    ] = None,
    k: Annotated[str | None, typer.Option("--k", help="pass@k to report, e.g. 1,5 (default: the benchmark's).")] = None,
    mode: Annotated[Mode | None, typer.Option(help="Where the evidence comes from (default: the benchmark's).")] = None,
    limit: Annotated[
        str | None,
        typer.Option(help="Evaluate only the first questions: a count (50) or a fraction of the benchmark (0.1)."),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            min=0,
            help="Sampling seed: each seed draws its own n samples per question "
            "(sample indices seed*n..); the same seed replays from the cache.",
        ),
    ] = 0,
    system_prompt: Annotated[
        str | None, typer.Option(help="System message before each question; @FILE reads it from a file.")
    ] = None,
    retrieval_k: Annotated[int, typer.Option(help="Retrieval mode: passages per question.")] = 5,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Results folder (files named by their settings), or a .json file path.")
    ] = DEFAULT_OUT,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing result of the same name.")
    ] = False,
    options: RunOptions = RunOptions(),
) -> None:
    """Sample a model n times per question, grade, and report pass@k overall and per question type."""
    bench = load_benchmark(benchmark)
    resolved = options.load(weak_roles=())
    policy = resolve_endpoint(resolved, model, api_base, api_key_env)
    judge_endpoint = None
    if bench.domain == "finance" and (judge or "").lower() != "none":
        judge_endpoint = resolve_endpoint(resolved, judge, judge_api_base) if judge else resolved.roles.judge
        if judge_endpoint.is_embedded:
            warn_embedded(["judge"])
    scoring = bench.scoring
    settings = EvalSettings(
        mode=mode or bench.default_mode,
        n=scoring.n if n is None else n,
        temperature=scoring.temperature if temperature is None else temperature,
        max_tokens=scoring.max_tokens if max_tokens is None else max_tokens,
        k=parse_ks(k) or scoring.k,
        limit=parse_limit(limit),
        seed=seed,
        system_prompt=read_system_prompt(system_prompt),
        data=str(data) if data else None,
        pdf_dir=str(pdf_dir) if pdf_dir else None,
        retrieval_k=retrieval_k,
    )
    check_settings(bench, settings)  # a usage error opens no cache and starts no worker
    target = result_path(out, bench.name, str(policy.name), settings)
    refuse_overwrite(target, overwrite)
    runner = options.make_executor(resolved)
    try:
        with question_progress(f"{bench.name} · {policy.name}") as progress:
            result = run_eval(bench, settings, resolved, policy, judge_endpoint, progress, runner)
    finally:
        runner.close()
    json_path, md_path, log_path = write_result(result, target)
    for skip in result.skipped:
        console.print(f"[yellow]skipped[/] {skip.id}: {skip.reason}", highlight=False, soft_wrap=True)
    typer.echo(markdown_table(result))
    console.print(f"wrote {json_path}, {md_path} and the per-sample log {log_path}", highlight=False)


def eval_compare(
    a: Annotated[Path, typer.Argument(help="Result JSON of the base model (A).")],
    b: Annotated[Path, typer.Argument(help="Result JSON of the trained model (B).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the Markdown table to this file.")] = None,
) -> None:
    """Two eval results side by side with deltas (B - A) and paired bootstrap CIs."""
    first, second = load_result(a), load_result(b)
    table = comparison_markdown(first, second, compare_results(first, second), (a.stem, b.stem))
    typer.echo(table)
    if out:
        atomic_write_text(out, table)
        console.print(f"wrote {out}", highlight=False)


def eval_list() -> None:
    """The known benchmarks, their domain, modes and protocol defaults."""
    table = Table(title="finmbs benchmarks")
    for column in ("name", "domain", "modes", "n", "k", "hub dataset"):
        table.add_column(column)
    for name in known_benchmarks():
        bench = load_benchmark(name)
        table.add_row(
            name,
            bench.domain,
            ", ".join(bench.modes),
            str(bench.scoring.n),
            ",".join(map(str, bench.scoring.k)),
            bench.hub or "--data only",
        )
    console.print(table)


def audit_command(
    run: Annotated[Path, typer.Argument(help="Run folder (runs/NAME) with trees/ and qualified.jsonl.")],
    against: Annotated[
        Path | None, typer.Option(help="A second run on the same seeds (e.g. --method direct): same-seed pairs.")
    ] = None,
    judge: Annotated[
        list[str] | None,
        typer.Option("--judge", help="Extra panel judge: a role/endpoint name or litellm model (repeatable)."),
    ] = None,
    judge_api_base: Annotated[str | None, typer.Option(help="Server URL for litellm-string judges.")] = None,
    pairs: Annotated[int, typer.Option(min=1, help="Seeds whose candidates get blueprint/novelty scores.")] = 100,
    problems: Annotated[int, typer.Option(min=1, help="Problems per method checked by the correctness panel.")] = 50,
    seed: Annotated[int, typer.Option(help="Sampling seed for the audited subset.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Output folder (default: RUN/audit).")] = None,
    options: RunOptions = RunOptions(),
) -> None:
    """The paper's data audits: blind blueprint preservation/novelty scores and a judge-panel correctness check."""
    run_config = run / "config.yaml"
    if options.config is None and run_config.is_file():
        options = replace(options, config=run_config)
    resolved = options.load(weak_roles=("judge",))
    panel = {resolved.roles.judge.name: resolved.roles.judge}
    for name in judge or []:
        endpoint = resolve_endpoint(resolved, name, judge_api_base)
        panel[endpoint.name] = endpoint
    runs = [load_run(run)] + ([load_run(against)] if against else [])
    gateway = Gateway.from_config(resolved)
    try:
        with question_progress("audit") as progress:
            report = asyncio.run(
                audit(runs, gateway, panel, pairs=pairs, problems=problems, seed=seed, progress=progress)
            )
    finally:
        gateway.close()
    folder = out or run / "audit"
    table = audit_markdown(report)
    atomic_write_json(folder / "audit.json", report)
    atomic_write_text(folder / "audit.md", table)
    typer.echo(table)
    console.print(f"wrote {folder / 'audit.json'} and {folder / 'audit.md'}", highlight=False)


def register(app: typer.Typer) -> None:
    eval_app = typer.Typer(
        cls=EvalGroup,
        no_args_is_help=True,
        help="Evaluate a model on a benchmark (finmbs eval BENCH --model ...), or compare two results.",
    )
    eval_app.command("run")(eval_errors(with_run_options(eval_run, executor=True)))
    eval_app.command("compare")(eval_errors(eval_compare))
    eval_app.command("list")(eval_errors(eval_list))
    app.add_typer(eval_app, name="eval")
    app.command("audit")(eval_errors(with_run_options(audit_command)))
