"""Rewards for trainers: veRL's `compute_score` / `compute_score_async` and TRL's `trl_reward`.

veRL (checked against 0.9.1, whose loader is `verl.utils.import_utils.load_extern_object`):

    reward.custom_reward_function.path=pkg://finmbs.reward reward.custom_reward_function.name=compute_score
    # veRL's async reward loop awaits a coroutine function directly: ...name=compute_score_async

TRL (GRPOTrainer, on a `finmbs export --format trl` dataset): `reward_funcs=finmbs.reward.trl_reward`.

Routing on `data_source`: `finmbs/math` and math benchmark names (math500, aime, amc, gsm8k, dapo...)
go to math-verify; `finmbs/finance`, financebench and secque go to the deterministic finance comparer,
and only where it is undecided and `FINMBS_REWARD_JUDGE_CONFIG` names a run config YAML, to that
config's judge (cached, counted). Without a judge an undecided answer scores 0.0. The deterministic
path makes no network call and does not import litellm.
"""

from __future__ import annotations

import asyncio
import os
import threading
from functools import lru_cache
from typing import Any

from finmbs.verify.extract import extract_final_answer
from finmbs.verify.finance import compare
from finmbs.verify.math import math_equal

JUDGE_CONFIG_ENV = "FINMBS_REWARD_JUDGE_CONFIG"
FINANCE_SOURCES = ("finance", "financebench", "secque")
MATH_SOURCES = ("math", "aime", "amc", "gsm8k", "dapo", "deepscaler", "olympiad", "minerva", "omni")


def domain_of(data_source: str) -> str:
    """ "finance" or "math" for a veRL data_source; ValueError for anything else."""
    name = str(data_source).lower()
    if any(s in name for s in FINANCE_SOURCES):
        return "finance"
    if any(s in name for s in MATH_SOURCES):
        return "math"
    raise ValueError(
        f"finmbs reward: unknown data_source {data_source!r} (expected finmbs/math, finmbs/finance, "
        "a math benchmark name, financebench or secque)"
    )


def _result(correct: bool, pred: str | None, decided_by: str) -> dict[str, Any]:
    return {"score": float(correct), "acc": bool(correct), "pred": pred or "", "decided_by": decided_by}


def _question(extra_info: Any) -> str | None:
    if isinstance(extra_info, dict):
        question = extra_info.get("question") or extra_info.get("problem")
        return str(question) if question else None
    return None


def score_deterministic(
    data_source: str, solution_str: str, ground_truth: str, question: str | None = None
) -> dict[str, Any]:
    """The reward without any LLM: math-verify or the finance comparer ("undecided" scores 0.0)."""
    pred = extract_final_answer(solution_str or "")
    if not pred:
        return _result(False, pred, "no_answer")
    if domain_of(data_source) == "math":
        return _result(math_equal(pred, str(ground_truth)), pred, "math")
    verdict = compare(pred, str(ground_truth), question=question).verdict
    return _result(verdict == "equal", pred, "comparer" if verdict != "undecided" else "undecided")


class _JudgeRunner:
    """The judge endpoint and gateway of a run config, driven on one background event loop."""

    def __init__(self, config_path: str):
        from finmbs.config import load_config
        from finmbs.llm import Gateway

        config = load_config(config_path)
        self.endpoint = config.roles.judge
        self.gateway = Gateway.from_config(config)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="finmbs-reward-judge", daemon=True).start()

    def judge_all(self, items: list[tuple[str | None, str, str]]) -> list[bool]:
        """Verdicts for (question, predicted, ground truth) triples, asked concurrently."""
        from finmbs.verify.judge import judge_equivalence

        async def run() -> list[bool]:
            verdicts = await asyncio.gather(
                *(
                    judge_equivalence(self.gateway, self.endpoint, question=q, predicted=p, ground_truth=g)
                    for q, p, g in items
                )
            )
            return [v.equal for v in verdicts]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()


@lru_cache(maxsize=4)
def _judge_runner(config_path: str) -> _JudgeRunner:
    return _JudgeRunner(config_path)


def judge_runner() -> _JudgeRunner | None:
    """The judge named by FINMBS_REWARD_JUDGE_CONFIG, or None when the variable is unset."""
    path = os.environ.get(JUDGE_CONFIG_ENV)
    return _judge_runner(path) if path else None


def compute_score_batch(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[str],
    extra_infos: list[Any] | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Scores for a batch; undecided finance answers go to the judge together (one call per batch)."""
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(data_sources)
    questions = [_question(e) for e in extra_infos]
    results = [
        score_deterministic(ds, sol, gt, q)
        for ds, sol, gt, q in zip(data_sources, solution_strs, ground_truths, questions)
    ]
    pending = [i for i, r in enumerate(results) if r["decided_by"] == "undecided"]
    runner = judge_runner() if pending else None
    if runner is not None:
        verdicts = runner.judge_all([(questions[i], results[i]["pred"], str(ground_truths[i])) for i in pending])
        for i, equal in zip(pending, verdicts):
            results[i] = _result(equal, results[i]["pred"], "judge")
    return results


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """One rollout's reward as veRL's custom reward function: {"score", "acc", "pred", "decided_by"}."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]


async def compute_score_async(
    data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """`compute_score` as a coroutine for veRL's async reward loop: the verifier runs in a worker thread, so the
    loop keeps scoring other rollouts meanwhile (math-verify and the judge both block)."""
    return await asyncio.to_thread(compute_score, data_source, solution_str, ground_truth, extra_info, **kwargs)


def completion_text(completion: Any) -> str:
    """A TRL completion as text: a plain string, or (conversational) the content of its last message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    messages = list(completion or [])
    return completion_text(messages[-1]) if messages else ""


def trl_reward(
    completions: list[Any],
    answer: list[str],
    data_source: list[str] | None = None,
    question: list[str | None] | None = None,
    log_extra: Any = None,
    **kwargs: Any,
) -> list[float]:
    """TRL GRPOTrainer reward: one float per completion, 1.0 when its final answer matches `answer`.

    GRPOTrainer passes the dataset's other columns (`answer`, `data_source`, `question`, ... of a
    `finmbs export --format trl` dataset) as keyword lists aligned with `completions`; prompts, completion
    ids and trainer state arrive in `kwargs` and are not needed. Without `data_source` an answer is
    checked as math. When TRL passes `log_extra`, the extracted answer and who decided are logged
    beside each completion.
    """
    sources = data_source or ["finmbs/math"] * len(completions)
    questions = question or [None] * len(completions)
    results = compute_score_batch(
        list(sources),
        [completion_text(c) for c in completions],
        [str(a) for a in answer],
        [{"question": q} for q in questions],
    )
    if callable(log_extra):
        log_extra("finmbs_pred", [r["pred"] for r in results])
        log_extra("finmbs_decided_by", [r["decided_by"] for r in results])
    return [float(r["score"]) for r in results]
