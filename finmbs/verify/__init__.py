"""Answer verification: one entry point for every stage, the evaluator and the reward.

Math answers go through math-verify; with `math_judge` (`verify.math_judge`, the paper's §3.2 "answer
matching or an LLM-as-a-judge") the judge decides the comparisons math-verify has no verdict on (an
answer it cannot parse, past its time limit), never one it decided. Finance answers go through the deterministic
finance-aware comparer first (`finmbs.verify.finance.compare`, equal / different / undecided)
and, only where it cannot decide and a judge is given, the LLM judge
(`finmbs.verify.judge.judge_equivalence`).

Submodules are imported where used, so a light user of one (the program sandbox's worker reads
`finance` and `quotes`) does not import the model gateway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from finmbs.config import Endpoint
    from finmbs.llm import Gateway

DecidedBy = Literal["no_answer", "math", "comparer", "judge", "undecided"]


@dataclass(frozen=True)
class Verification:
    """Whether a response's final answer matches the ground truth, and what decided it (a dataclass: the
    package imports nothing the program sandbox's worker does not need)."""

    correct: bool
    extracted: str | None
    decided_by: DecidedBy
    reason: str = ""


async def verify_answer(
    domain: str,
    predicted: str | None,
    ground_truth: str,
    *,
    question: str | None = None,
    gateway: Gateway | None = None,
    judge: Endpoint | None = None,
    math_judge: bool = False,
) -> Verification:
    """Compare an already-extracted answer with the ground truth; `math_judge`: the judge decides a math
    comparison math-verify has no verdict on."""
    if not predicted:
        return Verification(correct=False, extracted=predicted, decided_by="no_answer", reason="no final answer")
    if domain == "math":
        from finmbs.verify.math import math_verdict

        verdict = math_verdict(predicted, ground_truth)
        if verdict is not None or not math_judge or gateway is None or judge is None:
            reason = "" if verdict is not None else "math-verify has no verdict"
            return Verification(correct=verdict is True, extracted=predicted, decided_by="math", reason=reason)
    else:
        from finmbs.verify.finance import compare

        comparison = compare(predicted, ground_truth, question=question)
        if comparison.verdict != "undecided":
            return Verification(
                correct=comparison.verdict == "equal",
                extracted=predicted,
                decided_by="comparer",
                reason=comparison.reason,
            )
        if gateway is None or judge is None:
            return Verification(correct=False, extracted=predicted, decided_by="undecided", reason=comparison.reason)
    from finmbs.verify.judge import judge_equivalence

    judged = await judge_equivalence(gateway, judge, question=question, predicted=predicted, ground_truth=ground_truth)
    return Verification(correct=judged.equal, extracted=predicted, decided_by="judge", reason=judged.reason)


async def verify_response(
    domain: str,
    response: str,
    ground_truth: str,
    *,
    question: str | None = None,
    gateway: Gateway | None = None,
    judge: Endpoint | None = None,
    math_judge: bool = False,
) -> Verification:
    """Extract the final answer of a full response, then verify it."""
    from finmbs.verify.extract import extract_final_answer

    answer = extract_final_answer(response)
    return await verify_answer(
        domain, answer, ground_truth, question=question, gateway=gateway, judge=judge, math_judge=math_judge
    )
