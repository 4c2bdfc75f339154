"""Sampling the evaluated model through the gateway: n samples per question, cached and resumable.

Sample i of a prompt is cached under (request, i), so a killed eval run started again answers every
finished sample from the cache and only asks the model for what is missing.
"""

from __future__ import annotations

from finmbs.config import Endpoint
from finmbs.llm import Gateway, Sample

POLICY_ROLE = "policy"


async def sample_responses(
    gateway: Gateway,
    endpoint: Endpoint,
    messages: list[dict[str, str]],
    *,
    n: int,
    temperature: float,
    max_tokens: int,
    first_index: int = 0,
) -> list[Sample]:
    """n responses of the evaluated model to one chat (samples first_index .. first_index+n-1: `--seed S`
    draws indices S*n.., so each seed has its own samples and a rerun of a seed replays from the cache)."""
    return await gateway.generate(
        endpoint,
        role=POLICY_ROLE,
        messages=messages,
        n=n,
        first_index=first_index,
        temperature=temperature,
        max_tokens=max_tokens,
    )
