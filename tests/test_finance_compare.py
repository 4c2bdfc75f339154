"""The deterministic finance comparer on hand-written cases worded like real filings and agreements.

Each row is (predicted, gold, question, expected verdict). The traps: scale words, basis points and
fractions of one percent, ratios, parenthesized negatives, dates, yes/no with explanations, rounding
only to the gold's (or the question's) precision, several figures in free text, "3M" the company.
"""

from __future__ import annotations

import pytest

from finmbs.verify.finance import compare, figures, question_scale, question_step

E, D, U = "equal", "different", "undecided"

Q_MILLIONS = "What is the FY2018 capital expenditure amount (in USD millions) for 3M?"
Q_BILLIONS = "What is the year end FY2018 net PPNE for 3M? Answer in USD billions."
Q_TWO_DP = "What is the FY2022 fixed asset turnover ratio for Adobe? Round your answer to two decimal places."
Q_PCT_1DP = (
    "What is the FY2021 operating margin? Calculate what was asked using the line items and round to one decimal place."
)
Q_YES_NO = "Does 3M have a reasonably healthy liquidity profile based on its quick ratio for Q2 of FY2023?"
Q_NAME = "Does CVS have a chief financial officer? If so, what is his name?"

CASES: list[tuple[str, str, str | None, str]] = [
    # --- currency and scale words -------------------------------------------------------------
    ("$1.2 billion", "1,200 million", None, E),
    ("1,200 million", "$1.2 billion", None, E),
    ("$1,200,000,000", "$1.2 billion", None, E),
    ("$1.2 billion", "$1,200,000,000", None, E),
    ("USD 5 mm", "$5,000,000", None, E),
    ("US$75,000,000", "$75 million", None, E),
    ("$75 million", "Seventy-Five Million Dollars ($75,000,000)", None, E),
    ("$1.5bn", "$1,500,000,000", None, E),
    ("$500MM", "$500,000,000", None, E),
    ("$2.5 bn", "$2,500 million", None, E),
    ("$250k", "$250,000", None, E),
    ("$1.25 billion", "$1,250,000,000", None, E),
    ("$1.3 billion", "$1,250,000,000", None, U),
    ("$1.24 billion", "$1,200,000,000", None, D),
    ("$1,249 million", "$1.2 billion", None, E),
    ("$1,260 million", "$1.2 billion", None, D),
    ("$150,000,000", "$100,000,000", None, D),
    ("$25,000,000", "$25.0 million", None, E),
    ("$20 million", "$25 million", None, D),
    ("€500 million", "$500 million", None, D),
    ("EUR 300,000,000", "€300 million", None, E),
    ("£50 million", "£50,000,000", None, E),
    ("$8.70", "$8.70", Q_BILLIONS, E),
    ("$8.7 billion", "$8.70", Q_BILLIONS, E),
    ("8.7", "$8.70", Q_BILLIONS, E),
    ("$8,738 million", "$8.70", Q_BILLIONS, D),
    ("$8.74", "$8.70", Q_BILLIONS, D),
    ("$1577", "$1577.00", Q_MILLIONS, E),
    ("$1,577 million", "$1577.00", Q_MILLIONS, E),
    ("$1.577 billion", "$1577.00", Q_MILLIONS, E),
    ("1,577", "$1577.00", Q_MILLIONS, E),
    ("$1,578 million", "$1577.00", Q_MILLIONS, D),
    ("$1.58 billion", "$1577.00", Q_MILLIONS, U),
    ("$8.70 billion", "$8.70", None, U),
    ("1577", "$1,577 million", None, U),
    ("$11,588", "$11588.00", None, E),
    ("$11,588.4", "$11588.00", None, D),
    ("11588", "$11588.00", None, E),
    ("$382", "$382.00", None, E),
    ("$5818", "$5818.00", None, E),
    ("5,818.0", "$5818.00", None, E),
    ("$32,780.00", "$32780.00", None, E),
    ("$32,870", "$32780.00", None, D),
    ("$ 0.40", "$0.40", None, E),
    ("$0.4", "$0.40", None, E),
    ("$0.41", "$0.40", None, D),
    ("$4.60 per share", "$4.60", None, E),
    ("$400,000,000 increase", "$400,000,000 increase.", None, E),
    ("$400 million", "$400,000,000 increase.", None, E),
    (
        "$8,400,000,000",
        "Total amount Pepsico may borrow under unsecured revolving credit agreements = $8,400,000,000.",
        "What is the total amount Pepsico may borrow under its unsecured revolving credit agreements?",
        E,
    ),
    ("$8.4 billion", "$8,400,000,000", None, E),
    (
        "$411 million",
        "Pepsico's restructuring costs in FY2022 amounted to $411 million .",
        "How much did Pepsico spend on restructuring in FY2022?",
        E,
    ),
    ("$3,725 million", "Corporate & Investment Bank. Its net income was $3725 million.", None, U),
    ("$2,018mn", "AMCOR's Adj. EBITDA was $2,018mn in FY 2023", "What was AMCOR's Adjusted EBITDA in FY 2023?", E),
    ("$2.018 billion", "$2,018mn", None, E),
    (
        "$20 billion",
        "JnJ will make a gain of approximately $20 billion from the separation of its Consumer Health business segment.",
        "How much gain will JnJ make from the separation of its Consumer Health business segment?",
        E,
    ),
    (
        "$20 billion",
        "JnJ will make a gain of approximately $20 billion from the separation of its Consumer Health business segment.",
        None,
        U,
    ),
    # --- negatives ----------------------------------------------------------------------------
    ("(1,234)", "-1,234", None, E),
    ("-1,234", "(1,234)", None, E),
    ("$(16,135)", "-16,135", None, E),
    ("(16,135)", "16,135", None, D),
    ("-0.02", "-0.02", None, E),
    ("(0.02)", "-0.02", None, E),
    ("0.02", "-0.02", None, D),
    ("-3.7", "-3.7", None, E),
    ("3.7", "-3.7", None, D),
    ("a decline of 3.7", "-3.7", None, U),
    ("-0.9%", "The consumer segment shrunk by 0.9% organically.", None, U),
    ("−0.9%", "-0.9%", None, E),
    ("Accumulated depreciation was (16,135)", "-16,135", None, U),
    ("-$229 million", "$(229) million", None, E),
    # --- percent, basis points, fractions of one percent -------------------------------------
    ("0.25%", "25 bps", None, E),
    ("25 bps", "0.25%", None, E),
    ("25 basis points", "0.25%", None, E),
    ("0.25 percent", "25 basis points", None, E),
    ("0.125%", "1/8 of 1%", None, E),
    ("1/8 of 1%", "0.125%", None, E),
    ("one-eighth of one percent", "0.125%", None, E),
    ("one-half of one percent", "0.50%", None, E),
    ("0.50%", "one-half of one percent (0.50%)", None, E),
    ("one-quarter of one percent", "0.25%", None, E),
    ("0.375%", "three-eighths of one percent", None, E),
    ("12.5 basis points", "0.125%", None, E),
    ("0.13%", "1/8 of 1%", None, U),
    ("0.15%", "0.125%", None, D),
    ("0.20%", "0.25%", None, D),
    ("175 bps", "1.75%", None, E),
    ("1.75%", "2.00%", None, D),
    ("2%", "two percent (2%)", None, E),
    ("12.34%", "12.3%", None, E),
    ("12.3%", "12.34%", None, U),
    ("12.34%", "12.30%", None, D),
    ("12.30%", "12.3%", None, E),
    ("12.25%", "12.3%", None, E),
    # half a step away rounds half away from zero: 0.025 is not a rounding of a stated 2% (a program that
    # added a margin to it was accepted as a lookup's before), 0.015 is; the same mirrored below zero
    ("0.025", "2%", None, D),
    ("2.5%", "2%", None, D),
    ("0.015", "2%", None, E),
    ("12.35%", "12.3%", None, D),
    ("-12.35%", "-12.3%", None, D),
    ("-12.25%", "-12.3%", None, E),
    ("12.2%", "12.3%", None, D),
    ("65.4", "65.4%", None, E),
    ("0.654", "65.4%", None, E),
    ("65.40%", "65.4%", None, E),
    ("65.5%", "65.4%", None, D),
    ("39.7%", "39.7%", None, E),
    ("39.68%", "39.7%", None, E),
    ("0.397", "39.7%", None, E),
    ("0.4%", "0.4%", None, E),
    ("0.004", "0.4%", None, E),
    ("0.04", "0.4%", None, D),
    ("2.8 percent", "2.8%", None, E),
    ("5.4%", "5.4%", Q_PCT_1DP, E),
    ("5.43%", "5.4%", Q_PCT_1DP, E),
    ("5.5%", "5.4%", Q_PCT_1DP, D),
    ("55.1%", "55.1%", None, E),
    ("55%", "55.1%", None, U),
    ("10.3%", "10.3%", None, E),
    ("7.9%", "7.9%", None, E),
    ("79%", "7.9%", None, D),
    ("0.2%", "0.2%", None, E),
    ("$0.2", "0.2%", None, D),
    ("36%", "36%. The answer here assumes FY2023 refers to the 12 months ended on January 28, 2023.", None, U),
    ("83%", "0.83", None, E),
    ("0.83", "0.83", None, E),
    ("0.84", "0.83", None, D),
    ("1.5x", "150%", None, U),
    # --- ratios -------------------------------------------------------------------------------
    ("3.5x", "3.50:1.00", None, E),
    ("3.50:1.00", "3.5x", None, E),
    ("3.50 to 1.00", "3.50:1.00", None, E),
    ("3.50 to 1", "3.50:1.00", None, E),
    ("3.5", "3.50:1.00", None, E),
    ("3.5 times", "3.50:1.00", None, E),
    ("3.25:1.00", "3.50:1.00", None, D),
    ("3.75x", "3.50 to 1.00", None, D),
    ("4.00 to 1.00", "4.0x", None, E),
    ("4.5x", "4.50:1.00", None, E),
    ("1.25:1.00", "1.25 to 1.00", None, E),
    ("1.2x", "1.25:1.00", None, U),
    (
        "2.7 times",
        "JnJ sold its inventory 2.7 times in FY2022.",
        "How many times did JnJ sell its inventory in FY2022?",
        E,
    ),
    ("2.7", "2.7x", None, E),
    ("0.96", "0.96", None, E),
    ("0.69 times", "0.69", None, E),
    ("$3.50", "3.50:1.00", None, D),
    ("3.50:1.00", "$3.50 million", None, D),
    # --- question rounding --------------------------------------------------------------------
    ("24.26", "24.26", Q_TWO_DP, E),
    ("24.2631", "24.26", Q_TWO_DP, E),
    ("24.3", "24.26", Q_TWO_DP, U),
    ("24.27", "24.26", Q_TWO_DP, D),
    ("93.86", "93.86", None, E),
    ("93.857", "93.86", None, E),
    ("93.9", "93.86", None, U),
    ("1.73", "1.73", None, E),
    ("17.98", "17.98", None, E),
    ("18", "17.98", None, U),
    ("17.89", "17.98", None, D),
    # --- dates --------------------------------------------------------------------------------
    ("2025-03-31", "March 31, 2025", None, E),
    ("3/31/2025", "March 31, 2025", None, E),
    ("March 31, 2025", "2025-03-31", None, E),
    ("31 March 2025", "March 31, 2025", None, E),
    ("Mar. 31, 2025", "March 31, 2025", None, E),
    ("the 31st day of March, 2025", "March 31, 2025", None, E),
    ("March 30, 2025", "March 31, 2025", None, D),
    ("2026-03-31", "March 31, 2025", None, D),
    ("March 2025", "March 31, 2025", None, U),
    ("April 2025", "March 31, 2025", None, D),
    ("January 3, 2028", "the Maturity Date is January 3, 2028", None, E),
    ("December 29, 2027", "12/29/2027", None, E),
    ("12/29/27", "December 29, 2027", None, E),
    ("The loans mature on January 3, 2028, unless extended to January 3, 2029", "January 3, 2028", None, U),
    ("January 3, 2028", "2028-01-03", None, E),
    ("no maturity is stated", "January 3, 2028", None, U),
    ("December 31, 2024", "June 30, 2024", None, D),
    # --- yes / no -----------------------------------------------------------------------------
    ("yes", "Yes, because the Consolidated Leverage Ratio exceeds 3.50:1.00", None, E),
    ("Yes.", "yes", None, E),
    ("No", "Yes", None, D),
    ("No, the covenant is not breached.", "Yes, the covenant is breached.", None, D),
    (
        "No",
        "No. The quick ratio for 3M was 0.96 by Jun'23 close, which needs a bit of an improvement to touch the 1x mark",
        Q_YES_NO,
        E,
    ),
    ("Yes", "No. The quick ratio for 3M was 0.96 by Jun'23 close", Q_YES_NO, D),
    ("The quick ratio is 0.96", "No. The quick ratio for 3M was 0.96 by Jun'23 close", Q_YES_NO, U),
    ("Yes", "Yes, his name is Richard A. Johnson", Q_NAME, U),
    ("Yes, because the ratio is 0.96", "Yes, the ratio is 1.57", None, U),
    ("Yes, it's spinning off Upjohn", "Yes, it's spinning off Upjohn.", None, E),
    ("Yes", "Yes", None, E),
    ("Not sure", "Yes", None, U),
    ("Yes", "$8.70", None, U),
    # --- free text, several figures, references -----------------------------------------------
    ("Data Center", "Data Center", None, E),
    ("data center", "Data Center", None, E),
    ("The Data Center segment", "Data Center", None, U),
    ("Gaming", "Data Center", None, U),
    ("United States, EMEA, APAC, and LACC", "United States, EMEA, APAC, and LACC", None, E),
    ("Revenue rose from $5 billion to $6 billion", "$6 billion", None, U),
    ("$6 billion and $6,000 million", "$6 billion", None, E),
    ("(2,000 - 400) = $1,600 million", "$1.6 billion", None, E),
    (
        "Effective tax rate in FY2022 was 0.62%",
        "Effective tax rate in FY2022 was 0.62%, compared to -14.76% in FY2021.",
        None,
        U,
    ),
    ("0.62%", "Effective tax rate in FY2022 was 0.62%, compared to -14.76% in FY2021.", None, U),
    ("3M", "3", None, D),
    ("Section 7.11", "7.11", None, D),
    ("Section 7.11(a) requires 3.50:1.00", "3.50:1.00", None, E),
    ("The Form 10-K shows $8.7 billion", "$8.7 billion", None, E),
    ("I cannot determine this from the document", "$8.70", None, D),
    ("", "$8.70", None, D),
    ("none", "0", None, E),
    ("There are none", "There are none", None, E),
    ("0", "0", None, E),
    ("1", "0", None, D),
    ("In FY2023 the ratio was 0.54", "0.54", None, E),
    ("\\$1.2\\text{ billion}", "$1,200,000,000", None, E),
    ("12.3\\%", "12.3%", None, E),
    ("\\frac{1}{8} of 1%", "0.125%", None, E),
    ("**$75,000,000**", "$75,000,000", None, E),
    ("90 days", "ninety (90) days", None, E),
    ("ninety days", "90 days", None, E),
    ("3 months", "90 days", None, U),
    ("60 days", "90 days", None, D),
    ("5 Business Days", "five Business Days", None, E),
    ("$5,000,000", "5 Business Days", None, D),
    # --- more traps ---------------------------------------------------------------------------
    ("$400 million decrease", "$400,000,000 increase.", None, U),
    ("$1.2 million", "$1.2 billion", None, D),
    ("1.2", "$1.2 billion", None, U),
    ("12 bps", "12%", None, D),
    ("350 bps", "3.5x", None, U),
    ("Approximately 5%", "5.10%", None, U),
    ("5.1%", "5.10%", None, E),
    ("-5%", "5% decrease", None, U),
    ("between $1.1 billion and $1.3 billion", "$1.2 billion", None, U),
    ("5.4 million", "$5,400,000", None, E),
    ("$5 million", "$5,400,000", None, U),
    ("-0.02", "0", None, D),
    ("0.3", "0", None, D),
    ("$600 million", "US$600,000,000", None, E),
    ("January 2, 2024", "2024-01-02", None, E),
    ("Yes", "Yes, it's spinning off Upjohn.", "As of Q2'2023, is Pfizer spinning off any large business segments?", E),
]


@pytest.mark.parametrize(("predicted", "gold", "question", "expected"), CASES)
def test_compare(predicted: str, gold: str, question: str | None, expected: str) -> None:
    result = compare(predicted, gold, question=question)
    assert result.verdict == expected, result.reason
    assert result.reason


def test_table_is_large_and_balanced() -> None:
    verdicts = [c[3] for c in CASES]
    assert len(CASES) >= 150
    assert min(verdicts.count(v) for v in (E, D, U)) >= 25


def test_question_scale_and_step() -> None:
    assert question_scale(Q_MILLIONS) == 6
    assert question_scale(Q_BILLIONS) == 9
    assert question_scale("What is the total in thousands of dollars?") == 3
    assert question_scale("How many stores?") == 0
    assert question_step(Q_TWO_DP) == pytest.approx(0.01)
    assert question_step("Round to the nearest whole number.") == 1
    assert question_step("What is the margin?") is None


def test_figures_skip_company_names_form_names_and_years_in_context() -> None:
    assert figures("3M") == []
    assert figures("Form 10-K") == []
    assert [float(f.value) for f in figures("In FY 2023 revenue was $1.8 bn")] == [1.8e9]


# A prediction that qualifies or negates its figure is never equal: different where the gold states
# the bare figure (approximations go to the judge), undecided where the gold qualifies it too.
QUALIFIED: list[tuple[str, str, str]] = [
    ("not $35,000,000", "$35,000,000", D),
    ("It is not $35,000,000.", "$35,000,000", D),
    ("The amount isn't $35,000,000", "$35,000,000", D),
    ("less than $35,000,000", "$35,000,000", D),
    ("more than 0.25%", "0.25%", D),
    ("anything but 0.25%", "0.25%", D),
    ("at least $10 million", "$10 million", D),
    ("at most $10 million", "$10 million", D),
    ("up to $10 million", "$10 million", D),
    ("over 25 bps", "0.25%", D),
    ("> 5%", "5%", D),
    ("$10 million or more", "$10 million", D),
    ("$10 million+", "$10 million", D),
    ("nearly $10 million", "$10 million", D),
    ("approximately $10 million", "$10 million", U),
    ("about 5%", "5%", U),
    ("~5%", "5%", U),
    ("about $20 billion", "approximately $20 billion", U),
    ("less than $1 million", "Less than $1 million of the facility was drawn.", U),
]


@pytest.mark.parametrize(("predicted", "gold", "expected"), QUALIFIED)
def test_qualified_prediction_is_never_equal(predicted: str, gold: str, expected: str) -> None:
    result = compare(predicted, gold)
    assert result.verdict == expected, result.reason


def test_bare_figure_in_a_sentence_stays_equal() -> None:
    assert compare("The facility totals $35,000,000.", "$35,000,000").verdict == E
    assert compare("$35,000,000 under the agreement", "$35,000,000").verdict == E
