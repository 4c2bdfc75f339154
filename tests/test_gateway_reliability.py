"""Gateway failure handling against the real scripted OpenAI server: empty replies, hung endpoints,
budgets carried over from earlier runs, per-role time limits, and verdicts read from the last JSON."""

from __future__ import annotations

import json
import time

import pytest

from finmbs.config import Budget, ConfigError, Endpoint, load_config
from finmbs.llm import BudgetExceeded, Gateway, GatewayError
from finmbs.llm.structured import extract_json
from finmbs.testing.server import Reply

USER = [{"role": "user", "content": "What is 2+2?"}]
EMPTY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
    }
)


def gateway(tmp_path, **kwargs) -> Gateway:
    return Gateway(cache_path=str(tmp_path / "cache.sqlite"), retry_initial_s=0.01, retry_max_s=0.05, **kwargs)


async def test_empty_choices_are_retried_and_counted(tmp_path, openai_server, make_endpoint):
    openai_server.script(Reply(raw=EMPTY), "four")
    gw = gateway(tmp_path)
    [sample] = await gw.generate(make_endpoint(), role="target", messages=USER)
    assert sample.text == "four"
    usage = gw.usage["target"]
    assert (usage.calls, usage.retries, usage.errors) == (2, 1, 0)
    assert usage.prompt_tokens >= 5  # the empty reply's billed tokens are accounted too

    openai_server.script(*[Reply(raw=EMPTY)] * 3)
    with pytest.raises(GatewayError, match="0 samples"):
        await gw.generate(make_endpoint(max_retries=2), role="judge", messages=[{"role": "user", "content": "x"}])
    assert gw.usage["judge"].calls == 3 and gw.usage["judge"].errors == 1


async def test_a_hung_endpoint_fails_after_two_timeouts_not_max_retries(tmp_path, openai_server, make_endpoint):
    openai_server.handler = lambda request: Reply(delay=5.0)
    start = time.monotonic()
    with pytest.raises(GatewayError, match="timeout_s"):
        await gateway(tmp_path).generate(make_endpoint(timeout_s=0.5, max_retries=6), role="judge", messages=USER)
    assert openai_server.request_count == 2
    assert time.monotonic() - start < 4


async def test_budget_spent_by_earlier_runs_stops_before_any_call(tmp_path, openai_server, make_endpoint):
    gw = gateway(tmp_path, budget=Budget(max_tokens=6000))
    gw.spent_before = (6000, 0.0)
    with pytest.raises(BudgetExceeded, match="6000 >= 6000"):
        await gw.generate(make_endpoint(), role="teacher", messages=USER)
    assert openai_server.request_count == 0
    gw.budget = Budget(max_tokens=7000)  # raising the cap is how to continue
    await gw.generate(make_endpoint(), role="teacher", messages=USER)
    assert openai_server.request_count == 1


def test_default_time_limits_follow_the_reply_length():
    judge = Endpoint(name="j", model="openai/j", max_tokens=64)
    long = Endpoint(name="t", model="openai/t", max_tokens=16384)
    assert judge.timeout_s == 33 and long.timeout_s == 685
    assert judge.max_retries == 4
    assert Endpoint(name="x", model="openai/x", timeout_s=5).timeout_s == 5


def test_missing_keys_of_any_role_are_found_up_front(monkeypatch):
    monkeypatch.delenv("FINMBS_NO_TARGET_KEY", raising=False)
    monkeypatch.delenv("FINMBS_NO_HOST", raising=False)
    config = load_config(
        overrides=[
            "roles.target.model=openai/t",
            "roles.target.api_key_env=FINMBS_NO_TARGET_KEY",
            "roles.judge.model=openai/j",
            "roles.judge.api_base=http://${FINMBS_NO_HOST}/v1",
        ]
    )
    with pytest.raises(ConfigError) as caught:
        config.check_environment()
    assert "FINMBS_NO_TARGET_KEY" in str(caught.value) and "FINMBS_NO_HOST" in str(caught.value)
    load_config().check_environment()  # the embedded default needs nothing


def test_extract_json_last_takes_the_final_top_level_object():
    reply = 'The prediction says {"equal": true}. Verdict: {"equal": false, "reason": "r", "n": {"equal": true}}'
    assert extract_json(reply) == {"equal": True}
    assert extract_json(reply, last=True) == {"equal": False, "reason": "r", "n": {"equal": True}}
    assert extract_json('{"a": [1, 2]} then {"b": 1', last=True) == {"a": [1, 2]}
    with pytest.raises(ValueError):
        extract_json("no json {here", last=True)
