"""Seeds from facts (`mine.from_facts`): the engine's fact sets on the shipped agreements' real passages,
iXBRL facts of a real 10-K excerpt (tests/fixtures/ixbrl), the fallback to extracted spans for a filing
without iXBRL, and `finmbs seeds mine` end to end on a real index with a scripted teacher, judge and
target on the OpenAI-compatible server: what is kept, and each rejection the engine adds."""

from __future__ import annotations

import asyncio
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from finmbs.config import IndexSettings, RunConfig
from finmbs.ingest.pipeline import prepare
from finmbs.mbs import finance_operators as fo
from finmbs.mine.facts import (
    all_in_set,
    interest_set,
    ixbrl_fact_sets,
    ixbrl_facts,
    otherwise_add_on,
    passage_facts,
    raw_filing,
    span_fact_sets,
)
from finmbs.mine.from_facts import body_error, fact_plan, figure_name_error, naming_error
from finmbs.mine.questions import Options
from finmbs.mine.run import run_mine
from finmbs.records import Document
from finmbs.runs import read_jsonl
from finmbs.testing.server import Reply, Request
from finmbs.testing.world import world_config
from finmbs.verify.program import run_program
from finmbs.verify.quotes import check_quote

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "corpora" / "finance" / "docs"
IXBRL = ROOT / "tests" / "fixtures" / "ixbrl" / "aapl_2024_statements_of_operations.xhtml"
FACTS_MARKER = "The figures and the computation are chosen for you"
NAME_MARKER = "write only the few words that name the figure"


def prepared(path: Path) -> tuple[Document, str, list]:
    """(Document, text, chunks) of a file, parsed and chunked as ingest does (no vectors)."""
    [doc] = prepare(path, IndexSettings())
    return Document(doc_id=path.stem, source_path=str(path), sha256="-"), doc.parsed.text, doc.chunks


# fact sets on the shipped agreements ----------------------------------------------------------------------
@pytest.mark.parametrize("stem", sorted(p.stem for p in SHIPPED.glob("*.txt")))
def test_fact_sets_of_shipped_agreements_are_quoted_and_computed(stem):
    doc, text, chunks = prepared(SHIPPED / f"{stem}.txt")
    planned = fact_plan(doc, text, chunks, 4)
    assert len(planned) >= 2, f"{stem}: {len(planned)} fact sets"
    for fact_set, passage in planned:
        snippet = passage.parts[0]
        assert text[snippet.char_start : snippet.char_end] == snippet.text  # verbatim by construction
        for fact in fact_set.facts:
            # the fact's text is where the engine says, and quote() holds for its value on the passage
            assert snippet.text[fact.char_start : fact.char_start + len(fact.text)] == fact.text
            assert check_quote(fact.text, float(fact.value), snippet.text) is None
        # the engine's value is the operation over the facts, and a program of the formula gives it
        result = run_program(f"{fact_set.prelude()}\nanswer = {fact_set.formula}", snippet.text)
        assert result.ok, result.error
        assert abs(result.value - float(fact_set.value)) <= 1e-6 * max(1.0, abs(float(fact_set.value)))
    # no rate of a share of something ("more than 50% of the Commitments"), none above 15% per annum
    rates = [f for s, _ in planned for f in s.facts if f.kind == "percent"]
    assert all(0 < f.value <= Fraction(15, 100) for f in rates)


def test_brown_forman_pricing_grid_margin_gives_interest_over_a_benchmark():
    doc, text, chunks = prepared(SHIPPED / "brown_forman_2023_credit_agreement.txt")
    grid = text[text.index("Ratings (S&P/Moody’s/Fitch)") :][:400]
    [first, *_] = span_fact_sets(grid, key="bf")
    assert first.operation == "interest" and [f.name for f in first.facts] == ["margin"]
    margin, givens = first.facts[0], {g.name: g.value for g in first.givens}
    assert margin.text == "0.50%" and margin.value == Fraction(1, 200) and "Category 1" in margin.context
    expected = givens["principal"] * (givens["benchmark"] + margin.value) * givens["days"] / 360
    assert first.value == expected
    # the same margin, one step: the rate per annum over the benchmark, in percent (never for a rate of its own)
    all_in = next(s for s in span_fact_sets(grid, key="bf") if s.operation == "all_in_rate" and s.facts[0] == margin)
    [benchmark] = all_in.givens
    assert all_in.kind == "one_step" and all_in.unit == "percent"
    assert all_in.value == (benchmark.value + Fraction(1, 200)) * 100
    assert "all_in_rate" not in [s.operation for s in span_fact_sets("interest at 7.25% per annum", key="x")]


def test_the_teachers_name_must_fit_the_figure_as_the_question_uses_it():
    # read in a mining run: Realty Income's Post-Default Rate adds 2% to the rate otherwise applicable; the
    # 1.5B named it "the Applicable Margin for Loans that are Base Rate Loans" and the question added it to a
    # benchmark: a solver would need another provision's figure, and the label was the 2%
    text = (SHIPPED / "realty_income_2023_term_loan_agreement.txt").read_text(encoding="utf-8")
    start = text.index("“ Post-Default Rate ”")
    passage = text[start : start + 450]
    [increase] = [f for f in passage_facts(passage) if f.kind == "percent"]
    assert otherwise_add_on(passage, increase)
    # not planned over a benchmark at all (a question that adds it to one is wrong in meaning) ...
    assert all(increase.text not in [f.text for f in s.facts] for s in span_fact_sets(passage, key="k"))
    # ... and a fact set that did add it to one is refused at naming, whatever the teacher calls it
    for fact_set in (interest_set(increase, "k", margin=True), all_in_set(increase, "k")):
        for name in ("the Applicable Margin for Loans that are Base Rate Loans", "the Post-Default Rate margin"):
            why = figure_name_error(name, passage, fact_set)
            assert why and "to the rate otherwise applicable, not to a benchmark" in why
    # a pricing grid's margin over a benchmark: a margin's name passes, a benchmark's does not
    doc, grid_text, _ = prepared(SHIPPED / "brown_forman_2023_credit_agreement.txt")
    grid = grid_text[grid_text.index("Ratings (S&P/Moody’s/Fitch)") :][:400]
    [first, *_] = span_fact_sets(grid, key="bf")
    assert figure_name_error("the Applicable Margin for Term SOFR Loans", grid, first) is None
    assert "name a benchmark" in (figure_name_error("the Term SOFR Rate", grid, first) or "")


def test_a_share_of_something_is_no_rate_and_a_ratio_level_gives_headroom():
    passage = (
        "provided that the Indebtedness does not at any time exceed 25% of Consolidated Assets. The Borrower "
        "shall not permit the Consolidated Leverage Ratio to exceed 3.50 to 1.00 at the end of any fiscal quarter."
    )
    sets = span_fact_sets(passage, key="x")
    assert [s.operation for s in sets] == ["headroom"]
    level = sets[0].facts[0]
    assert level.text == "3.50 to 1.00" and level.value == Fraction(7, 2)
    givens = {g.name: g.value for g in sets[0].givens}
    assert sets[0].value == level.value * givens["denominator"] - givens["numerator"] > 0
    # a pricing grid's threshold is no covenant level; "may exceed" is an election, not a limit
    grid = "Consolidated Total Leverage Ratio | SOFR Loans | Base Rate Loans\nGreater than 0.75 to 1.00 300.00 200.00"
    election = "the Borrower may elect that the ratio of Total Liabilities to Gross Asset Value may exceed 0.60 to 1.00"
    assert span_fact_sets(grid, key="x") == [] and span_fact_sets(election, key="x") == []


# iXBRL -------------------------------------------------------------------------------------------------------
def test_ixbrl_facts_of_a_real_10k_excerpt():
    raw = IXBRL.read_text(encoding="utf-8")
    facts = ixbrl_facts(raw)
    revenue = {f.period: f for f in facts if f.concept == "us-gaap:RevenueFromContractWithCustomerExcludingAssessedTax"}
    # the totals (no product/service dimension), each fiscal year: displayed in millions (scale 6)
    assert {p: (f.text, f.value, f.scale, f.unit) for p, f in revenue.items()} == {
        "2023-10-01..2024-09-28": ("391,035", 391035, 6, "usd"),
        "2022-09-25..2023-09-30": ("383,285", 383285, 6, "usd"),
        "2021-09-26..2022-09-24": ("394,328", 394328, 6, "usd"),
    }
    assert "Total net sales" in revenue["2023-10-01..2024-09-28"].context
    net = next(f for f in facts if f.concept == "us-gaap:NetIncomeLoss" and f.period.endswith("2024-09-28"))
    assert net.value == 93736
    sets = {(s.operation, s.facts[0].name): s for s in ixbrl_fact_sets(facts)}
    change = sets[("change", "revenue_current")]
    assert change.value == Fraction(391035 - 383285, 383285) * 100  # 2.02%, from the two latest years
    margin = sets[("ratio", "net_income")]
    assert margin.value == Fraction(93736, 391035) * 100


def test_a_filing_in_ixbrl_is_mined_from_its_facts(tmp_path):
    doc, text, chunks = prepared(IXBRL)
    assert raw_filing(doc) is not None
    planned = fact_plan(doc, text, chunks, 3)
    assert len(planned) == 3 and planned[0][0].operation == "change"
    for fact_set, passage in planned:
        snippet = passage.parts[0]
        assert text[snippet.char_start : snippet.char_end] == snippet.text
        assert "2024" in snippet.text  # the table's headings (the years) come with its rows
        result = run_program(f"{fact_set.prelude()}\nanswer = {fact_set.formula}", snippet.text)
        assert result.ok and abs(result.value - float(fact_set.value)) < 1e-9, result.error


def test_a_filing_without_ixbrl_falls_back_to_extracted_spans(tmp_path):
    plain = re.sub(r"</?ix:[^>]*>", "", IXBRL.read_text(encoding="utf-8"))
    plain = plain.replace(
        "</div></body>",
        "<p>Revolving credit facility. Borrowings under the facility bear interest at Term SOFR plus an applicable "
        "margin of 1.125% per annum; the Company pays a commitment fee of 0.10% per annum on unused commitments."
        "</p></div></body>",
    )
    path = tmp_path / "aapl_no_ixbrl.html"
    path.write_text(plain, encoding="utf-8")
    doc, text, chunks = prepared(path)
    assert raw_filing(doc) is None
    planned = fact_plan(doc, text, chunks, 4)
    assert [s.operation for s, _ in planned] == ["fee"]  # one fact set per passage, the fee first
    assert all(f.concept is None for s, _ in planned for f in s.facts)
    margin = next(s for s in span_fact_sets(planned[0][1].text, "k") if s.operation == "interest")
    assert margin.facts[0].text == "1.125%" and "benchmark" in margin.formula


def test_the_teachers_lines_may_use_only_the_engines_names():
    doc, text, chunks = prepared(SHIPPED / "brown_forman_2023_credit_agreement.txt")
    fact_set, _ = fact_plan(doc, text, chunks, 1)[0]
    assert body_error(f"answer = {fact_set.formula}", fact_set) is None
    fact = fact_set.facts[0].name
    assert "undefined name(s) rate_x" in body_error(f"answer = {fact_set.formula} + rate_x", fact_set)
    assert "rebinds" in body_error(f"{fact} = 0.02\nanswer = {fact_set.formula}", fact_set)
    assert "quotes" in body_error("x = quote('2%', 0.02)\nanswer = x", fact_set)
    assert "leaves out" in body_error("answer = principal * 0.05", fact_set)
    assert "does not bind answer" in body_error(f"result = {fact_set.formula}", fact_set)


# the engine through the scripted server ------------------------------------------------------------------------
def answered(prompt: str, value: float) -> str:
    """The answer as the operation's unit writes it: a rate in percent points (`* 100`), else money."""
    formula = re.search(r"^answer = (.+)$", prompt, re.M).group(1)  # type: ignore[union-attr]
    return f"{value:.2f}%" if formula.endswith("* 100") else f"${value:,.2f}"


class FactsWorld:
    """Teacher, judge and target for fact-set prompts: the teacher states every given and describes the
    facts (`leak`: writes a fact's value; `wrong`: its program adds 1; `undefined`: uses a name of its own)
    and solves its questions right; the judge finds them answerable; the target answers $1.00."""

    def __init__(self, **knobs: set[str]):
        self.knobs = knobs
        self.answers: dict[str, str] = {}

    def __call__(self, request: Request) -> Reply:
        text = request.messages[0]["content"] if request.messages else request.text
        if NAME_MARKER in text:
            return Reply(texts=[json.dumps(self.name(text))])
        if FACTS_MARKER in text:
            return Reply(texts=[json.dumps(self.write(text))])
        if "the passage alone must suffice" in text:
            return Reply(texts=[json.dumps({"reason": "scripted", "answerable": True, "supported": True})])
        question = next((q for q in self.answers if q in text), None)
        right = request.model.endswith("teacher") and question is not None
        answer = self.answers[question] if right else "$1.00"  # type: ignore[index]
        return Reply(texts=[f"Work. Final answer: \\boxed{{{answer}}}"])

    def knob(self, name: str, company: str) -> bool:
        return any(m in company for m in self.knobs.get(name, set()))

    @staticmethod
    def computed(text: str) -> tuple[float, dict[str, str], list[str]]:
        """The operation's value from the prompt's facts, givens and formula; the facts' texts; the givens."""
        formula = re.search(r"^answer = (.+)$", text, re.M).group(1)  # type: ignore[union-attr]
        scope: dict[str, float] = {}
        shown: dict[str, str] = {}
        for fact, value, quoted in re.findall(
            r"^- (\w+) = ([-\d.e]+)(?: \(that is [^)]*\))?: the figure '([^']*)'", text, re.M
        ):
            scope[fact], shown[fact] = float(value), quoted
        stated = []
        for given, value, how in re.findall(r"^- (\w+) = ([-\d.e]+): .*?; state it as (.+)$", text, re.M):
            scope[given] = float(value)
            stated.append(f"the {given} is {how}")
        return eval(formula, {"__builtins__": {}}, scope), shown, stated  # noqa: S307 (the test's own arithmetic)

    def name(self, text: str) -> dict:
        """Asked to name the figure (mine.engine_question): words unique to this request, remembered with the
        answer so that the teacher solves the engine's question right (`leak`: the words state the figure)."""
        value, shown, _ = self.computed(text)
        # a careful teacher: the passage's own term for the figure where its definition holds it, as a margin
        passage = re.search(r"<passage>\n(.*?)\n</passage>", text, re.S).group(1)  # type: ignore[union-attr]
        quoted = next(iter(shown.values()))
        at = passage.find(quoted)
        term = fo.defining_term(passage, fo.QuotedFigure("f", quoted, Fraction(0), at, None)) if at >= 0 else None
        words = f"the {term or 'scripted'} margin {len(self.answers):03d}x"
        if self.knob("leak", re.search(r"about (.+?)\. The figures", text).group(1)):  # type: ignore[union-attr]
            words += f" at {next(iter(shown.values()))}"
        self.answers[words] = answered(text, value)
        return {"name": words}

    def write(self, text: str) -> dict:
        name = re.search(r"Name (.+?) in the question", text).group(1)  # type: ignore[union-attr]
        formula = re.search(r"^answer = (.+)$", text, re.M).group(1)  # type: ignore[union-attr]
        value, shown, stated = self.computed(text)
        question = f"Under {name}'s credit agreement, where {', '.join(stated)}, what is the result for the provision?"
        if self.knob("leak", name):
            question = question.replace("the provision", f"the provision at {next(iter(shown.values()))}")
        program = f"answer = {formula}"
        if self.knob("wrong", name):
            program += " + 1"
        if self.knob("undefined", name):
            program = f"answer = {formula} * adjustment"
        self.answers[question] = answered(text, value)
        return {"question": question, "program": program}


@pytest.fixture(scope="module")
def index_settings(agreements_built, tmp_path_factory):
    from conftest import agreements_copy

    return agreements_copy(agreements_built, tmp_path_factory.mktemp("facts-index"))


def facts_config(
    server,
    tmp_path: Path,
    settings: IndexSettings,
    engine_program: bool = True,
    engine_question: bool = True,
    round_trip: bool = False,
    **knobs: set[str],
) -> RunConfig:
    server.handler = FactsWorld(**knobs)
    config = world_config(server.base_url, ["teacher"], ["student"], "target", str(tmp_path / "c.sqlite"), N=4, Nt=2)
    update = {"engine_program": engine_program, "engine_question": engine_question, "round_trip": round_trip}
    mine = config.mine.model_copy(update=update)
    return config.model_copy(update={"index": settings, "domain": "finance", "mine": mine})


def mine_facts(config: RunConfig, tmp_path: Path, documents: list[str]):
    out = tmp_path / "seeds.jsonl"
    options = Options(per_document=2, types=["multi_step"], hard_only=True)
    metrics = asyncio.run(run_mine(config, options, out, tmp_path / "run", documents=documents))
    rejected = list(read_jsonl(tmp_path / "run" / "rejected.jsonl"))
    return metrics, [json.loads(line) for line in out.read_text().splitlines()], rejected


BF, CMC, HOST = (
    "brown_forman_2023_credit_agreement",
    "commercial_metals_2022_sixth_ar_credit_agreement",
    "host_hotels_2023_sixth_ar_credit_agreement",  # its opening, cut for the test index, states no rate
)


def test_seeds_from_facts_are_computed_by_their_program(tmp_path, openai_server, index_settings):
    config = facts_config(openai_server, tmp_path, index_settings)
    metrics, seeds, rejected = mine_facts(config, tmp_path, [BF, CMC, HOST])
    assert metrics.kept == len(seeds) >= 3, rejected
    assert {s["snippet"]["doc_id"] for s in seeds} == {BF, CMC}
    [none] = rejected  # the document without a fact set, counted
    assert none["data"]["check"] == "no_facts" and none["data"]["document"] == HOST
    for seed in seeds:
        meta = seed["meta"]
        assert meta["operation"] in ("interest", "fee", "headroom", "all_in_rate") and meta["measured"]["k"] == 0
        result = run_program(meta["program"], seed["snippet"]["text"])  # the engine's bindings, then the teacher's line
        if meta["operation"] == "all_in_rate":  # one step: the benchmark plus the passage's margin, in percent
            assert result.ok and f"{result.value:.2f}%" == seed["answer"]
            assert seed["question"].endswith("rounded to two decimal places.")
        else:
            assert result.ok and f"${result.value:,.2f}" == seed["answer"]
            assert seed["question"].endswith("rounded to the nearest cent.")
        for fact, where in zip(meta["facts"], meta["evidence"], strict=True):
            assert fact["text"] in seed["snippet"]["text"] and where["text"] == fact["text"]
    asked = [r.text for r in openai_server.requests if FACTS_MARKER in r.text]
    assert asked and all("quote(" not in a for a in asked)


@pytest.mark.parametrize(
    ("knob", "check", "why"),
    [
        ("wrong", "operation", "the chosen operation"),
        ("undefined", "program", "undefined name(s) adjustment"),
        ("leak", "facts", "states the passage's figure"),
    ],
)
def test_each_fact_rule_is_a_counted_rejection(tmp_path, openai_server, index_settings, knob, check, why):
    # the program rules bind the teacher's own line: mine.engine_program off
    engine = knob == "leak"
    config = facts_config(openai_server, tmp_path, index_settings, engine, False, **{knob: {"Commercial Metals"}})
    metrics, seeds, rejected = mine_facts(config, tmp_path, [CMC])
    assert not seeds and rejected and all(r["data"]["check"] == check for r in rejected)
    assert all(why in r["reason"] for r in rejected)
    assert metrics.rejected_by_check == {check: len(rejected)}


def test_with_the_switch_off_the_teacher_writes_the_evidence(tmp_path, openai_server, index_settings):
    config = facts_config(openai_server, tmp_path, index_settings)
    config = config.model_copy(update={"mine": config.mine.model_copy(update={"from_facts": False})})
    mine_facts(config, tmp_path, [CMC])
    assert not [r for r in openai_server.requests if FACTS_MARKER in r.text]
    assert [r for r in openai_server.requests if "a set of hard finance questions" in r.text]


def test_with_engine_program_the_teacher_writes_the_question_alone(tmp_path, openai_server, index_settings):
    # a teacher whose program lines would be wrong: asked for the question alone, its seeds are computed by
    # the engine's operation line, checked as before by a teacher trace
    config = facts_config(openai_server, tmp_path, index_settings, True, False, wrong={"Commercial Metals"})
    metrics, seeds, rejected = mine_facts(config, tmp_path, [CMC])
    assert seeds and not rejected and metrics.kept == len(seeds)
    for seed in seeds:
        assert seed["meta"]["program"].endswith(f"\nanswer = {seed['meta']['formula']}")
        assert "program_as_written" not in seed["meta"]
    asked = [r for r in openai_server.requests if FACTS_MARKER in r.text]
    assert asked and all('"program":' not in r.text and "write only the question." in r.text for r in asked)
    schema = json.dumps(asked[0].body.get("response_format", {}))
    assert '"question"' in schema and '"program"' not in schema


def test_words_naming_a_figure_may_state_no_rate_and_name_a_provision():
    assert naming_error("the Applicable Margin for Term SOFR Loans at Level II") is None
    assert "state three percent" in naming_error("three percent (3.00%)")  # the 1.5B's, on Alphatec's
    assert naming_error("rate") == "the words 'rate' name no provision"


def test_with_the_round_trip_a_teacher_that_writes_no_program_solves_no_engine_question(
    tmp_path, openai_server, index_settings
):
    # mine.round_trip: solvability is k programs from the question and passage, not the prose traces; this
    # world's teacher writes no program, so every engine question is a counted round_trip rejection
    config = facts_config(openai_server, tmp_path, index_settings, round_trip=True)
    metrics, seeds, rejected = mine_facts(config, tmp_path, [BF])
    assert seeds == [] and metrics.kept == 0
    assert rejected and {r["data"]["check"] for r in rejected} == {"round_trip"}
    assert all(r["problem"]["meta"]["round_trip"] == "0 of 3" for r in rejected)


def test_with_engine_question_the_teacher_only_names_the_figure(tmp_path, openai_server, index_settings):
    # the engine's question states every given and names the figure by the teacher's words; words that state
    # the figure's rate are a counted rejection
    config = facts_config(openai_server, tmp_path, index_settings)
    metrics, seeds, rejected = mine_facts(config, tmp_path, [BF, CMC])
    assert seeds and not rejected and metrics.kept == len(seeds)
    for seed in seeds:
        meta = seed["meta"]
        assert meta["figure_name"] in seed["question"] and seed["question"].startswith("Under ")
        for given, value in meta["givens"].items():  # each stated with its value
            shown = (
                f"{value} days"
                if given == "days"
                else f"{float(value) * 100:g}%"
                if "." in value
                else f"${int(value):,}"
            )
            assert shown in seed["question"], (given, seed["question"])
        assert meta["program"].endswith(f"\nanswer = {meta['formula']}")
        result = run_program(meta["program"], seed["snippet"]["text"])
        shown = f"{result.value:.2f}%" if meta["operation"] == "all_in_rate" else f"${result.value:,.2f}"
        assert result.ok and shown == seed["answer"]
    asked = [r for r in openai_server.requests if NAME_MARKER in r.text]
    assert len(asked) == metrics.candidates and all("[NAME]" in r.text for r in asked)
    openai_server.reset()
    config = facts_config(openai_server, tmp_path / "leak", index_settings, leak={"Commercial Metals"})
    metrics, seeds, rejected = mine_facts(config, tmp_path / "leak", [CMC])
    assert not seeds and rejected and all(r["data"]["check"] == "facts" for r in rejected)
    assert all("the words naming the figure state" in r["reason"] for r in rejected)
