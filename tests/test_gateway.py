"""The gateway against a real local HTTP server speaking the OpenAI API."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import BaseModel

from finmbs.config import Budget
from finmbs.llm import BudgetExceeded, Gateway, GatewayError
from finmbs.llm.structured import extract_json
from finmbs.testing.server import Reply


class Answer(BaseModel):
    answer: int
    reason: str


def gateway(tmp_path, **kwargs) -> Gateway:
    return Gateway(cache_path=str(tmp_path / "cache.sqlite"), retry_initial_s=0.01, retry_max_s=0.05, **kwargs)


USER = [{"role": "user", "content": "What is 2+2?"}]


async def test_retries_on_429_500_and_timeout(tmp_path, openai_server, make_endpoint):
    openai_server.script(Reply(status=429), Reply(status=500), Reply(delay=3.0), "four")
    gw = gateway(tmp_path)
    endpoint = make_endpoint(timeout_s=1.0, max_retries=4)
    [sample] = await gw.generate(endpoint, role="teacher", messages=USER)
    assert sample.text == "four"
    assert openai_server.request_count == 4
    usage = gw.usage["teacher"]
    assert usage.retries == 3 and usage.calls == 4 and usage.errors == 0


async def test_gives_up_after_max_retries_and_does_not_retry_400(tmp_path, openai_server, make_endpoint):
    gw = gateway(tmp_path)
    openai_server.script(*[Reply(status=503)] * 3)
    with pytest.raises(GatewayError, match="scripted"):
        await gw.generate(make_endpoint(max_retries=2), role="student", messages=USER)
    assert openai_server.request_count == 3
    openai_server.reset()
    openai_server.script(Reply(status=400), "never")
    with pytest.raises(GatewayError):
        await gw.generate(make_endpoint(name="other"), role="student", messages=USER)
    assert openai_server.request_count == 1
    assert gw.usage["student"].errors == 2


async def test_cache_rerun_makes_zero_requests(tmp_path, openai_server, make_endpoint):
    counter = iter(range(1000))
    openai_server.handler = lambda request: f"sample {next(counter)}"
    endpoint = make_endpoint()
    first = await gateway(tmp_path).generate(endpoint, role="target", messages=USER, n=4)
    assert openai_server.request_count == 4
    assert len({s.text for s in first}) == 4
    again = gateway(tmp_path)
    second = await again.generate(endpoint, role="target", messages=USER, n=4)
    assert openai_server.request_count == 4, "a rerun must cost no calls"
    assert [s.text for s in second] == [s.text for s in first]
    assert again.usage["target"].cache_hits == 4 and again.usage["target"].calls == 0
    more = await again.generate(endpoint, role="target", messages=USER, n=6)
    assert [s.text for s in more[:4]] == [s.text for s in first]
    assert openai_server.request_count == 6
    changed = await again.generate(endpoint, role="target", messages=USER, n=1, temperature=0.3)
    assert openai_server.request_count == 7 and changed[0].text not in {s.text for s in first}


async def test_n_in_one_request_when_supported(tmp_path, openai_server, make_endpoint):
    openai_server.handler = lambda request: Reply(texts=["a", "b", "c"], finish_reasons=["stop", "length", "stop"])
    samples = await gateway(tmp_path).generate(make_endpoint(supports_n=True), role="target", messages=USER, n=3)
    assert openai_server.request_count == 1
    assert openai_server.requests[0].n == 3
    assert [s.finish_reason for s in samples] == ["stop", "length", "stop"]
    assert [s.text for s in samples] == ["a", "b", "c"]


async def test_finish_reason_length_recorded_without_n(tmp_path, openai_server, make_endpoint):
    openai_server.script(Reply(texts=["cut"], finish_reasons=["length"]), "done")
    samples = await gateway(tmp_path).generate(make_endpoint(), role="target", messages=USER, n=2)
    assert sorted(s.finish_reason for s in samples) == ["length", "stop"]
    assert all(r.n == 1 for r in openai_server.requests)


async def test_plain_completion_prompt(tmp_path, openai_server, make_endpoint):
    openai_server.handler = lambda request: " 4" if request.path.endswith("/completions") else "chat"
    endpoint = make_endpoint(model="text-completion-openai/base")
    [sample] = await gateway(tmp_path).generate(endpoint, role="target", prompt="Q: 2+2?\nA:")
    assert openai_server.requests[0].path == "/v1/completions"
    assert openai_server.requests[0].body["prompt"] == "Q: 2+2?\nA:"
    assert sample.text == " 4"


async def test_structured_output_repair(tmp_path, openai_server, make_endpoint):
    openai_server.script('{"answer": 4, "reason": ', 'Here: ```json\n{"answer": 4, "reason": "sum"}\n```')
    gw = gateway(tmp_path)
    [parsed] = await gw.structured(make_endpoint(), Answer, role="teacher", messages=USER)
    assert parsed == Answer(answer=4, reason="sum")
    repair_request = openai_server.requests[1]
    assert repair_request.messages[-2]["content"] == '{"answer": 4, "reason": '
    assert "could not be used" in repair_request.messages[-1]["content"]
    assert gw.usage["teacher"].repairs == 1 and gw.usage["teacher"].parse_failures == 1


async def test_structured_output_counts_final_failure(tmp_path, openai_server, make_endpoint):
    openai_server.script("not json at all", '{"answer": "four"}')
    gw = gateway(tmp_path)
    [parsed] = await gw.structured(make_endpoint(), Answer, role="judge", messages=USER)
    assert parsed is None
    assert gw.usage["judge"].parse_failures == 2


async def test_malformed_http_body_is_retried(tmp_path, openai_server, make_endpoint):
    openai_server.script(Reply(raw="{not json", status=500), "fine")
    [sample] = await gateway(tmp_path).generate(make_endpoint(), role="teacher", messages=USER)
    assert sample.text == "fine"


async def test_accounting_per_role(tmp_path, openai_server, make_endpoint):
    openai_server.handler = lambda request: "one two three"
    gw = gateway(tmp_path)
    endpoint = make_endpoint(input_cost_per_mtok=1.0, output_cost_per_mtok=2.0)
    await gw.generate(endpoint, role="teacher", messages=USER, n=2)
    await gw.generate(endpoint, role="judge", messages=[{"role": "user", "content": "judge"}])
    teacher, judge = gw.usage["teacher"], gw.usage["judge"]
    assert (teacher.calls, teacher.samples, teacher.completion_tokens) == (2, 2, 6)
    assert (judge.calls, judge.completion_tokens) == (1, 3)
    assert teacher.prompt_tokens > 0
    expected = (teacher.prompt_tokens * 1.0 + teacher.completion_tokens * 2.0) / 1e6
    assert teacher.cost_usd == pytest.approx(expected)


async def test_budget_stops_cleanly(tmp_path, openai_server, make_endpoint):
    openai_server.handler = lambda request: "word " * 50
    gw = gateway(tmp_path, budget=Budget(max_tokens=100))
    endpoint = make_endpoint()
    await gw.generate(endpoint, role="teacher", messages=USER)
    await gw.generate(endpoint, role="teacher", messages=[{"role": "user", "content": "again"}])
    with pytest.raises(BudgetExceeded):
        await gw.generate(endpoint, role="teacher", messages=[{"role": "user", "content": "third"}])
    assert openai_server.request_count == 2
    cached = await gw.generate(endpoint, role="teacher", messages=USER)
    assert cached[0].cached, "cached samples are still served after the budget is spent"


async def test_concurrency_limit_is_respected(tmp_path, openai_server, make_endpoint):
    openai_server.latency = 0.1
    gw = gateway(tmp_path)
    endpoint = make_endpoint(max_concurrency=3)
    peak = 0

    async def watch():
        nonlocal peak
        for _ in range(40):
            peak = max(peak, gw.limits(endpoint).in_flight)
            await asyncio.sleep(0.01)

    prompts = [[{"role": "user", "content": f"q{i}"}] for i in range(9)]
    await asyncio.gather(watch(), *(gw.generate(endpoint, role="student", messages=p) for p in prompts))
    assert peak == 3
    assert openai_server.request_count == 9


async def test_rate_limit_spaces_requests(tmp_path, openai_server, make_endpoint):
    gw = gateway(tmp_path)
    endpoint = make_endpoint(requests_per_minute=600)  # 10/s, bucket starts full at 600
    gw.limits(endpoint).requests.level = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.gather(
        *(gw.generate(endpoint, role="s", messages=[{"role": "user", "content": str(i)}]) for i in range(3))
    )
    assert loop.time() - start >= 0.25


def test_extract_json_variants():
    assert extract_json('noise {"a": 1} more') == {"a": 1}
    assert extract_json("```json\n[1, 2]\n```") == [1, 2]
    assert extract_json('{"bad": } then {"ok": true}') == {"ok": True}
    with pytest.raises(ValueError):
        extract_json("no json")


def test_api_key_never_reaches_cache(tmp_path, openai_server, make_endpoint, monkeypatch):
    monkeypatch.setenv("FINMBS_TEST_KEY", "sk-secret-value-123")
    gw = gateway(tmp_path)
    asyncio.run(gw.generate(make_endpoint(api_key_env="FINMBS_TEST_KEY"), role="t", messages=USER))
    gw.close()
    assert b"sk-secret-value-123" not in (tmp_path / "cache.sqlite").read_bytes()
    assert "sk-secret" not in json.dumps(openai_server.requests[0].body)


async def test_identical_concurrent_requests_share_one_call(tmp_path, openai_server, make_endpoint):
    openai_server.latency = 0.2
    gw = gateway(tmp_path)
    endpoint = make_endpoint()
    results = await asyncio.gather(*(gw.generate(endpoint, role="judge", messages=USER, n=2) for _ in range(5)))
    assert openai_server.request_count == 2
    assert all([s.text for s in r] == [s.text for s in results[0]] for r in results)
    assert gw.usage["judge"].calls == 2 and gw.usage["judge"].cache_hits == 8


async def test_waiters_see_the_failure(tmp_path, openai_server, make_endpoint):
    openai_server.script(Reply(status=400, delay=0.2))
    gw = gateway(tmp_path)
    endpoint = make_endpoint()
    outcomes = await asyncio.gather(
        *(gw.generate(endpoint, role="t", messages=USER) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(o, GatewayError) for o in outcomes)
    assert openai_server.request_count == 1


def test_cache_created_by_many_processes_at_once(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "shared.sqlite"
    code = (
        "import sys; from finmbs.llm.cache import ResponseCache; from finmbs.llm.types import Sample;"
        "c = ResponseCache(sys.argv[1]); c.put(sys.argv[2], {0: Sample(text='x', finish_reason='stop')})"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path), f"k{i}"], stderr=subprocess.PIPE) for i in range(8)
    ]
    errors = [p.communicate()[1].decode() for p in procs if p.wait() != 0]
    assert not errors, errors[0]
    from finmbs.llm.cache import ResponseCache

    assert len(ResponseCache(path)) == 8
