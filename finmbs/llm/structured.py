"""Structured replies: the JSON schema a request is constrained to, and finding the JSON value in a
reply (fenced, bare, or surrounded by prose, after any `<think>` block)."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
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


def strip_think(text: str) -> str:
    """The reply without reasoning blocks: `<think>...</think>` (an unclosed one runs to the end)."""
    if "</think>" in text and "<think>" not in text:  # templates that open the block in the prompt
        text = text.split("</think>", 1)[1]
    return _THINK.sub("", text).strip()


def schema_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI-style `response_format` that constrains a reply to `schema` (vLLM, llama.cpp, hosted)."""
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema(), "strict": False},
    }
