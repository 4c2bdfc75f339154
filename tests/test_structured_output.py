"""Structured calls send the schema as `response_format`, fall back to parse-and-repair, strip <think>."""

from __future__ import annotations

import json

from pydantic import BaseModel

from finmbs.llm import Gateway
from finmbs.llm.structured import schema_format, strip_think


class Verdict(BaseModel):
    answer: int
    reason: str = ""


MESSAGES = [{"role": "user", "content": "What is 2 + 3? Reply as JSON."}]


async def test_the_schema_is_sent_as_response_format(openai_server, make_endpoint):
    openai_server.script('{"answer": 5, "reason": "sum"}')
    gateway = Gateway(cache_path=None)
    [verdict] = await gateway.structured(make_endpoint(), Verdict, role="judge", messages=MESSAGES)
    assert verdict == Verdict(answer=5, reason="sum")
    sent = openai_server.requests[-1].response_format
    assert sent == schema_format(Verdict)
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == Verdict.model_json_schema()
    assert gateway.usage["judge"].parse_failures == 0


async def test_without_constraint_support_parse_and_repair_is_the_fallback(openai_server, make_endpoint):
    openai_server.script("I think the answer is five.", '```json\n{"answer": 5}\n```')
    gateway = Gateway(cache_path=None)
    endpoint = make_endpoint(structured_output="none")
    [verdict] = await gateway.structured(endpoint, Verdict, role="judge", messages=MESSAGES)
    assert verdict == Verdict(answer=5)
    assert [r.response_format for r in openai_server.requests] == [None, None]
    assert "answer" in openai_server.requests[1].text  # the repair re-ask carries the schema
    usage = gateway.usage["judge"]
    assert (usage.parse_failures, usage.repairs) == (1, 1)


async def test_the_constraint_is_part_of_the_cache_key(openai_server, make_endpoint, tmp_path):
    openai_server.script('{"answer": 1}', '{"answer": 2}')
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    endpoint = make_endpoint()
    plain = await gateway.generate(endpoint, role="judge", messages=MESSAGES)
    constrained = await gateway.generate(endpoint, role="judge", messages=MESSAGES,
                                         response_format=schema_format(Verdict))
    again = await gateway.generate(endpoint, role="judge", messages=MESSAGES, response_format=schema_format(Verdict))
    assert [plain[0].text, constrained[0].text, again[0].text] == ['{"answer": 1}', '{"answer": 2}', '{"answer": 2}']
    assert openai_server.request_count == 2 and again[0].cached


async def test_think_blocks_are_stripped_before_parsing(openai_server, make_endpoint):
    openai_server.script('<think>maybe {"answer": 4}? no.</think>\n{"answer": 5}')
    gateway = Gateway(cache_path=None)
    [verdict] = await gateway.structured(make_endpoint(), Verdict, role="judge", messages=MESSAGES)
    assert verdict == Verdict(answer=5)


def test_strip_think():
    assert strip_think("<think>a\nb</think>\nFinal answer: \\boxed{3}") == "Final answer: \\boxed{3}"
    assert strip_think("reasoning opened by the template</think>{}") == "{}"
    assert strip_think("<think>never closed {\"answer\": 1}") == ""
    assert json.loads(strip_think('{"answer": 2}')) == {"answer": 2}


def test_answers_are_read_after_the_think_block():
    from finmbs.verify.extract import extract_final_answer

    assert extract_final_answer("<think>maybe \\boxed{4}</think>\nFinal answer: \\boxed{5}") == "5"
    assert extract_final_answer("<think>Final answer: 4, or not") is None
