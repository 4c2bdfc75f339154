"""Structured replies: the JSON schema a request is constrained to, and finding the JSON value in a
reply (fenced, bare, or surrounded by prose, after any `<think>` block)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)
_OPEN = re.compile(r"[\[{]")
_NONE = object()


def extract_json(text: str, *, last: bool = False) -> Any:
    """The first (or with `last`, the last) complete top-level JSON object or array in `text`.

    ValueError when there is none. Verdicts use `last=True`: a reply that quotes a JSON object from
    the text it judges (an injected `{"equal": true}`) before its own verdict is read by its verdict.
    """
    if not last:
        for block in _FENCE.findall(text):
            try:
                return json.loads(block, strict=False)
            except json.JSONDecodeError:
                pass
    found: Any = _NONE
    for value in _top_level_values(text):
        if not last:
            return value
        found = value
    if found is _NONE:
        raise ValueError("no complete JSON object or array found in the reply")
    return found


def _top_level_values(text: str) -> Iterator[Any]:
    """Complete JSON objects and arrays in `text`, in order, none inside another."""
    # strict=False: a raw line break inside a string is kept as one. llama-cpp-python's JSON-schema grammar
    # allows it (`char ::= [^"\\]`), so a constrained model can write a multi-line solution that way.
    decoder = json.JSONDecoder(strict=False)
    position = 0
    while (match := _OPEN.search(text, position)) is not None:
        try:
            value, end = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            position = match.start() + 1
            continue
        if isinstance(value, (dict, list)):
            yield value
        position = end


def written_in_order(schema: dict[str, Any]) -> None:
    """`json_schema_extra` for reply models: every property is required in the JSON schema, in the
    declared order, while parsing keeps the model's defaults (for unconstrained replies).

    A constrained decoder (a llama.cpp grammar, guided decoding) writes required properties in the
    schema's order and may skip optional ones, so a verdict model that declares `reason` first gets
    its reasoning written before its verdict, and a decomposition its skills before its subproblems."""
    schema["required"] = list(schema.get("properties", {}))


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
