"""`finmbs config explain`: what the stage symbols mean and their values; `finmbs config show`: the resolved config."""

from __future__ import annotations

import typer
import yaml
from rich.table import Table

from finmbs.commands._common import RunOptions, cli_errors, console, with_run_options
from finmbs.config import PAPER_SILENT, PAPER_VALUES

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


# commands finmbs adds beside the paper's method: they read no config key of their own and change nothing grow does,
# so the paper profile is unaffected by them
ADDED_COMMANDS = (
    "commands beyond the paper (finmbs; no config key, the paper profile is unaffected): requalify re-screens a "
    "pool against a new policy with final calibration's screen (stages.N, stages.L, roles.target) and keeps each "
    "problem's pass-rate history (docs/requalify.md)"
)

# symbols the paper uses but gives no value for: finmbs chose them (docs/engine.md "Parameters the paper does not give")
UNGIVEN = {"Nt", "N_leaf"}


def origin(key: str) -> str:
    """ "paper" for a symbol the paper sets; "finmbs" for a symbol whose value the paper does not give and
    for every option beyond the symbols (an addition, config.PAPER_VALUES, or a parameter of one)."""
    name = key.split(".")[-1]
    if key in PAPER_SILENT:
        return f"finmbs: {PAPER_SILENT[key]}"
    return "paper" if key.startswith("stages.") and name in SYMBOLS and name not in UNGIVEN else "finmbs"


def symbols_table(stages: dict[str, object]) -> Table:
    table = Table(title="MBS stage parameters (config key stages.SYMBOL; set with --set stages.SYMBOL=VALUE)")
    for column in ("symbol", "value", "origin", "stage", "meaning"):
        table.add_column(column, overflow="fold")
    for symbol, (stage, meaning) in SYMBOLS.items():
        table.add_row(symbol, str(stages.get(symbol, "")), origin(f"stages.{symbol}"), stage, meaning)
    return table


def options_table(config) -> Table:
    """The options beyond the paper's symbols: key, value, origin (all finmbs's), the value profile: paper
    gives it (an addition's off switch or the paper's setting; "(unchanged)" for a parameter the profile
    leaves as it is, used only by an addition or a count the paper does not give), meaning."""
    table = Table(title=f"options beyond the paper's symbols (profile: {config.profile}; set with --set KEY=VALUE)")
    for column in ("key", "value", "origin", "paper value", "meaning"):
        table.add_column(column, overflow="fold")
    sections = {
        "stages": config.stages,
        "novelty": config.novelty,
        "quality": config.quality,
        "verify": config.verify,
        "mine": config.mine,
        "index": config.index,
    }
    for section, settings in sections.items():
        for name, field in type(settings).model_fields.items():
            key = f"{section}.{name}"
            if section == "stages" and name in SYMBOLS:
                continue
            if section == "index" and key not in PAPER_VALUES:
                continue  # where the index lives and how it is built: plumbing, not behaviour
            paper = str(PAPER_VALUES[key]) if key in PAPER_VALUES else "(unchanged)"
            table.add_row(key, str(getattr(settings, name)), origin(key), paper, field.description or "")
    return table


def explain(options: RunOptions = RunOptions()) -> None:
    """The stage symbols (N, Nt, K, Nd, D, N_leaf, R, alpha_leaf, alpha_parent, Nc, Kd, L) and finmbs's
    own options (relabel, extract, novelty, quality ...): meaning, value, and whether each is the paper's
    or finmbs's (with the paper's value, which --profile paper sets)."""
    resolved = options.load_quietly()
    console.print(symbols_table(resolved.stages.model_dump()))
    console.print(options_table(resolved))
    console.print(ADDED_COMMANDS, highlight=False)


def show(options: RunOptions = RunOptions()) -> None:
    """The resolved run config (defaults, file and --set overrides) as YAML."""
    resolved = options.load_quietly()
    typer.echo(yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=False).rstrip())


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Explain or show the run config.", no_args_is_help=True)
    app.add_typer(config_app, name="config")
    config_app.command("explain")(cli_errors(with_run_options(explain)))
    config_app.command("show")(cli_errors(with_run_options(show)))
