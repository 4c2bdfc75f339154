"""Eval result records, pass@k metrics overall and per question type, and their Markdown table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from finmbs.evaluate import EvalError
from finmbs.evaluate.grading import SampleGrade
from finmbs.evaluate.loaders import Skipped
from finmbs.evaluate.passk import bootstrap_ci, pass_at_k
from finmbs.llm.types import Sample
from finmbs.records import Record, RoleUsage, first_error

OVERALL = "overall"


class SampleLog(Record):
    """One sample in full, as logged to RESULT.samples.jsonl (like lm-evaluation-harness's --log_samples)."""

    id: str
    sample: int
    prompt: list[dict[str, str]]
    response: str
    extracted: str | None
    correct: bool
    refusal: bool
    decided_by: str
    finish_reason: str
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def of(
        cls, question_id: str, index: int, prompt: list[dict[str, str]], sample: Sample, grade: SampleGrade
    ) -> SampleLog:
        return cls(
            id=question_id,
            sample=index,
            prompt=prompt,
            response=sample.text,
            extracted=grade.extracted,
            correct=grade.correct,
            refusal=grade.refusal,
            decided_by=grade.decided_by,
            finish_reason=sample.finish_reason,
            prompt_tokens=sample.prompt_tokens,
            completion_tokens=sample.completion_tokens,
        )


class QuestionResult(Record):
    """One question's samples, graded (the full texts travel in `logs`, written beside the result, not in it)."""

    id: str
    question_type: str
    answer: str
    samples: list[SampleGrade]
    logs: list[SampleLog] = Field(default_factory=list, exclude=True)
    evidence_retrieved: bool | None = None  # retrieval mode: a retrieved passage lies on an evidence page

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def correct(self) -> int:
        return sum(s.correct for s in self.samples)


class Estimate(Record):
    """A mean over questions with its bootstrap 95% confidence interval."""

    value: float
    ci_low: float
    ci_high: float


class GroupMetrics(Record):
    """pass@k and sample outcome counts over one group of questions."""

    questions: int
    samples: int
    correct: int
    refusals: int
    no_answer: int
    judged: int
    truncated: int
    pass_at: dict[str, Estimate]

    @property
    def refusal_rate(self) -> float:
        return self.refusals / self.samples if self.samples else 0.0


class EvalResult(Record):
    """Everything one `finmbs eval` run measured, as written to eval/results/*.json."""

    benchmark: str
    domain: str
    mode: str
    model: dict[str, Any]
    judge: dict[str, Any] | None
    n: int
    temperature: float
    max_tokens: int
    k: list[int]
    data: str
    created: str
    settings: dict[str, Any] = Field(default_factory=dict)
    wall_time_s: float = 0.0
    usage: dict[str, RoleUsage] = Field(default_factory=dict)
    skipped: list[Skipped] = Field(default_factory=list)
    metrics: dict[str, GroupMetrics] = Field(default_factory=dict)
    questions: list[QuestionResult] = Field(default_factory=list)


def group_metrics(questions: Sequence[QuestionResult], ks: Sequence[int]) -> GroupMetrics:
    """Mean unbiased pass@k over the questions, each with a bootstrap CI, plus outcome counts."""
    samples = [s for q in questions for s in q.samples]
    pass_at = {}
    for k in ks:
        values = [pass_at_k(q.n, q.correct, k) for q in questions]
        low, high = bootstrap_ci(values)
        pass_at[f"pass@{k}"] = Estimate(value=sum(values) / len(values) if values else 0.0, ci_low=low, ci_high=high)
    return GroupMetrics(
        questions=len(questions),
        samples=len(samples),
        correct=sum(s.correct for s in samples),
        refusals=sum(s.refusal for s in samples),
        no_answer=sum(s.decided_by == "no_answer" for s in samples),
        judged=sum(s.decided_by == "judge" for s in samples),
        truncated=sum(s.finish_reason == "length" for s in samples),
        pass_at=pass_at,
    )


def metrics_by_type(questions: Sequence[QuestionResult], ks: Sequence[int]) -> dict[str, GroupMetrics]:
    """'overall' first, then one entry per question type (when there is more than one type)."""
    metrics = {OVERALL: group_metrics(questions, ks)}
    types = sorted({q.question_type for q in questions})
    if len(types) > 1:
        for qtype in types:
            metrics[qtype] = group_metrics([q for q in questions if q.question_type == qtype], ks)
    return metrics


def percent(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown_table(result: EvalResult) -> str:
    """The result's metrics as a Markdown table (percentages, 95% CI in brackets)."""
    ks = [f"pass@{k}" for k in result.k]
    head = ["group", "questions", *ks, "refusals", "no answer", "judged", "truncated"]
    lines = [
        f"### {result.benchmark} ({result.mode}) - {result.model.get('name')}",
        "",
        f"n={result.n}, temperature={result.temperature}, max_tokens={result.max_tokens}, "
        f"skipped={len(result.skipped)}; values in %, 95% bootstrap CI over questions.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for group, m in result.metrics.items():
        cells = [
            f"{percent(m.pass_at[k].value)} [{percent(m.pass_at[k].ci_low)}, {percent(m.pass_at[k].ci_high)}]"
            for k in ks
        ]
        lines.append(
            f"| {group} | {m.questions} | "
            + " | ".join(cells)
            + f" | {m.refusals}/{m.samples} | {m.no_answer} | {m.judged} | {m.truncated} |"
        )
    return "\n".join(lines) + "\n"


def load_result(path: str | Path) -> EvalResult:
    """An eval result JSON; a file that is not one is reported by name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"eval result not found: {path}")
    try:
        return EvalResult.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        where, message = first_error(exc)
        raise EvalError(f"{path} is not a finmbs eval result: {message} at {where or '(root)'}") from None
