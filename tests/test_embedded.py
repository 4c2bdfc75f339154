"""The real embedded Gemma 3 270M base model answers a short completion through the gateway."""

from __future__ import annotations

import pytest

from finmbs.config import load_config
from finmbs.llm import Gateway

pytest.importorskip("llama_cpp")


@pytest.mark.slow
async def test_embedded_gemma_completes_and_caches(tmp_path):
    target = load_config().roles.target
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    prompt = "Revolving Commitments: $250,000,000.\nQ: What are the Revolving Commitments?\nA: $"
    samples = await gateway.generate(target, role="target", prompt=prompt, n=2, max_tokens=8, temperature=0.0)
    assert len(samples) == 2 and all(s.text for s in samples)
    assert all(s.finish_reason in ("stop", "length") for s in samples)
    assert samples[0].completion_tokens > 0
    assert gateway.usage["target"].calls == 2
    again = await gateway.generate(target, role="target", prompt=prompt, n=2, max_tokens=8, temperature=0.0)
    assert [s.text for s in again] == [s.text for s in samples]
    assert gateway.usage["target"].calls == 2 and gateway.usage["target"].cache_hits == 2


@pytest.mark.slow
async def test_embedded_chat_messages_become_a_completion_prompt(tmp_path):
    target = load_config().roles.target
    gateway = Gateway(cache_path=None)
    [sample] = await gateway.generate(
        target, role="target", messages=[{"role": "user", "content": "Say hello."}], max_tokens=4, temperature=0.0
    )
    assert sample.finish_reason in ("stop", "length")
