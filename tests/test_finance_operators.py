"""The engine's finance operators (finmbs/mbs/finance_operators.py) and rebinding's figure choice
(finmbs/mbs/rebind.py `choose`, `provision`) on real passages of the shipped agreements: roles read from the
clause, programs that the sandbox runs to the engine's exact value, the backward search's unique answer, the
name checks (a benchmark or the Floor never names a figure added to one), and the rebinding answer key
(each seed clause's figure to the analogous figure of the other agreements), with the bad inputs each a
counted reason naming the document."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path

import pytest

from finmbs.mbs import finance_operators as fo
from finmbs.mbs import program_operators as ops
from finmbs.mbs.engine_leaves import slots
from finmbs.mbs.rebind import Wanted, choose, provision
from finmbs.verify.program import run_program_async

DOCS = Path(__file__).resolve().parents[1] / "corpora" / "finance" / "docs"


def clause(doc: str, start: str, chars: int = 420) -> str:
    """The agreement's text from the first occurrence of `start`, `chars` long (a verbatim clause)."""
    text = (DOCS / f"{doc}.txt").read_text(encoding="utf-8")
    at = text.index(start)
    return text[at : at + chars]


AVID = clause("avidxchange_2022_credit_and_security_agreement", "“Default Rate” means (a)")
BROWN = clause("brown_forman_2023_credit_agreement", "such overdue amount shall bear interest", 320)
ALPHA = clause("alphatec_2023_credit_security_guaranty_agreement", "Section 10.5 Default Rate of Interest .")
REALTY = clause("realty_income_2023_term_loan_agreement", "“ Post-Default Rate ”", 300)


def figure(program: str, passage: str) -> fo.QuotedFigure:
    [found] = fo.quoted_figures(program, passage)
    return found


def run(source: str, passage: str):
    return asyncio.run(run_program_async(source, passage))


@pytest.mark.parametrize(
    ("passage", "quote", "value"),
    [
        (AVID, "two percent (2%)", "0.02"),
        (BROWN, "2%", "0.02"),
        (ALPHA, "two percent (2.0%)", "0.02"),
        (REALTY, "two percent (2.0%)", "0.02"),
    ],
)
def test_default_rate_increase_is_an_add_on_over_the_rate_otherwise_applicable(passage, quote, value):
    found = figure(f"margin = quote({quote!r}, {value})\nanswer = margin * 100", passage)
    assert (found.role, found.base) == (fo.ADD_ON, fo.OTHERWISE)
    assert found.value == Fraction(1, 50)


# the teacher's name for the figure, as its program binds it: the 1.5B named Brown-Forman's 2% `principal` in a
# run, which the engine's own `principal = ...` line then overwrote (caught only by the exact-value check)
@pytest.mark.parametrize("name", ["margin", "principal", "days", "round", "quote", "x"])
def test_applied_backward_and_second_period_compute_the_engines_value_in_the_sandbox(name):
    found = figure(f"{name} = quote('two percent (2%)', 0.02)\nanswer = {name} * 100", AVID)
    assert found.name == name
    terms = fo.terms_for("t1", found.value, None)
    # the name is kept unless the built program binds it again (principal, days; x in a backward search),
    # calls it (quote) or it is a builtin's (round)
    for operator, kept in (("finance:applied", ("margin", "x")), ("finance:backward:principal", ("margin",))):
        built = fo.build(operator, [found], terms)
        assert isinstance(built, fo.FinanceBuilt)
        [bound] = built.figures
        assert bound.name == (name if name in kept else "figure_1"), operator
        assert f"{bound.name} = quote(" in built.program() and not fo.clashing(built.program(), built.figures)
    for name in (
        "finance:all_in_rate",
        "finance:applied",
        "finance:backward:principal",
        "finance:backward:days",
        "finance:second_period",
    ):
        built = fo.build(name, [found], terms)
        assert isinstance(built, fo.FinanceBuilt), built
        built.names = ["the Default Rate"]
        result = run(built.program(), AVID)
        assert result.ok, (name, result.error)
        assert abs(Fraction(result.value) - built.expect) <= Fraction(1, 200), name
        text = built.question("AvidXchange")
        assert slots(text, fo.as_built(built)) is None, (name, text)
        assert "2%" not in text and "two percent" not in text  # the solver looks the figure up
    all_in = fo.build("finance:all_in_rate", [found], terms)
    assert all_in.expect == (terms.base + Fraction(1, 50)) * 100 and fo.answer_of(all_in, all_in.expect).endswith("%")
    assert "$" not in all_in.question("AvidXchange", ["the Default Rate"])  # the rate alone: no principal
    own_rate = fo.QuotedFigure(**{**found.__dict__, "role": fo.RATE, "base": None})
    refused = fo.build("finance:all_in_rate", [own_rate], terms)
    assert isinstance(refused, ops.Refusal) and "nothing to add" in refused.reason  # asking for it is the lookup
    applied = fo.build("finance:applied", [found], terms)
    assert "would otherwise bear interest" in applied.template  # a default rate holds its benchmark already
    assert "accrues as {name0} provides" in applied.template
    assert applied.expect == fo.cents(terms.principal * (terms.base + Fraction(1, 50)) * terms.days / 360)


def test_backward_principal_fails_when_the_figure_quoted_is_not_in_the_passage():
    found = figure("margin = quote('two percent (2%)', 0.02)\nanswer = margin * 100", AVID)
    built = fo.build("finance:backward:principal", [found], fo.terms_for("t1", found.value, None))
    result = run(built.program(), BROWN)  # another passage: the quote inside the search is not verbatim there
    assert not result.ok


def test_slots_reject_a_text_that_states_the_quoted_figure_or_the_answer():
    found = figure("margin = quote('two percent (2%)', 0.02)\nanswer = margin * 100", AVID)
    built = fo.build("finance:applied", [found], fo.terms_for("t1", found.value, None))
    built.names = ["the Default Rate of 2%"]
    assert "states 2" in (slots(built.question("AvidXchange"), fo.as_built(built)) or "")


@pytest.mark.parametrize(
    ("name", "role", "base", "ok"),
    [
        ("the Adjusted Term SOFR Rate", fo.ADD_ON, fo.BENCHMARK, False),  # a benchmark added to a benchmark
        ("Floor", fo.ADD_ON, fo.BENCHMARK, False),
        ("the Floor rate", fo.ADD_ON, fo.OTHERWISE, False),
        ("margin", fo.ADD_ON, fo.BENCHMARK, False),  # one bare word names no provision
        ("the Default Rate of 2%", fo.ADD_ON, fo.OTHERWISE, False),  # holds the figure
        ("the Default Rate", fo.ADD_ON, fo.BENCHMARK, False),  # a default rate over a benchmark: not a margin
        ("the Applicable Margin for SOFR Loans", fo.ADD_ON, fo.BENCHMARK, True),
        ("the Default Rate", fo.ADD_ON, fo.OTHERWISE, True),
        ("the Post-Default Rate", fo.ADD_ON, fo.OTHERWISE, True),
    ],
)
def test_role_error(name, role, base, ok):
    assert (fo.role_error(name, role, base) is None) is ok


def test_engine_name_is_the_defined_term_or_heading_before_the_figure():
    avid = figure("m = quote('two percent (2%)', 0.02)\nanswer = m", AVID)
    alpha = figure("m = quote('two percent (2.0%)', 0.02)\nanswer = m", ALPHA)
    assert fo.engine_name(AVID, avid) == "the Default Rate"
    assert fo.engine_name(ALPHA, alpha) == "the Default Rate of Interest"


def test_the_defining_term_holds_the_figure_in_its_definition_or_defines_it_inline():
    avid = figure("m = quote('two percent (2%)', 0.02)\nanswer = m", AVID)
    realty = figure("m = quote('two percent (2.0%)', 0.02)\nanswer = m", REALTY)
    assert fo.defining_term(AVID, avid) == "Default Rate"
    assert fo.defining_term(REALTY, realty) == "Post-Default Rate"
    inline = "Obligations shall bear interest at 2% per annum plus the rate otherwise applicable (the “Default Rate”)."
    assert fo.defining_term(inline, figure("m = quote('2%', 0.02)\nanswer = m", inline)) == "Default Rate"
    # a term defined and ended before the figure's sentence does not hold it
    ended = "“Margin” means 1.00% per annum.\nOverdue amounts bear interest at 2% per annum plus the rate otherwise applicable."
    assert fo.defining_term(ended, figure("m = quote('2%', 0.02)\nanswer = m", ended)) is None
    # no definition in the passage: no check (the role check still applies)
    brown = figure("m = quote('2%', 0.02)\nanswer = m", BROWN)
    assert fo.defining_term(BROWN, brown) is None
    assert fo.passage_name_error("the Applicable Margin", BROWN, brown) is None


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("the Applicable Margin for Term SOFR Loans", False),  # a provision the passage mentions, not defines here
        ("the Default Rate", True),
        ("Default Rate for SOFR Loans", True),
        ("the Base Rate", False),
    ],
)
def test_a_name_must_use_the_term_whose_definition_holds_the_figure(name, ok):
    avid = figure("m = quote('two percent (2%)', 0.02)\nanswer = m", AVID)
    assert (fo.passage_name_error(name, AVID, avid) is None) is ok


def test_a_figure_outside_the_rate_range_is_refused():
    wide = fo.QuotedFigure("m", "two hundred percent (200%)", Fraction(2), 0, fo.ADD_ON, fo.OTHERWISE)
    refused = fo.applied(wide, fo.terms_for("t", Fraction(2), None))
    assert isinstance(refused, ops.Refusal)


# ---------------------------------------------------------------- rebinding: the answer key

SEED = Wanted(
    name="margin",
    text="two percent (2%)",
    value=Fraction(1, 50),
    role=fo.ADD_ON,
    base=fo.OTHERWISE,
    context=figure("margin = quote('two percent (2%)', 0.02)\nanswer = margin", AVID).context,
    provision="the Default Rate",
)
ANSWER_KEY = [  # (unseen clause, the figure a hand reading binds, the provision name)
    (ALPHA, "two percent (2.0%)", "the Default Rate of Interest"),
    (REALTY, "two percent (2.0%)", "the Post-Default Rate"),
    (BROWN, "2%", "the provision on interest on overdue amounts"),
]


@pytest.mark.parametrize(("passage", "text", "name"), ANSWER_KEY)
def test_rebinding_finds_the_analogous_default_rate_increase(passage, text, name):
    found, why = choose(passage, SEED, "doc")
    assert why is None and found is not None
    assert found.text == text
    named, why = provision(passage, SEED, found)
    assert named is not None, why
    if name:
        assert named == name
    built = fo.build("finance:applied", [found], fo.terms_for("t1", SEED.value, None))
    built.names = [named]
    result = run(built.program(), passage)  # the quote is verbatim in d' and states the value bound
    assert result.ok, result.error


@pytest.mark.parametrize(
    ("passage", "needle"),
    [
        ("“Default Rate” means the rate otherwise applicable plus an additional margin.", "no figure that parses"),
        ("“Closing Date” means the date on which $5,000,000 of Loans is funded.", "no figure of the needed kind"),
        (
            "“Default Rate” means the rate otherwise applicable plus two hundred percent (200%) per annum.",
            "no figure of the needed kind",  # 200% is no rate at all
        ),
    ],
)
def test_rebinding_bad_input_is_a_counted_reason_naming_the_document(passage, needle):
    found, why = choose(passage, SEED, "acme_2024")
    assert found is None
    assert why is not None and why.startswith("acme_2024") and needle in why


def test_a_rebinding_outside_the_plausible_range_names_both_values():
    passage = "“Default Rate” means the rate otherwise applicable plus an additional twelve percent (12%) per annum."
    found, why = choose(passage, SEED, "acme_2024")
    assert found is None
    assert "plausible range" in why and "0.12" in why and "0.02" in why


def test_a_figure_in_words_only_is_bound_by_its_words():
    passage = "“Default Rate” means the rate otherwise applicable plus an additional two percent per annum."
    found, why = choose(passage, SEED, "acme_2024")
    assert why is None and found.text == "two percent" and found.value == Fraction(1, 50)
