"""Structured calls send the schema as `response_format`, fall back to parse-and-repair, strip <think>."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import BaseModel, ConfigDict

from finmbs.llm import Gateway
from finmbs.llm.gateway import parse_structured
from finmbs.llm.structured import extract_json, schema_format, strip_think
from finmbs.mbs.leaves import LeafVariants
from finmbs.testing.server import Reply


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


async def test_a_constrained_reply_cut_off_at_max_tokens_is_drawn_again_not_repaired(
    openai_server, make_endpoint, tmp_path
):
    """A small model looping inside a JSON string hits max_tokens under the grammar; a repair re-ask
    only copies the loop, so the gateway draws the same request again (another sample index)."""
    looping = '{"answer": 5, "reason": "' + "\\text{ (per cent)} \\right." * 40
    openai_server.script(Reply(texts=[looping], finish_reasons=["length"]), '{"answer": 5, "reason": "sum"}')
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    [verdict] = await gateway.structured(make_endpoint(), Verdict, role="judge", messages=MESSAGES)
    assert verdict == Verdict(answer=5, reason="sum")
    first, second = openai_server.requests
    assert second.messages == first.messages and second.response_format == first.response_format
    assert second.body.get("seed") != first.body.get("seed")
    usage = gateway.usage["judge"]
    assert (usage.parse_failures, usage.repairs) == (1, 1)
    [again] = await Gateway(cache_path=str(tmp_path / "cache.sqlite")).structured(
        make_endpoint(), Verdict, role="judge", messages=MESSAGES
    )
    assert again == verdict and openai_server.request_count == 2  # both draws come from the cache


async def test_the_constraint_is_part_of_the_cache_key(openai_server, make_endpoint, tmp_path):
    openai_server.script('{"answer": 1}', '{"answer": 2}')
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    endpoint = make_endpoint()
    plain = await gateway.generate(endpoint, role="judge", messages=MESSAGES)
    constrained = await gateway.generate(
        endpoint, role="judge", messages=MESSAGES, response_format=schema_format(Verdict)
    )
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
    assert strip_think('<think>never closed {"answer": 1}') == ""
    assert json.loads(strip_think('{"answer": 2}')) == {"answer": 2}


def test_answers_are_read_after_the_think_block():
    from finmbs.verify.extract import extract_final_answer

    assert extract_final_answer("<think>maybe \\boxed{4}</think>\nFinal answer: \\boxed{5}") == "5"
    assert extract_final_answer("<think>Final answer: 4, or not") is None


def _written_order(grammar_text: str, rule: str) -> list[str]:
    """The property names a grammar rule writes, in order."""
    [line] = [line for line in grammar_text.splitlines() if line.startswith(f"{rule} ::=")]
    return re.findall(r"([A-Za-z]+)-kv", line)


def test_constrained_replies_write_reasoning_before_the_answer():
    """The llama.cpp grammar writes properties in the schema's declared order (a sorted schema once
    made the teacher write its answer before its question and solution)."""
    from finmbs.evaluate.audit import PanelVerdict
    from finmbs.llm import embedded
    from finmbs.mbs.candidates import WorkedProblem
    from finmbs.mbs.decompose import Decomposition
    from finmbs.mbs.reground import Answerability, GroundedTree
    from finmbs.verify.judge import JudgeVerdict

    assert _written_order(embedded.grammar(WorkedProblem.model_json_schema())._grammar, "root") == [
        "question",
        "solution",
        "answer",
    ]
    decomposition = embedded.grammar(Decomposition.model_json_schema())._grammar
    assert _written_order(decomposition, "root") == ["skills", "subproblems"]
    assert _written_order(decomposition, "WorkedProblem") == ["question", "solution", "answer"]
    grounded = embedded.grammar(GroundedTree.model_json_schema())._grammar  # the node named before it is written
    assert _written_order(grounded, "GroundedNode") == ["path", "question", "solution", "answer"]
    for verdict, last in ((JudgeVerdict, "equal"), (Answerability, "supported"), (PanelVerdict, "verdict")):
        order = _written_order(embedded.grammar(verdict.model_json_schema())._grammar, "root")
        assert order[0] == "reason" and order[-1] == last, (verdict.__name__, order)
    # parsing stays lenient where a backend cannot constrain: a reply without a reason still parses
    assert JudgeVerdict.model_validate({"equal": True}).reason == ""


async def test_the_property_order_is_part_of_the_cache_key(openai_server, make_endpoint, tmp_path):
    class Ordered(BaseModel):
        model_config = ConfigDict(title="Ordered")
        reason: str = ""
        answer: int = 0

    class Reversed(BaseModel):
        model_config = ConfigDict(title="Ordered")
        answer: int = 0
        reason: str = ""

    Reversed.__name__ = "Ordered"  # the same name, title and properties; only the order differs
    assert json.dumps(schema_format(Ordered), sort_keys=True) == json.dumps(schema_format(Reversed), sort_keys=True)
    openai_server.script('{"reason": "2 + 3 = 5", "answer": 5}', '{"answer": 5, "reason": "2 + 3 = 5"}')
    gateway = Gateway(cache_path=str(tmp_path / "cache.sqlite"))
    endpoint = make_endpoint()
    [a] = await gateway.structured(endpoint, Ordered, role="teacher", messages=MESSAGES)
    [b] = await gateway.structured(endpoint, Reversed, role="teacher", messages=MESSAGES)
    assert (a.answer, b.answer) == (5, 5) and openai_server.request_count == 2  # no cache hit across orders


def test_a_reply_that_copies_the_prompt_template_is_not_content():
    """Small teachers copy the reply template ("solution": "...") into their reply; it must fail to
    parse (and be repaired or dropped), never become a problem whose answer is a placeholder."""
    from pydantic import ValidationError

    from finmbs.mbs.candidates import WorkedProblem
    from finmbs.mbs.compose import ComposedParent
    from finmbs.mbs.decompose import Decomposition
    from finmbs.mbs.direct import DirectProblems
    from finmbs.mbs.leaves import LeafVariants
    from finmbs.mbs.reground import GroundedTree
    from finmbs.resources import resource_dir

    replies = {
        "leaf_harder": LeafVariants,
        "decompose": Decomposition,
        "compose_parent": ComposedParent,
        "direct_synthesis": DirectProblems,
        "reground_tree": GroundedTree,
    }
    for name, model in replies.items():
        template = (resource_dir("prompts") / f"{name}.txt").read_text().strip().splitlines()[-1]
        try:
            model.model_validate(json.loads(template))
        except ValidationError as exc:
            assert "placeholder" in str(exc), name
        else:
            raise AssertionError(f"{name}: the prompt's reply template parses as a reply")
    for value in ("...", "<the final answer alone>", " - "):
        with pytest.raises(ValidationError):
            WorkedProblem(question="What is 2 + 3?", solution="2 + 3 = 5", answer=value)
    assert WorkedProblem(question="What is 2 + 3?", solution="2 + 3 = 5", answer="$5").answer == "$5"
    # the template's item appended after real ones (as the 1.5B wrote a decomposition) is dropped, the real kept
    real = {"question": "What is 2 + 3?", "solution": "2 + 3 = 5", "answer": "5"}
    copied = {"question": "...", "solution": "...", "answer": "..."}
    for model, field in ((Decomposition, "subproblems"), (LeafVariants, "variants"), (DirectProblems, "problems")):
        assert [w.answer for w in getattr(model.model_validate({field: [real, copied]}), field)] == ["5"]
        with pytest.raises(ValidationError):
            model.model_validate({field: [copied]})


def test_an_answer_made_of_the_replys_serialization_is_not_content():
    """The 1.5B teacher, constrained to the direct-synthesis schema, once closed its list inside the answer
    string; the paper profile's judge then matched the trace's 45 to it and the problem qualified. Such an
    item must not parse: dropped beside real items, the reply refused when it is the only one."""
    from pydantic import ValidationError

    from finmbs.mbs.candidates import WorkedProblem
    from finmbs.mbs.decompose import Decomposition
    from finmbs.mbs.direct import DirectProblems

    reply = (
        '{"problems": [{"question": "She has 120 problems and solves 30 algebra and 45 geometry problems. How many '
        'are left?", "solution": "120 - 30 - 45 = 45", "answer": "]}\\n```json\\n{"}]}'
    )
    with pytest.raises(ValidationError, match="serialization"):
        DirectProblems.model_validate_json(reply)
    real = {"question": "What is 2 + 3?", "solution": "2 + 3 = 5", "answer": "5"}
    debris = dict(real, answer="}")
    assert [w.answer for w in Decomposition.model_validate({"subproblems": [real, debris]}).subproblems] == ["5"]
    for value in ("]}", "5 ```", "}{"):
        with pytest.raises(ValidationError):
            WorkedProblem(question="What is 2 + 3?", solution="2 + 3 = 5", answer=value)
    for value in ("[0, 1)", "(2, 3]", "\\{1, 2\\}", "\\frac{1}{2}", "f(x) = x^2"):
        assert WorkedProblem(question="Q?", solution="S", answer=value).answer == value


def test_a_raw_line_break_inside_a_string_is_part_of_the_string():
    # llama-cpp-python's JSON-schema grammar lets a string hold a raw line break; the 1.5B wrote its
    # worked solutions that way, and a strict parser lost every such reply (measured in a quickstart)
    reply = '{"variants": [{"question": "Q?", "solution": "Step 1:\n   x = 2\\nStep 2", "answer": "2"}]}'
    parsed, error = parse_structured(reply, LeafVariants)
    assert error == "" and parsed.variants[0].solution == "Step 1:\n   x = 2\nStep 2"
    assert extract_json("```json\n" + reply + "\n```")["variants"][0]["answer"] == "2"
