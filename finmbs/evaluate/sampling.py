"""Sampling the evaluated model through the gateway: n samples per question, cached and resumable.

Sample i of a prompt is cached under (request, i), so a killed eval run started again answers every
finished sample from the cache and only asks the model for what is missing.
"""

from __future__ import annotations

from finmbs.config import Endpoint
from finmbs.llm import Gateway, Sample

POLICY_ROLE = "policy"


async def sample_responses(
    gateway: Gateway, endpoint: Endpoint, prompt: str, *, n: int, temperature: float, max_tokens: int
) -> list[Sample]:
    """n responses of the evaluated model to one user prompt."""
    return await gateway.generate(
        endpoint, role=POLICY_ROLE, messages=[{"role": "user", "content": prompt}],
        n=n, temperature=temperature, max_tokens=max_tokens,
    )
