"""`finmbs config explain`: what the stage symbols mean and their values; `finmbs config show`: the resolved config."""

from __future__ import annotations

import typer
import yaml
from rich.table import Table

from finmbs.commands._common import ConfigOption, SetOption, cli_errors, console

# The paper's symbols (section 3, appendix D), in the order the stages use them.
SYMBOLS = {
    "N": ("all", "rollouts per accuracy estimate (students and the target policy)"),
    "Nt": ("1 traces", "trace samples asked of each teacher; a seed is dropped when none verifies"),
    "K": ("2 decompose", "most children one decomposition may have (at most 3)"),
    "Nd": ("2 decompose", "decomposition retries when a split is not effective"),
    "D": ("2 decompose", "deepest decomposition (levels below the seed)"),
    "N_leaf": ("3 leaves", "HARDER variants asked per leaf in each round"),
    "R": ("3 leaves", "leaf synthesis rounds (one teacher per round; the next runs only when a round kept nothing)"),
    "alpha_leaf": ("3 leaves", "a variant is kept only when the weakest student's accuracy is at most this"),
    "alpha_parent": ("4 compose", "a composed parent is kept only when the weakest student's accuracy is at most this"),
    "Nc": ("4 compose", "child combinations tried per parent"),
    "Kd": ("5 reground", "unseen documents retrieved per finance seed"),
    "L": ("6 calibrate", "the target policy's rollout budget in tokens (max new tokens); in-budget = solved within L"),
}


def symbols_table(stages: dict[str, object]) -> Table:
    table = Table(title="MBS stage parameters (config key stages.SYMBOL; set with --set stages.SYMBOL=VALUE)")
    for column in ("symbol", "value", "stage", "meaning"):
        table.add_column(column, overflow="fold")
    for symbol, (stage, meaning) in SYMBOLS.items():
        table.add_row(symbol, str(stages.get(symbol, "")), stage, meaning)
    return table


def options_table(config) -> Table:
    """finmbs's own switches (not the paper's symbols): key, value, and what each does."""
    table = Table(title="finmbs options beyond the paper's symbols (set with --set KEY=VALUE)")
    for column in ("key", "value", "meaning"):
        table.add_column(column, overflow="fold")
    sections = {"stages": config.stages, "novelty": config.novelty, "quality": config.quality, "index": config.index}
    for section, settings in sections.items():
        for name, field in type(settings).model_fields.items():
            if section == "stages" and name in SYMBOLS:
                continue
            if section == "index" and not (field.description or "").startswith("finmbs's"):
                continue  # where the index lives and how it is built: plumbing, not behaviour
            table.add_row(f"{section}.{name}", str(getattr(settings, name)), field.description or "")
    return table


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Explain or show the run config.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("explain")
    @cli_errors
    def explain(config: ConfigOption = None, set_: SetOption = None) -> None:
        """The stage symbols (N, Nt, K, Nd, D, N_leaf, R, alpha_leaf, alpha_parent, Nc, Kd, L) and finmbs's
        own options (relabel, extract, novelty, quality ...): meaning and value."""
        from finmbs.config import load_config

        resolved = load_config(config, set_ or [])
        console.print(symbols_table(resolved.stages.model_dump()))
        console.print(options_table(resolved))

    @config_app.command("show")
    @cli_errors
    def show(config: ConfigOption = None, set_: SetOption = None) -> None:
        """The resolved run config (defaults, file and --set overrides) as YAML."""
        from finmbs.config import load_config

        resolved = load_config(config, set_ or [])
        typer.echo(yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False).rstrip())
