"""The LLM gateway and its backends."""

from finmbs.llm.gateway import Gateway, parse_structured
from finmbs.llm.types import BudgetExceeded, GatewayError, Message, Sample

__all__ = ["BudgetExceeded", "Gateway", "GatewayError", "Message", "Sample", "parse_structured"]
