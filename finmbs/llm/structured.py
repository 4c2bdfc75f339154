"""Finding the JSON value in a model's reply (fenced, bare, or surrounded by prose)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)


def extract_json(text: str) -> Any:
    """The first complete JSON object or array in `text`; ValueError when there is none."""
    for block in _FENCE.findall(text):
        try:
            return json.loads(block)
        except json.JSONDecodeError:
            pass
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, (dict, list)):
            return value
    raise ValueError("no complete JSON object or array found in the reply")
