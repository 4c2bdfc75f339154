"""Writes bench/data/labels.jsonl: the labeled set for bench/bench_labels.py (run from the repository root).

    python bench/data/make_labels.py [OUT]   (default bench/data/labels.jsonl)

Every problem is original (written for finmbs). Each right answer is computed here in Python from the
question's givens and the passage's figures, and each wrong one is the same problem's answer with one
named, subtle flaw (`meta.flaw`), `meta.right_answer` holding the right one. Finance passages are cut
out of the shipped agreements (corpora/finance/docs) between two anchors, so they are verbatim; the
test tests/test_label_set.py checks that and the balance of the set.
"""

from __future__ import annotations

import json
import math
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "corpora" / "finance" / "docs"
COMPANY = {
    "alphatec_2023_credit_security_guaranty_agreement": "Alphatec Holdings, Inc.",
    "avidxchange_2022_credit_and_security_agreement": "AvidXchange, Inc.",
    "brown_forman_2023_credit_agreement": "Brown-Forman Corporation",
    "realty_income_2023_term_loan_agreement": "Realty Income Corporation",
}


def passage(doc_id: str, start: str, end: str) -> dict:
    """The document's text from `start` through `end` (first occurrence after start), whitespace collapsed."""
    text = " ".join((DOCS / f"{doc_id}.txt").read_text(encoding="utf-8").split())
    i = text.index(" ".join(start.split()))
    j = text.index(" ".join(end.split()), i) + len(" ".join(end.split()))
    return {"text": text[i:j], "doc_id": doc_id, "source_path": f"corpora/finance/docs/{doc_id}.txt"}


def usd(x: float) -> str:
    return f"${x:,.2f}" if round(x, 2) != round(x) else f"${round(x):,}"


def pct(x: float, places: int = 2) -> str:
    return f"{x:.{places}f}%"


def days(a: date, b: date) -> int:
    """Days from a to b, counting a and not b."""
    return (b - a).days


ROWS: list[dict] = []


def add(
    id_: str,
    question: str,
    right: str,
    *,
    wrong: str | None = None,
    flaw: str | None = None,
    snippet: dict | None = None,
    note: str = "",
) -> None:
    row = {
        "id": id_,
        "question": question,
        "answer": wrong if wrong is not None else right,
        "domain": "finance" if snippet else "math",
    }
    if snippet:
        row["snippet"] = snippet
        row["entity"] = COMPANY[snippet["doc_id"]]
    meta = {"label": "wrong" if wrong is not None else "right", "note": note}
    if wrong is not None:
        assert wrong != right and flaw
        meta.update(right_answer=right, flaw=flaw)
    row["meta"] = meta
    ROWS.append(row)


# ---------------------------------------------------------------------------------------------- math
add(
    "m-buses",
    "A school is taking 187 students on a field trip. Each bus seats 42 students. How many buses does the "
    "school need so that every student has a seat?",
    str(math.ceil(187 / 42)),
    note="ceil(187/42) = 5 (4 buses seat 168)",
)
add(
    "m-cookie-boxes",
    "A baker made 350 cookies and packs them in boxes of 12. How many boxes can she fill completely?",
    str(350 // 12),
    wrong=str(math.ceil(350 / 12)),
    flaw="ceil-floor: 350/12 = 29.17 fills 29 boxes (348 cookies); 30 rounds up a count of full boxes",
)
add(
    "m-last-shelf",
    "A librarian puts 263 books on shelves, 18 books to a shelf, filling each shelf before starting the "
    "next. How many books are on the last shelf, which is not full?",
    str(263 % 18),
    note="263 = 14*18 + 11",
)
add(
    "m-rate-rise",
    "A savings account paid 2.5% interest last year and pays 3.0% this year. By what percent did the "
    "interest rate increase?",
    str(round((3.0 - 2.5) / 2.5 * 100)),
    wrong="0.5",
    flaw="percent vs percentage points: the rate rose 0.5 percentage points, which is a 20% increase",
)
add(
    "m-approval",
    "A mayor's approval rating was 42% in spring and 47% in autumn. By how many percentage points did it rise?",
    str(47 - 42),
    note="47 - 42 = 5 points",
)
add(
    "m-paycheck",
    "Maria earns $18 an hour and works 6 hours a day, 5 days a week. She is paid every two weeks. How "
    "many dollars is each paycheck?",
    str(18 * 6 * 5 * 2),
    wrong=str(18 * 6 * 5),
    flaw="wrong period: 540 is one week's pay; a paycheck covers two weeks (1080)",
)
add(
    "m-gym",
    "A gym charges $39 a month, or $399 for a whole year paid at once. How many dollars does someone save "
    "in a year by paying for the year at once?",
    str(39 * 12 - 399),
    note="39*12 = 468; 468 - 399 = 69",
)
add(
    "m-temperature",
    "At 6 a.m. the temperature was -4 degrees Celsius. By noon it had risen 11 degrees, and by "
    "midnight it had fallen 9 degrees from the noon temperature. What was the temperature at midnight, in degrees "
    "Celsius?",
    str(-4 + 11 - 9),
    wrong=str(abs(-4 + 11 - 9)),
    flaw="sign: -4 + 11 - 9 = -2 degrees, not 2",
)
add(
    "m-quarter-profit",
    "A shop lost $12,500 in January, then made a profit of $8,200 in February and $6,900 in "
    "March. What was its total profit for the three months, in dollars?",
    str(-12500 + 8200 + 6900),
    note="-12500 + 8200 + 6900 = 2600",
)
add(
    "m-fence-posts",
    "A straight fence is 60 meters long, with a post every 5 meters, including a post at each end. "
    "How many posts does the fence have?",
    str(60 // 5 + 1),
    wrong=str(60 // 5),
    flaw="off-by-one: 12 gaps of 5 m need 13 posts when both ends have one",
)
add(
    "m-pages",
    "Leo read a book from the start of page 37 through the end of page 84. How many pages did he read?",
    str(84 - 37 + 1),
    note="84 - 37 + 1 = 48",
)
add(
    "m-loan-days",
    "A loan is taken on March 10 and repaid on April 9; interest is charged for every calendar day "
    "from March 10 through April 9, both days included. For how many days is interest charged?",
    str(days(date(2025, 3, 10), date(2025, 4, 9)) + 1),
    wrong=str(days(date(2025, 3, 10), date(2025, 4, 9))),
    flaw="off-by-one: March 10-31 is 22 days and April 1-9 is 9 days, 31 with both ends included; 30 drops one end",
)
add(
    "m-jacket",
    "A jacket costs $80. It is marked down 25%, and at the register an extra 10% is taken off the "
    "marked-down price. How many dollars does the jacket cost at the register?",
    str(round(80 * 0.75 * 0.9)),
    note="80 * 0.75 = 60; 60 * 0.9 = 54",
)
add(
    "m-price-swing",
    "A bicycle was priced at $200. In May its price rose 10%, and in June the new price fell 10%. "
    "What was the price in June, in dollars?",
    str(round(200 * 1.1 * 0.9)),
    wrong="200",
    flaw="percent of a changed base: +10% then -10% gives 200*1.1*0.9 = 198, not 200",
)
add(
    "m-tiles",
    "Each box of tiles covers 1.5 square meters. How many boxes must be bought to tile a floor 4.2 meters "
    "long and 3.5 meters wide?",
    str(math.ceil(round(4.2 * 3.5, 6) / 1.5)),
    note="area 14.7; 14.7/1.5 = 9.8 -> 10",
)
add(
    "m-reserves",
    "48 students sign up for a relay. They are put into as many full teams of 5 as possible, and "
    "everyone left over becomes a reserve. How many reserves are there?",
    str(48 % 5),
    wrong=str(50 - 48),
    flaw="remainder: 48 = 9*5 + 3, so 3 reserves; 2 is how many more would fill a tenth team",
)
add(
    "m-printer",
    "A printer prints 45 pages a minute. How many minutes does it take to print 30 copies of a 24-page report?",
    str(30 * 24 // 45),
    note="720 pages / 45 = 16",
)
add(
    "m-subscription",
    "A streaming service costs $15 a month and bills every quarter. How many dollars is each bill?",
    str(15 * 3),
    wrong=str(15 * 4),
    flaw="wrong period: a quarter is 3 months (45), not 4 (60)",
)
add(
    "m-remote",
    "A company has 240 employees. 35% of them work remotely, and one sixth of the remote workers live "
    "abroad. How many employees live abroad?",
    str(round(240 * 0.35 / 6)),
    note="240 * 0.35 = 84; 84 / 6 = 14",
)
add(
    "m-rope",
    "A rope 10 meters long is cut into pieces 0.75 meters long. How many full pieces can be cut?",
    str(math.floor(10 / 0.75)),
    wrong=str(math.ceil(10 / 0.75)),
    flaw="ceil-floor: 10/0.75 = 13.33, so 13 full pieces (9.75 m); 14 rounds up",
)
add(
    "m-diver",
    "A diver is 18 meters below the surface. She rises 7 meters, then descends 12 meters. What is her "
    "position relative to the surface, in meters (negative below the surface)?",
    str(-18 + 7 - 12),
    note="-18 + 7 - 12 = -23",
)
add(
    "m-margin-fall",
    "A store's profit margin fell from 20% last year to 15% this year. By what percent did the profit margin fall?",
    str(round((20 - 15) / 20 * 100)),
    wrong="5",
    flaw="percent vs percentage points: a fall of 5 points from 20% is a 25% fall",
)

# ---------------------------------------------------------------------------------------------- finance
AL, AV = "alphatec_2023_credit_security_guaranty_agreement", "avidxchange_2022_credit_and_security_agreement"
BF, RI = "brown_forman_2023_credit_agreement", "realty_income_2023_term_loan_agreement"

al_fees = passage(AL, "(c) Undrawn Fee. From and following", "one (1) day’s interest shall be charged.")
q3 = days(date(2023, 7, 1), date(2023, 10, 1))  # 92 days, July 1 - September 30
add(
    "f-al-undrawn-fee-quarter",
    f"Under Alphatec's credit agreement, the average daily undrawn portion of the Delayed "
    f"Draw Term Loan Commitments was $30,000,000 during the fiscal quarter from July 1 through September 30, 2023 "
    f"({q3} days). How much Undrawn Fee accrued for that quarter?",
    usd(30_000_000 * 0.01 * q3 / 360),
    snippet=al_fees,
    note=f"30,000,000 * 1.00% * {q3}/360 (fees on a 360-day year)",
)
q1 = days(date(2023, 1, 1), date(2023, 4, 1))  # 90 days
add(
    "f-al-undrawn-fee-daycount",
    f"Under Alphatec's credit agreement, the average daily undrawn portion of the "
    f"Delayed Draw Term Loan Commitments was $45,000,000 during the fiscal quarter from January 1 through March 31, "
    f"2023 ({q1} days). How much Undrawn Fee accrued for that quarter?",
    usd(45_000_000 * 0.01 * q1 / 360),
    wrong=usd(45_000_000 * 0.01 * q1 / 365),
    snippet=al_fees,
    flaw="day count: fees are calculated on a 360-day year (112,500.00); 110,958.90 divides by 365",
)
al_default = passage(AL, "Section 10.5 Default Rate of Interest .", "on the part of Agent or any Lender.")
add(
    "f-al-default-rate",
    "Under Alphatec's credit agreement, the Loans bear interest at 9.50% per annum. Then an Event of "
    "Default specified in Section 10.1(e) occurs. What rate per annum do the Loans bear while that Event of Default "
    "continues?",
    pct(9.50 + 2.0),
    wrong=pct(9.50 * 1.02),
    snippet=al_default,
    flaw="percent vs percentage points: the default rate is 2.0 points above (11.50%), not 2% more of 9.50% (9.69%)",
)
al_exit = passage(AL, "(e) Exit Fee . Borrower shall pay", "upon each such prepayment or repayment of the Term Loan.")
add(
    "f-al-exit-fee",
    "Alphatec repays $36,000,000 of Term Loans. Under its credit agreement, what Exit Fee is payable "
    "on that repayment?",
    usd(36_000_000 * 0.0325),
    snippet=al_exit,
    note="36,000,000 * 3.25% = 1,170,000",
)
al_premium = passage(AL, "“ Repayment Premium ” means a premium of:", "but prior to the Maturity Date")
add(
    "f-al-repayment-premium",
    "Alphatec prepays $50,000,000 of Term Loans 26 months after the Closing Date, before the "
    "Maturity Date. Under its credit agreement, what Repayment Premium is due on that prepayment?",
    usd(50_000_000 * 0.01),
    wrong=usd(50_000_000 * 0.02),
    snippet=al_premium,
    flaw="wrong period: 26 months is after the second anniversary, so 1.00% ($500,000), not the 2.00% of year two",
)
al_compute = passage(AL, "(i) Computation of Interest and Related Fees .", "one (1) day’s interest shall be charged.")
march = days(date(2023, 3, 1), date(2023, 3, 31))
add(
    "f-al-interest-days",
    "Under Alphatec's credit agreement, a $40,000,000 Loan bearing interest at 11.05% per annum "
    "is funded on March 1, 2023 and repaid on March 31, 2023. How much interest accrues on it?",
    usd(40_000_000 * 0.1105 * march / 360),
    snippet=al_compute,
    note=f"funding day counted, payment day not: {march} days; 40,000,000 * 11.05% * {march}/360",
)
add(
    "f-al-same-day",
    "Under Alphatec's credit agreement, a $25,000,000 Loan bearing interest at 10.80% per annum is "
    "made and repaid on the same day. How much interest is charged on it?",
    usd(25_000_000 * 0.108 / 360),
    wrong="$0",
    snippet=al_compute,
    flaw="off-by-one: a Loan repaid on the day it is made is charged one day's interest (7,500.00), not none",
)

av_fee = passage(AV, "(a) Commitment Fee . The Borrowers shall pay", "and on the last day of the Commitment Period.")
add(
    "f-av-commitment-fee",
    f"Under AvidXchange's credit agreement, the Applicable Commitment Fee Rate is thirty "
    f"basis points. On every day of a {q3}-day quarter the Revolving Amount is $30,000,000 and the Revolving Credit "
    f"Exposure is $12,000,000. What commitment fee accrues for the quarter?",
    usd(18_000_000 * 0.003 * q3 / 360),
    snippet=av_fee,
    note=f"(30,000,000 - 12,000,000) * 0.30% / 360 * {q3} days",
)
add(
    "f-av-commitment-fee-daycount",
    f"Under AvidXchange's credit agreement, the Applicable Commitment Fee Rate is thirty "
    f"basis points. On every day of a {q1}-day quarter the Revolving Amount is $25,000,000 and the Revolving Credit "
    f"Exposure is $5,000,000. What commitment fee accrues for the quarter?",
    usd(20_000_000 * 0.003 * q1 / 360),
    wrong=usd(20_000_000 * 0.003 * q1 / 365),
    snippet=av_fee,
    flaw="day count: the fee rate is divided by 360 (15,000.00); 14,794.52 divides by 365",
)
av_default = passage(
    AV,
    "“Default Rate” means (a) with respect to any SOFR Loan",
    "in excess of the Derived Base Rate from time to time in effect.",
)
add(
    "f-av-default-sofr",
    "Under AvidXchange's credit agreement, a SOFR Loan's Adjusted Term SOFR Rate is 5.10% and "
    "the then Applicable Margin for it is 275 basis points. What is the Default Rate for that Loan, per annum?",
    pct(5.10 + 2 + 2.75),
    snippet=av_default,
    note="5.10% + 2% + 2.75% = 9.85%",
)
add(
    "f-av-default-base",
    "Under AvidXchange's credit agreement, a Loan bears interest at the Base Rate, which is 8.25%, "
    "and the then Applicable Margin for Base Rate Loans is 175 basis points. What is the Default Rate for that Loan, "
    "per annum?",
    pct(8.25 + 1.75 + 2),
    wrong=pct((8.25 + 1.75) * 1.02),
    snippet=av_default,
    flaw="percent vs percentage points: 8.25% + 1.75% + 2 points = 12.00%; 10.20% takes 2% of 10.00%",
)
av_grid = passage(
    AV,
    "“Applicable Margin” means: (a) for the period from the Closing Date",
    "The first date on which the Applicable Margin is subject to change is April 1, 2023.",
)
add(
    "f-av-margin-grid",
    "Under AvidXchange's credit agreement, the Compliance Certificate that governs pricing in "
    "August 2023 was delivered on time and shows a Senior Facility Debt to LQA Software Revenue Ratio of exactly 0.25 "
    "to 1.00. What Applicable Margin applies to SOFR Loans in August 2023?",
    "250 basis points",
    snippet=av_grid,
    note="0.25 is 'less than or equal to 0.25 to 1.00': 250.00 for SOFR Loans",
)
add(
    "f-av-margin-boundary",
    "Under AvidXchange's credit agreement, the Compliance Certificate that governs pricing in "
    "October 2023 was delivered on time and shows a Senior Facility Debt to LQA Software Revenue Ratio of exactly 0.75 "
    "to 1.00. What Applicable Margin applies to Base Rate Loans in October 2023?",
    "175 basis points",
    wrong="200 basis points",
    snippet=av_grid,
    flaw="off-by-one row: 0.75 is 'less than or equal to 0.75 to 1.00' (175); 200 is the row 'greater than 0.75'",
)
av_liquidity = passage(
    AV, "(a) Available Liquidity . The Borrowers shall not permit", "of the Total Commitment Amount."
)
add(
    "f-av-min-liquidity",
    "AvidXchange's Total Commitment Amount is $120,000,000. Under its credit agreement, what is "
    "the least Available Liquidity the Borrowers may have at any time?",
    usd(max(35_000_000, 0.35 * 120_000_000)),
    snippet=av_liquidity,
    note="greater of 35,000,000 and 35% * 120,000,000 = 42,000,000",
)
av_compute = passage(
    AV,
    "Section 2.11. Computation of Interest and Fees .",
    "as the case may be, and calculated for the actual number of days elapsed.",
)
add(
    "f-av-sofr-interest-daycount",
    "Under AvidXchange's credit agreement, a $10,000,000 Term SOFR Loan bears interest "
    "at 7.90% per annum. How much interest accrues on it over 30 days?",
    usd(10_000_000 * 0.079 * 30 / 360),
    wrong=usd(10_000_000 * 0.079 * 30 / 365),
    snippet=av_compute,
    flaw="day count: interest on Loans other than Base Rate Loans uses a 360-day year (65,833.33); 64,931.51 uses 365",
)

bf_interest = passage(
    BF,
    "(c) Notwithstanding the foregoing, if any principal of or interest on any Loan",
    "such determination shall be conclusive absent manifest error.",
)
add(
    "f-bf-overdue-interest",
    "Brown-Forman does not repay a $50,000,000 Term SOFR Loan bearing interest at 5.45% per "
    "annum at its stated maturity, and the principal stays overdue for 10 days. Under its credit agreement, how much "
    "interest accrues on the overdue principal over those 10 days?",
    usd(50_000_000 * 0.0745 * 10 / 360),
    snippet=bf_interest,
    note="5.45% + 2% = 7.45% on a 360-day year: 50,000,000 * 7.45% * 10/360",
)
bf_compute = passage(
    BF,
    "(e) Interest computed by reference to a Term SOFR Rate",
    "such determination shall be conclusive absent manifest error.",
)
add(
    "f-bf-abr-daycount",
    "Under Brown-Forman's credit agreement, a $20,000,000 ABR Loan bears interest at 8.50% per "
    "annum for 45 days in 2023, while the Alternate Base Rate is based on the Prime Rate. How much interest accrues?",
    usd(20_000_000 * 0.085 * 45 / 365),
    wrong=usd(20_000_000 * 0.085 * 45 / 360),
    snippet=bf_compute,
    flaw="day count: Prime-based ABR interest uses a 365-day year in 2023 (209,589.04); 212,500.00 uses 360",
)
bf_grid = passage(
    BF,
    "“ Applicable Rate ” means, for any day, with respect to any Term SOFR Loan",
    "the Category next above that of the lower of the ratings;",
)
add(
    "f-bf-grid-split",
    "Only two agencies rate Brown-Forman's Index Debt: S&P rates it A and Moody's rates it Baa2 "
    "(Fitch has no rating in effect). Under its credit agreement, what Applicable Rate (Term SOFR Margin, % per annum) "
    "applies to a Term SOFR Loan?",
    "0.875%",
    snippet=bf_grid,
    note="A = Category 3, Baa2 = Category 5; two ratings two Categories apart: the Category next above the lower, 4",
)
period = days(date(2023, 3, 15), date(2023, 6, 15))
add(
    "f-bf-interest-period",
    "Under Brown-Forman's credit agreement, a $100,000,000 Term SOFR Loan bearing interest at "
    "5.60% per annum has a three-month Interest Period from March 15, 2023 to June 15, 2023. How much interest accrues "
    "over that Interest Period?",
    usd(100_000_000 * 0.056 * period / 360),
    wrong=usd(100_000_000 * 0.056 * (period + 1) / 360),
    snippet=bf_compute,
    flaw=f"off-by-one: the first day counts and the last does not, {period} days (1,431,111.11); "
    f"1,446,666.67 counts {period + 1}",
)

ri_post = passage(
    RI,
    "“ Post-Default Rate ” means, in respect of any principal",
    "for Loans that are Base Rate Loans plus two percent (2.0%).",
)
add(
    "f-ri-post-default-other",
    "Under Realty Income's term loan agreement, the Base Rate is 8.50% and the Applicable "
    "Margin for Loans that are Base Rate Loans is 0.200%. What is the Post-Default Rate on an Obligation other than "
    "principal of the Loans, per annum?",
    pct(8.50 + 0.20 + 2.0),
    snippet=ri_post,
    note="8.50% + 0.200% + 2.0%",
)
ri_leverage = passage(
    RI,
    "(a) Ratio of Total Liabilities to Gross Asset Value . Except as provided",
    "for which such election has been made and the immediately subsequent three fiscal quarters.",
)
add(
    "f-ri-leverage-cash",
    "At a fiscal quarter end Realty Income has consolidated Total Liabilities of $19,000,000,000, "
    "of which $2,000,000,000 matures within 24 months, Gross Asset Value of $31,000,000,000, and unrestricted cash and "
    "Cash Equivalents of $530,000,000. What is the ratio of Total Liabilities to Gross Asset Value as Section 10.1(a) "
    "calculates it, to four decimal places?",
    f"{(19_000 - 500) / (31_000 - 500):.4f}",
    wrong=f"{(19_000 - 500) / (31_000 + 500):.4f}",
    snippet=ri_leverage,
    flaw="sign: the 500,000,000 adjustment is deducted from Gross Asset Value too (18,500/30,500 = 0.6066); "
    "0.5873 adds it",
)
ri_fixed = passage(
    RI,
    "(b) Ratio of EBITDA to Fixed Charges . The Borrower shall not permit",
    "to be less than 1.50 to 1.00 at the end of such fiscal quarter;",
)
add(
    "f-ri-fixed-charge-shortfall",
    "For the four fiscal quarters just ended, Realty Income's consolidated EBITDA was "
    "$1,800,000,000 and its consolidated Fixed Charges were $1,250,000,000. Holding Fixed Charges fixed, by how much "
    "would EBITDA have had to be higher to meet the ratio that Section 10.1(b) requires?",
    usd(1.5 * 1_250_000_000 - 1_800_000_000),
    snippet=ri_fixed,
    note="1.50 * 1,250,000,000 = 1,875,000,000; less 1,800,000,000",
)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "bench" / "data" / "labels.jsonl"
    out.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in ROWS), encoding="utf-8")
    for row in ROWS:
        print(f"{row['id']:32} {row['meta']['label']:5} {row['answer']:>18}  {row['meta'].get('right_answer', '')}")
    print(len(ROWS), "problems written to", out)


if __name__ == "__main__":
    main()
