"""The `finmbs` command line: thin commands that parse, call one function and print.

Each module in `finmbs.commands` registers its commands on the app, so stages add commands
without touching this file.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer
from typer.core import TyperOption

import finmbs.commands


def _flag_type(self: TyperOption, ctx: object) -> str | None:
    """Help shows a boolean flag as the flag itself (`--allow-empty`, `--decontaminate/--no-decontaminate`),
    not as an option taking a `<bool>` value; other options keep their type column."""
    return None if self.is_flag else _option_type(self, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

app = typer.Typer(
    name="finmbs",
    help="MagicBeanStalk: grow hard, verified seed questions into calibrated, verifiable RLVR problems.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def show_version(value: bool) -> None:
    if value:
        from finmbs import __version__

        typer.echo(f"finmbs {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log gateway retries and stage decisions."),
    version: bool = typer.Option(
        False, "--version", callback=show_version, is_eager=True, help="Print the finmbs version and exit."
    ),
) -> None:
    """finmbs: MagicBeanStalk synthesis of calibrated RLVR problems (finance documents and math)."""
    import logging

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


for module in sorted(m.name for m in pkgutil.iter_modules(finmbs.commands.__path__) if not m.name.startswith("_")):
    importlib.import_module(f"finmbs.commands.{module}").register(app)


if __name__ == "__main__":
    app()
