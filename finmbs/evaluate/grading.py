"""Grading one sampled response: refusal check, then the domain's verifier (math-verify, or comparer then judge)."""

from __future__ import annotations

import asyncio
import re

from finmbs.config import Endpoint
from finmbs.evaluate.loaders import EvalItem
from finmbs.llm import Gateway, Sample
from finmbs.records import Record
from finmbs.verify import verify_answer
from finmbs.verify.extract import extract_final_answer

_REFUSAL = re.compile(
    r"\b(?:can ?not|can't|unable to|not able to|impossible to)\b[^.\n]{0,40}?"
    r"\b(?:answer|determine|calculate|compute|provide|find|say|tell)\b"
    r"|\b(?:insufficient|not enough|no|lack of|missing)\s+(?:information|data|context)\b"
    r"|\b(?:information|data|figures?)\s+(?:is\s+|are\s+)?not\s+(?:provided|available|given|included)\b",
    re.IGNORECASE,
)
_TAIL_CHARS = 400


def is_refusal(text: str, extracted: str | None) -> bool:
    """An empty response, or one whose final answer (or closing text, when none) declines to answer."""
    if not text.strip():
        return True
    return bool(_REFUSAL.search(extracted if extracted else text[-_TAIL_CHARS:]))


class SampleGrade(Record):
    """The verdict on one sample, without its text (the gateway cache holds the text)."""

    correct: bool
    refusal: bool
    extracted: str | None
    decided_by: str
    finish_reason: str
    completion_tokens: int = 0
    excerpt: str = ""


async def grade_samples(
    item: EvalItem, samples: list[Sample], gateway: Gateway, judge: Endpoint | None
) -> list[SampleGrade]:
    """Refusals are wrong without asking a verifier; each distinct final answer is verified once."""
    extracted = [extract_final_answer(s.text) for s in samples]
    refusals = [is_refusal(s.text, answer) for s, answer in zip(samples, extracted)]
    distinct = list(dict.fromkeys(a for a, refused in zip(extracted, refusals) if not refused))
    verdicts = await asyncio.gather(
        *(
            verify_answer(item.domain, answer, item.answer, question=item.question, gateway=gateway, judge=judge)
            for answer in distinct
        )
    )
    by_answer = dict(zip(distinct, verdicts))
    grades = []
    for sample, answer, refused in zip(samples, extracted, refusals):
        verdict = None if refused else by_answer[answer]
        grades.append(
            SampleGrade(
                correct=bool(verdict and verdict.correct),
                refusal=refused,
                extracted=answer,
                decided_by=verdict.decided_by if verdict else "refusal",
                finish_reason=sample.finish_reason,
                completion_tokens=sample.completion_tokens,
                excerpt=sample.text.strip()[-200:],
            )
        )
    return grades
