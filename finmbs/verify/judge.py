"""The LLM judge: a finance-aware equivalence verdict for answers the comparer cannot decide."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from finmbs.llm.structured import written_in_order
from finmbs.resources import render_prompt

if TYPE_CHECKING:
    from finmbs.config import Endpoint
    from finmbs.llm import Gateway


class JudgeVerdict(BaseModel):
    """Binary equivalence verdict, its reasoning written first."""

    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    equal: bool


def delimited(**texts: str) -> dict[str, str]:
    """Prompt fields for untrusted texts, plus `nonce`: the tag suffix that fences them in the prompt.

    Judge prompts wrap each untrusted text in `<name_NONCE>...</name_NONCE>`. The nonce is a hash of
    the texts themselves, so it is stable (the gateway cache still hits) yet a text cannot contain its
    own closing tag: it cannot end its block early and add a "Ground truth" block of its own.
    """
    digest = hashlib.sha256("\x00".join(f"{k}={v}" for k, v in sorted(texts.items())).encode("utf-8"))
    return {**texts, "nonce": digest.hexdigest()[:16]}


async def judge_equivalence(
    gateway: Gateway, endpoint: Endpoint, *, question: str | None, predicted: str, ground_truth: str
) -> JudgeVerdict:
    """Ask the judge whether `predicted` means `ground_truth` (temperature 0, cached, counted as "judge").

    The texts are fenced (`delimited`) and the verdict is the reply's last JSON object. A reply that
    stays unparseable after the gateway's repair re-ask counts as not equal.
    """
    fields = delimited(question=question or "(not given)", predicted=predicted, ground_truth=ground_truth)
    prompt = render_prompt("judge_equivalence", **fields)
    (verdict,) = await gateway.structured(
        endpoint, JudgeVerdict, role="judge", messages=[{"role": "user", "content": prompt}], temperature=0.0, last=True
    )
    return verdict or JudgeVerdict(equal=False, reason="judge reply unparseable after repair")
