"""Small types shared by the gateway and its backends."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from finmbs.errors import FinmbsError


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Sample(BaseModel):
    """One generated sample as the gateway returns it."""

    text: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False


class BackendReply(BaseModel):
    """What one backend request produced: samples plus billed usage."""

    samples: list[Sample]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None


class GatewayError(FinmbsError, RuntimeError):
    """A model call failed for good (after retries), or was refused before sending."""


class BudgetExceeded(GatewayError):
    """The run's token or dollar budget is spent; the run stops cleanly."""


def normalize_finish_reason(reason: str | None) -> str:
    """Map provider finish reasons onto stop / length / other."""
    if reason in ("stop", "eos", "end_turn", "stop_sequence", "tool_calls", "function_call"):
        return "stop"
    if reason in ("length", "max_tokens"):
        return "length"
    return "other"
