"""Shared CLI plumbing: the run options every config-reading command takes (`RunOptions`), config loading with
overrides, one-line errors, the embedded-model notice."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console

from finmbs.config import RunConfig, load_config
from finmbs.errors import FinmbsError
from finmbs.executors import ExecutorName

if TYPE_CHECKING:
    from finmbs.executors import Executor
    from finmbs.llm import Gateway

F = TypeVar("F", bound=Callable[..., Any])
console = Console(stderr=True)

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", metavar="FILE", help="YAML run config (default: configs/default.yaml).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY=VALUE", help="Override a config key, e.g. --set stages.N=4 (repeatable)."),
]
ProfileOption = Annotated[
    Literal["finmbs", "paper"] | None,
    typer.Option(
        "--profile",
        help="paper: run the method as published, every addition of finmbs's off or at the "
        "paper's setting (`finmbs config explain` lists them), whatever the config file sets; "
        "a --set that contradicts it is an error.",
    ),
]
ExecutorOption = Annotated[
    ExecutorName, typer.Option("--executor", help="Where the work runs: local (this process, asyncio) or ray.")
]
RayAddressOption = Annotated[
    str | None,
    typer.Option("--ray-address", help="Ray cluster to join, e.g. auto or HEAD_IP:6379 (default: start a local one)."),
]
RayWorkersOption = Annotated[
    int | None, typer.Option("--ray-workers", min=1, help="Ray workers (default: one per CPU of the cluster).")
]


@dataclass(frozen=True)
class RunOptions:
    """The options the config-reading commands share, one object: which config (--config, --set, --profile)
    and, for the commands that run work, where it runs (--executor, --ray-address, --ray-workers). A command
    takes it as its `options` parameter; `with_run_options` shows typer the single options instead."""

    config: Path | None = None
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, in order
    profile: Literal["finmbs", "paper"] | None = None
    executor: ExecutorName = "local"
    ray_address: str | None = None
    ray_workers: int | None = None

    def with_overrides(self, *overrides: str) -> RunOptions:
        """These options with more KEY=VALUE overrides after the --set ones (a command's own flags)."""
        return replace(self, overrides=(*self.overrides, *overrides))

    def load(self, weak_roles: tuple[str, ...] = ("teacher", "judge")) -> RunConfig:
        """The run config, with the notices of `resolve_config` (small embedded models in `weak_roles`, a dollar
        budget that cannot price a model)."""
        return resolve_config(self.config, list(self.overrides), weak_roles=weak_roles, profile=self.profile)

    def load_quietly(self) -> RunConfig:
        """The run config, without notices (a command that asks no model)."""
        return load_config(self.config, list(self.overrides), profile=self.profile)

    def make_executor(self, config: RunConfig, gateway: Gateway | None = None) -> Executor:
        """The executor --executor names (ray: joining --ray-address with --ray-workers)."""
        from finmbs.executors import make_executor

        return make_executor(
            self.executor, config, gateway=gateway, ray_address=self.ray_address, ray_workers=self.ray_workers
        )


# RunOptions field -> (the command's parameter, its typer annotation, its default), in the order help shows them
_CONFIG_OPTIONS = {
    "config": ("config", ConfigOption, None),
    "overrides": ("set_", SetOption, None),
    "profile": ("profile", ProfileOption, None),
}
_EXECUTOR_OPTIONS = {
    "executor": ("executor", ExecutorOption, "local"),
    "ray_address": ("ray_address", RayAddressOption, None),
    "ray_workers": ("ray_workers", RayWorkersOption, None),
}


def with_run_options(func: Callable[..., Any], *, executor: bool = False) -> Callable[..., Any]:
    """`func` as typer sees it: its `options: RunOptions` parameter shown as the single shared options (where it
    stands in the signature: --config, --set, --profile, and with `executor` --executor, --ray-address,
    --ray-workers), gathered back into one RunOptions when the command runs."""
    fields = {**_CONFIG_OPTIONS, **(_EXECUTOR_OPTIONS if executor else {})}
    signature = inspect.signature(func, eval_str=True)
    parameters: list[inspect.Parameter] = []
    for parameter in signature.parameters.values():
        if parameter.name != "options":
            parameters.append(parameter)
            continue
        parameters += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
            for name, annotation, default in fields.values()
        ]
    if len(parameters) == len(signature.parameters):
        raise TypeError(f"{func.__name__} takes no `options: RunOptions` parameter")
    # keyword-only (typer passes keywords): the options keep their place, whatever defaults stand around them
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in parameters]

    @functools.wraps(func)
    def command(**kwargs: Any) -> Any:
        given = {field: kwargs.pop(name) for field, (name, _, _) in fields.items()}
        given["overrides"] = tuple(given["overrides"] or ())
        return func(**kwargs, options=RunOptions(**given))

    del command.__wrapped__  # typer reads the signature below, not func's
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in parameters}
    return command


class UsageError(FinmbsError, ValueError):
    """Bad input from the user (a file, a line, an argument), reported in one line."""


def fail(message: str, code: int = 2) -> None:
    """Print one error line on stderr and exit non-zero."""
    console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def cli_errors(func: F) -> F:
    """Turn expected failures into one clear line and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FinmbsError as exc:  # every error finmbs raises on purpose: its message and its exit code
            fail(str(exc), exc.exit_code)
        except (FileNotFoundError, NotADirectoryError) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            console.print("interrupted; finished work is saved, rerun the same command to resume")
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


def warn_embedded(roles: list[str]) -> None:
    """Say plainly that small embedded CPU models play `roles` (teacher, judge): expect a small yield."""
    console.print(
        f"[yellow]note:[/] small embedded CPU models play {', '.join(roles)}: expect a small yield. "
        "Name real teachers in a config "
        "(see configs/paper-finance.yaml, or --set roles.teachers.0.model=openai/gpt-4o-mini "
        "--set roles.teachers.0.api_key_env=OPENAI_API_KEY).",
        highlight=False,
    )


def warn_unpriced(config: RunConfig) -> None:
    """Say at start which models a dollar budget cannot see (no known price): a call to one stops the run."""
    if config.budget.max_cost_usd is None:
        return
    from finmbs.llm.gateway import unpriced

    if missing := unpriced(config):
        console.print(
            f"[yellow]warning:[/] budget.max_cost_usd is set but no price is known for {', '.join(missing)}: the run "
            "stops at its first call to one of them. Set roles.ROLE.input_cost_per_mtok and output_cost_per_mtok "
            "(0 for a self-hosted server), or drop max_cost_usd.",
            highlight=False,
            soft_wrap=True,
        )


def resolve_config(
    config: Path | None,
    overrides: list[str] | None,
    weak_roles: tuple[str, ...] = ("teacher", "judge"),
    profile: str | None = None,
) -> RunConfig:
    """Load the run config (`profile`: --profile); warn when small embedded models play one of `weak_roles`
    (the roles the command will use: a command that asks no teacher and no judge passes ()), and when a
    dollar budget meets a model with no known price."""
    resolved = load_config(config, overrides or [], profile=profile)
    warn_unpriced(resolved)
    weak = sorted({r for r in resolved.embedded_roles() if r in weak_roles})
    if weak:
        warn_embedded(weak)
    return resolved
