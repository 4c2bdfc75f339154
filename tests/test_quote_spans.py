"""verify.quote_spans: a finance program takes document figures by choosing among the passage's candidate
spans (finmbs/verify/spans.py), constrained by the reply's JSON schema; the engine writes the quote() calls,
still checked verbatim and by value. Real passages of the shipped agreements, the llama.cpp grammar built
from the schema tried against a listed and an invented figure, and `finmbs verify` on the scripted server."""

from __future__ import annotations

import ctypes
import json
import math
from fractions import Fraction
from pathlib import Path

import pytest

from finmbs.config import PAPER_VALUES, load_config
from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.labels import check_labels
from finmbs.mbs.programs import problem_rates, span_program_reply
from finmbs.records import Problem, Snippet
from finmbs.testing.server import Reply
from finmbs.testing.world import world_config
from finmbs.verify.program import run_program
from finmbs.verify.quotes import check_quote
from finmbs.verify.spans import bind, candidate_spans

DOCS = Path(__file__).resolve().parents[1] / "corpora" / "finance" / "docs"
LISTED = "These are the figures the document states"  # prompts/program_write_spans.txt
INVENTED = "ten point eight percent (10.80%)"


def paragraph(doc: str, marker: str, lines: int = 1) -> str:
    """The line of a shipped agreement that holds `marker`, and the `lines` - 1 after it."""
    text = (DOCS / doc).read_text().splitlines()
    [at] = [i for i, line in enumerate(text) if marker in " ".join(line.split())]  # no-break spaces as spaces
    return "\n".join(text[at : at + lines])


ALPHATEC = "alphatec_2023_credit_security_guaranty_agreement.txt"
AVIDX = "avidxchange_2022_credit_and_security_agreement.txt"
DEFAULT_RATE = paragraph(ALPHATEC, "Section 10.5 Default Rate of Interest")


def test_spans_of_real_passages_are_verbatim_with_their_values_and_context():
    spans = {s.text: s for s in candidate_spans(DEFAULT_RATE)}
    rate = spans["two percent (2.0%)"]  # words and digits as one span, its parenthesis closed
    assert rate.value == Fraction(2, 100) and rate.kind == "percent" and rate.literal == "0.02"
    assert rate.before.endswith("interest at rates that are") and rate.after.startswith("per annum in excess")
    assert spans["10.1"].before.endswith("Section 10.1(e) or")  # where it is read: "Section 10.1" is a reference
    margins = paragraph(AVIDX, "two hundred seventy-five (275.00) basis points", lines=2)
    texts = {s.text: s.value for s in candidate_spans(margins)}
    assert texts["two hundred seventy-five (275.00) basis points"] == Fraction(275, 10000)  # word number, bps, a rate
    assert texts["one hundred seventy-five (175.00) basis points"] == Fraction(175, 10000)  # no leading "and"
    floor = {s.text: s.value for s in candidate_spans(paragraph(AVIDX, "Thirty-Five Million Dollars ($35,000,000)"))}
    assert floor["Thirty-Five Million Dollars ($35,000,000)"] == 35_000_000
    assert floor["thirty-five percent (35%)"] == Fraction(35, 100)
    # alone, "(360) days" reads as -360 (a parenthesized negative): the number words before it belong to the span
    day_count = [s.text for s in candidate_spans(paragraph(AVIDX, "year having three hundred sixty (360) days"))]
    assert "three hundred sixty (360) days" in day_count
    # every span of every shipped agreement is a quote that holds on its passage
    for doc in sorted(DOCS.glob("*.txt"))[:2]:
        for line in doc.read_text().splitlines()[:400]:
            for span in candidate_spans(line):
                assert check_quote(span.text, float(span.value), line) is None, (doc.name, span.text)
    assert candidate_spans("The Borrower shall pay interest in arrears on each Interest Payment Date.") == []


def test_the_engine_writes_the_quotes_and_the_sandbox_checks_them():
    spans = candidate_spans(DEFAULT_RATE)
    source, why = bind([("default_margin", "two percent (2.0%)")], spans, "answer = 0.095 + default_margin")
    assert why is None and source.splitlines()[0] == "default_margin = quote('two percent (2.0%)', 0.02)"
    result = run_program(source, DEFAULT_RATE)
    assert result.ok and float(result.value) == pytest.approx(0.115)
    assert result.quotes[0].text == "two percent (2.0%)"
    assert run_program(source, "interest at three percent (3.0%) per annum").error.endswith(
        "quote not in the passage: 'two percent (2.0%)'"
    )  # the check underneath is unchanged: the same program on another passage fails
    assert (
        bind([("rate", INVENTED)], spans, "answer = rate")[1]
        == f"figure {INVENTED!r} is not one of the passage's figures"
    )
    assert "not a usable variable name" in bind([("answer", "two percent (2.0%)")], spans, "answer = 1")[1]
    assert "chosen twice" in bind([("r", "two percent (2.0%)")] * 2, spans, "answer = r")[1]


def test_the_schema_allows_only_the_listed_figures():
    reply = span_program_reply(candidate_spans(DEFAULT_RATE))
    schema = reply.model_json_schema()
    figure = schema["$defs"]["ChosenFigure"]["properties"]["figure"]
    assert set(figure["enum"]) == {"two percent (2.0%)", "10.1"}
    assert (schema["properties"]["figures"]["minItems"], schema["properties"]["figures"]["maxItems"]) == (1, 2)
    ok = {"figures": [{"name": "margin", "figure": "two percent (2.0%)"}], "program": "answer = margin"}
    assert reply.model_validate(ok).figures[0].figure == "two percent (2.0%)"
    with pytest.raises(ValueError):
        reply.model_validate({**ok, "figures": [{"name": "margin", "figure": INVENTED}]})


def test_the_llama_cpp_grammar_cannot_write_an_invented_figure():
    llama_cpp = pytest.importorskip("llama_cpp")
    from finmbs.llm import embedded

    llama = llama_cpp.Llama(
        model_path=str(embedded.model_path("embedded/qwen2.5-coder-0.5b-instruct")), vocab_only=True, verbose=False
    )
    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    rules = embedded.grammar(span_program_reply(candidate_spans(DEFAULT_RATE)).model_json_schema())

    def accepted(text: str) -> bool:
        """Whether the grammar lets the reply be written as `text`, token by token."""
        grammar = llama_cpp.llama_sampler_init_grammar(vocab, rules._grammar.encode(), rules._root.encode())
        try:
            for token in llama.tokenize(text.encode(), add_bos=False, special=False):
                one = (llama_cpp.llama_token_data * 1)()
                one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
                array = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
                llama_cpp.llama_sampler_apply(grammar, ctypes.byref(array))
                if not math.isfinite(one[0].logit):
                    return False
                llama_cpp.llama_sampler_accept(grammar, token)
            return True
        finally:
            llama_cpp.llama_sampler_free(grammar)

    head = '{"figures": [{"name": "margin", "figure": "'
    assert accepted(head + 'two percent (2.0%)"}], "program": "answer = 0.095 + margin"}')
    assert not accepted(head + INVENTED)
    assert not accepted(head + 'two percent (2%)"')  # a near copy is still not the passage's text
    assert not accepted('{"figures": [{"name": "Rate!", ')  # a name is a variable name


# `finmbs verify` on the scripted server --------------------------------------------------------------------
QUESTION = (
    "Under the agreement, the Loans bear interest at 9.50% per annum. An Event of Default occurs and Agent elects "
    "the default rate. What rate per annum do the Loans bear while it continues?"
)


def finance(answer: str, text: str = DEFAULT_RATE) -> Problem:
    return Problem(id="p", question=QUESTION, answer=answer, domain="finance", snippet=Snippet(text=text))


def handler(figure: str, requests: list):
    """A teacher that chooses `figure` (whatever the schema says: a server that ignores it) and solves 11.5%."""

    def reply(request) -> Reply:
        requests.append(request)
        if LISTED in request.text or "could not be used" in request.text:
            program = {"figures": [{"name": "margin", "figure": figure}], "program": "answer = 0.095 + margin"}
            return Reply(texts=[json.dumps(program)])
        return Reply(texts=["9.50% plus 2.0% is 11.50%. Final answer: \\boxed{11.50\\%}"])

    return reply


async def verdicts(server, tmp_path, figure: str, problem: Problem, **verify):
    requests: list = []
    server.handler = handler(figure, requests)
    config = world_config(server.base_url, ["teacher"], ["s"], "target", str(tmp_path / "cache.sqlite"), N=4)
    config = config.model_copy(update={"verify": config.verify.model_copy(update=verify)})
    [verdict] = await check_labels(
        Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "cache.sqlite"))), [problem], concurrency=1
    )
    return verdict, requests


async def test_a_listed_figure_verifies_and_the_request_carries_the_enum(tmp_path, openai_server):
    verdict, requests = await verdicts(openai_server, tmp_path, "two percent (2.0%)", finance("11.50%"))
    assert verdict.outcome == "verified", verdict.reason
    assert verdict.program.startswith("margin = quote('two percent (2.0%)', 0.02)\n")
    assert verdict.quotes == [{"text": "two percent (2.0%)", "value": "0.02"}]
    [asked] = [r for r in requests if LISTED in r.text]
    assert '[1] "two percent (2.0%)" = 0.02' in asked.text and "two percent (2.0%)', 0.02)" not in asked.text
    # the question's own percentage is shown as its rate too (read: the 1.5B added a stated 4.8% as 4.8 to a
    # listed 0.0575); a question that states none shows no such line
    assert "The percentages the problem itself states, as rates: 9.50% is 0.095." in asked.text
    assert problem_rates("What rate per annum do the Loans bear while it continues?") == ""
    schema = json.dumps(asked.body["response_format"])
    assert '"enum": ["two percent (2.0%)", "10.1"]' in schema


async def test_an_invented_figure_never_becomes_a_quote(tmp_path, openai_server):
    # a backend that ignores the schema: the reply with an invented figure does not parse (after the repair
    # re-ask), so no program quoting it is ever run; the label is rejected, counted by the program check
    verdict, requests = await verdicts(openai_server, tmp_path, INVENTED, finance("11.50%"))
    assert verdict.outcome == "rejected" and verdict.check == "program"
    assert verdict.program is None and verdict.quotes == []
    assert verdict.program_attempts == ["teacher: reply did not parse"]
    assert sum(LISTED in r.text or "could not be used" in r.text for r in requests) == 2


async def test_a_passage_with_no_figure_gets_no_program_request(tmp_path, openai_server):
    plain = finance("11.50%", text="The Borrower shall pay interest in arrears on each Interest Payment Date.")
    verdict, requests = await verdicts(openai_server, tmp_path, "two percent (2.0%)", plain)
    assert requests == []  # not even a trace: the skip is the verdict
    assert verdict.outcome == "rejected" and verdict.check == "program" and verdict.reason.startswith("skipped:")
    assert verdict.program_skipped and "no figure" in verdict.program_skipped


async def test_switched_off_the_program_quotes_the_passage_itself(tmp_path, openai_server):
    verdict, requests = await verdicts(
        openai_server, tmp_path, "two percent (2.0%)", finance("11.50%"), quote_spans=False
    )
    asked = [r for r in requests if "Write a short Python program" in r.text]
    assert asked and LISTED not in asked[0].text and "response_format" not in asked[0].body
    assert "quote(" in asked[0].text  # prompts/program_finance.txt, as before the switch
    assert PAPER_VALUES["verify.quote_spans"] is False and load_config().verify.quote_spans is True


def test_the_verify_summary_counts_the_skips(tmp_path, openai_server):
    from test_programs_engine import write_config
    from typer.testing import CliRunner

    from finmbs.cli import app
    from finmbs.testing.world import World

    plain = finance("11.50%", text="The Borrower shall pay interest in arrears on each Interest Payment Date.")
    problems = tmp_path / "labels.jsonl"
    problems.write_text(plain.model_dump_json() + "\n")
    out = tmp_path / "out.jsonl"
    config = write_config(openai_server, tmp_path, World(agents={}))
    result = CliRunner().invoke(app, ["verify", str(problems), "--config", config, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert (summary["rejected"], summary["rejected_by_program"], summary["programs_skipped"]) == (1, 1, 1)
    assert openai_server.request_count == 0


# grow: every teacher reply carrying a finance program chooses its figures -------------------------------------
def test_a_grow_reply_chooses_its_figures_and_derive_writes_the_quotes(tmp_path):
    from finmbs.mbs.candidates import derive, reply_model
    from finmbs.mbs.leaves import LeafVariants, OperatorVariant
    from finmbs.mbs.programs import figure_spans, program_prompt

    config = world_config("http://unused", ["teacher"], ["s"], "target", str(tmp_path / "c.sqlite"), N=4)
    ctx = Context(config=config, gateway=Gateway(cache_path=str(tmp_path / "c.sqlite")))
    seed = finance("11.50%")
    spans = figure_spans(ctx, seed)
    assert [s.text for s in spans] == ["two percent (2.0%)", "10.1"]
    for shape in (OperatorVariant, LeafVariants):  # a worked problem, and a list of them
        schema = json.dumps(reply_model(ctx, shape, spans).model_json_schema())
        assert '"enum": ["two percent (2.0%)", "10.1"]' in schema and schema.index('"figures"') < schema.index(
            '"program"'
        )
    asked = program_prompt(
        ctx, 'Reply with only one JSON object: {"answer": "<the final answer alone>"}', "finance", spans=spans
    )
    assert '[1] "two percent (2.0%)" = 0.02' in asked and '"figures": [{"name"' in asked and "quote(" not in asked
    reply = reply_model(ctx, OperatorVariant, spans).model_validate(
        {
            "question": QUESTION.replace("9.50%", "8.25%"),
            "solution": "8.25% plus 2.0% is 10.25%.",
            "answer": "10.25%",
            "figures": [{"name": "margin", "figure": "two percent (2.0%)"}],
            "program": "answer = 0.0825 + margin",
        }
    )
    with pytest.raises(ValueError):  # a figure the passage does not state cannot be parsed from a reply
        reply_model(ctx, OperatorVariant, spans).model_validate(
            {**reply.model_dump(), "figures": [{"name": "margin", "figure": INVENTED}]}
        )
    variant = derive(seed, reply, id="p.v1", stage="leaf", tree_path="0", parent_ids=["p"])
    assert variant.meta["program"] == "margin = quote('two percent (2.0%)', 0.02)\nanswer = 0.0825 + margin"
    result = run_program(variant.meta["program"], DEFAULT_RATE)
    assert result.ok and float(result.answer) == pytest.approx(0.1025)
    twice = reply.model_copy(update={"figures": reply.figures * 2})  # a name chosen twice binds nothing
    broken = derive(seed, twice, id="p.v2", stage="leaf", tree_path="0", parent_ids=["p"])
    assert "program" not in broken.meta and "chosen twice" in broken.meta["program_error"]
    # switched off (and for math), the reply shape and prompt are the recall ones
    off = config.model_copy(update={"verify": config.verify.model_copy(update={"quote_spans": False})})
    assert figure_spans(Context(config=off, gateway=ctx.gateway), seed) == []
    assert figure_spans(ctx, seed.model_copy(update={"domain": "math"})) == []
    assert "figures" not in reply_model(ctx, OperatorVariant, []).model_fields
