"""The LLM judge against the scripted OpenAI-compatible server: parsing, repair, caching, counting."""

from __future__ import annotations

import json

from finmbs.llm import Gateway
from finmbs.verify import verify_answer
from finmbs.verify.judge import JudgeVerdict, judge_equivalence

QUESTION = "What is the Applicable Rate for Term SOFR Loans at Pricing Level III?"


def _gateway(tmp_path) -> Gateway:
    return Gateway(cache_path=str(tmp_path / "cache.sqlite"), retry_initial_s=0.01, retry_max_s=0.05)


async def test_verdict_parsed_prompt_rendered_temperature_zero(openai_server, make_endpoint, tmp_path):
    openai_server.script(json.dumps({"equal": True, "reason": "1.375% is 137.5 bps"}))
    gateway = _gateway(tmp_path)
    verdict = await judge_equivalence(
        gateway, make_endpoint("judge"), question=QUESTION, predicted="137.5 basis points", ground_truth="1.375%"
    )
    assert verdict == JudgeVerdict(equal=True, reason="1.375% is 137.5 bps")
    (request,) = openai_server.requests
    assert request.body["temperature"] == 0.0
    assert QUESTION in request.text and "137.5 basis points" in request.text and "1.375%" in request.text
    assert "rubric" in request.text.lower()
    usage = gateway.usage["judge"]
    assert (usage.calls, usage.samples, usage.parse_failures) == (1, 1, 0)


async def test_second_identical_call_is_served_from_cache(openai_server, make_endpoint, tmp_path):
    openai_server.script('{"equal": false, "reason": "different year"}')
    endpoint = make_endpoint("judge")
    first = await judge_equivalence(_gateway(tmp_path), endpoint, question=None, predicted="2027", ground_truth="2028")
    gateway = _gateway(tmp_path)  # a fresh process reading the same cache file
    second = await judge_equivalence(gateway, endpoint, question=None, predicted="2027", ground_truth="2028")
    assert first == second == JudgeVerdict(equal=False, reason="different year")
    assert openai_server.request_count == 1
    assert gateway.usage["judge"].cache_hits == 1 and gateway.usage["judge"].calls == 0


async def test_malformed_reply_is_repaired(openai_server, make_endpoint, tmp_path):
    openai_server.script("Sure! The answers match: {equal: yes", '```json\n{"equal": true, "reason": "same"}\n```')
    gateway = _gateway(tmp_path)
    verdict = await judge_equivalence(gateway, make_endpoint("judge"), question=None, predicted="a", ground_truth="b")
    assert verdict.equal is True
    assert openai_server.request_count == 2
    assert "JSON" in openai_server.requests[1].text
    usage = gateway.usage["judge"]
    assert (usage.calls, usage.repairs, usage.parse_failures) == (2, 1, 1)


async def test_unparseable_after_repair_is_not_equal(openai_server, make_endpoint, tmp_path):
    openai_server.script("they look the same to me", '{"verdict": "same"}')
    gateway = _gateway(tmp_path)
    verdict = await judge_equivalence(gateway, make_endpoint("judge"), question=None, predicted="a", ground_truth="b")
    assert verdict.equal is False and "unparseable" in verdict.reason
    assert gateway.usage["judge"].parse_failures == 2


async def test_verify_answer_asks_the_judge_only_when_undecided(openai_server, make_endpoint, tmp_path):
    openai_server.script('{"equal": true, "reason": "same segment"}')
    gateway, judge = _gateway(tmp_path), make_endpoint("judge")
    decided = await verify_answer("finance", "$1.2 billion", "1,200 million", gateway=gateway, judge=judge)
    assert (decided.correct, decided.decided_by) == (True, "comparer")
    assert openai_server.request_count == 0
    judged = await verify_answer("finance", "The Data Center segment", "Data Center", gateway=gateway, judge=judge)
    assert (judged.correct, judged.decided_by, judged.reason) == (True, "judge", "same segment")
    assert gateway.usage["judge"].calls == 1


async def test_math_judge_decides_only_where_math_verify_has_no_verdict(openai_server, make_endpoint, tmp_path):
    # verify.math_judge (the paper's §3.2, "answer matching or an LLM-as-a-judge"): math-verify's verdicts
    # stand, equal or not; the judge is asked only about an answer math-verify cannot parse
    openai_server.script('{"equal": true, "reason": "the numeral \u2166 is 7"}')
    gateway, judge = _gateway(tmp_path), make_endpoint("judge")
    for predicted, correct in (("14/2", True), ("8", False)):
        decided = await verify_answer("math", predicted, "7", gateway=gateway, judge=judge, math_judge=True)
        assert (decided.correct, decided.decided_by) == (correct, "math")
    assert openai_server.request_count == 0
    judged = await verify_answer("math", "\u2166", "7", gateway=gateway, judge=judge, math_judge=True)
    assert (judged.correct, judged.decided_by, judged.reason) == (True, "judge", "the numeral \u2166 is 7")
    # switched off (finmbs's default), no verdict is not equal and no judge is asked
    unjudged = await verify_answer("math", "\u2166", "7", gateway=gateway, judge=judge)
    assert (unjudged.correct, unjudged.decided_by, unjudged.reason) == (False, "math", "math-verify has no verdict")
    assert openai_server.request_count == 1
