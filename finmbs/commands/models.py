"""`finmbs models`: the resolved role -> endpoint table, with a reachability check per endpoint."""

from __future__ import annotations

import asyncio
from typing import Annotated

import httpx
import typer
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, with_run_options
from finmbs.config import ConfigError, Endpoint, RunConfig
from finmbs.llm import Gateway, GatewayError


def check_endpoint(endpoint: Endpoint, probe: bool = False, gateway: Gateway | None = None) -> tuple[bool, str]:
    """(ok, detail) for one endpoint: key present, server answering, optionally a 1-token probe."""
    try:
        key = endpoint.api_key()
        if endpoint.is_embedded:
            from finmbs.llm.embedded import model_path

            detail = f"embedded GGUF at {model_path(endpoint.model)}"
        elif endpoint.api_base:
            base = endpoint.base_url() or ""
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            response = httpx.get(base.rstrip("/") + "/models", headers=headers, timeout=5.0)
            if response.status_code >= 400:
                return False, f"{base} answered HTTP {response.status_code}"
            detail = f"{base} answers"
        else:
            detail = "hosted; key present" if key else "hosted; no key variable named"
        if probe and gateway is not None:
            asyncio.run(
                gateway.generate(
                    endpoint,
                    role="probe",
                    messages=[{"role": "user", "content": "Reply with OK."}],
                    max_tokens=4,
                    temperature=0.0,
                )
            )
            detail += "; probe answered"
        return True, detail
    except ConfigError as exc:
        return False, str(exc)
    except (httpx.HTTPError, GatewayError, OSError) as exc:
        return False, f"unreachable: {type(exc).__name__}: {exc}"


def endpoint_table(config: RunConfig, probe: bool) -> tuple[Table, list[str], bool]:
    """The role table, one detail line per endpoint, and whether every endpoint checked out."""
    table = Table(title="finmbs roles")
    for column in ("role", "name", "model", "api_base", "key env", "conc.", "n", "status"):
        table.add_column(column, overflow="fold")
    gateway = Gateway(cache_path=None) if probe else None
    details, all_ok = [], True
    for role, endpoint in config.roles.all():
        ok, detail = check_endpoint(endpoint, probe, gateway)
        all_ok &= ok
        table.add_row(
            role,
            endpoint.name,
            endpoint.model,
            endpoint.api_base or "-",
            endpoint.api_key_env or "-",
            str(endpoint.max_concurrency),
            "yes" if endpoint.supports_n else "no",
            "[green]ok[/]" if ok else "[red]FAIL[/]",
        )
        details.append(f"{'ok  ' if ok else 'FAIL'} {role} '{endpoint.name}': {detail}")
    return table, details, all_ok


def models(
    options: RunOptions = RunOptions(),
    probe: Annotated[bool, typer.Option(help="Also send a 4-token request to each endpoint.")] = False,
) -> None:
    """Show the resolved role -> endpoint table and check each endpoint is reachable."""
    resolved = options.load()
    table, details, ok = endpoint_table(resolved, probe)
    console.print(table)
    for line in details:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(cli_errors(with_run_options(models)))
