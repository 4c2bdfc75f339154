"""Turning chat messages into a plain completion prompt for base models without a chat template."""

from __future__ import annotations

from finmbs.llm.types import Message
from finmbs.resources import render_prompt

_LABELS = {"system": "Instructions", "user": "User", "assistant": "Assistant"}


def messages_to_prompt(messages: list[Message]) -> str:
    """Render a conversation through prompts/completion/chat.txt, ending where the assistant speaks."""
    transcript = "\n\n".join(f"{_LABELS[m.role]}: {m.content.strip()}" for m in messages)
    return render_prompt("completion/chat", transcript=transcript)
