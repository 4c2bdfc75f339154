"""Locate the project's shipped files (prompts/, configs/, corpora/) in a checkout or a wheel."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The folder `name` shipped with finmbs (wheel: finmbs/_data/NAME; checkout: ./NAME)."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"finmbs resource folder '{name}' not found next to {_PACKAGE}")


@lru_cache(maxsize=None)
def prompt_template(name: str) -> str:
    """The text of prompts/NAME.txt (or NAME as given when it has a suffix)."""
    path = resource_dir("prompts") / (name if Path(name).suffix else f"{name}.txt")
    if not path.is_file():
        raise FileNotFoundError(f"prompt template not found: {path}")
    return path.read_text(encoding="utf-8")


_SLOT = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def render_prompt(name: str, **fields: object) -> str:
    """Fill a template's `{{field}}` slots (JSON braces stay literal); every slot must be given."""

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in fields:
            raise KeyError(f"prompt '{name}' needs field '{key}'")
        value = fields[key]
        return "" if value is None else str(value)

    return _SLOT.sub(fill, prompt_template(name))
