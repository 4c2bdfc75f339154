"""The LLM judge: a finance-aware equivalence verdict for answers the comparer cannot decide."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from finmbs.resources import render_prompt

if TYPE_CHECKING:
    from finmbs.config import Endpoint
    from finmbs.llm import Gateway


class JudgeVerdict(BaseModel):
    """Binary equivalence verdict with a short reason."""

    equal: bool
    reason: str = ""


async def judge_equivalence(
    gateway: Gateway, endpoint: Endpoint, *, question: str | None, predicted: str, ground_truth: str
) -> JudgeVerdict:
    """Ask the judge whether `predicted` means `ground_truth` (temperature 0, cached, counted as "judge").

    A reply that stays unparseable after the gateway's repair re-ask counts as not equal.
    """
    prompt = render_prompt(
        "judge_equivalence", question=question or "(not given)", predicted=predicted, ground_truth=ground_truth
    )
    (verdict,) = await gateway.structured(
        endpoint, JudgeVerdict, role="judge", messages=[{"role": "user", "content": prompt}], temperature=0.0
    )
    return verdict or JudgeVerdict(equal=False, reason="judge reply unparseable after repair")
