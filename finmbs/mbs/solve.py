"""Sampling solutions and measuring accuracy: plain solving and solving conditioned on worked examples."""

from __future__ import annotations

from finmbs.config import Endpoint
from finmbs.mbs.context import Context
from finmbs.mbs.stages import Progress
from finmbs.records import Problem, Rollout
from finmbs.resources import render_prompt
from finmbs.verify import verify_response


def document_block(problem: Problem) -> str:
    """The `{{document}}` slot: the snippet in finance, empty in math."""
    return render_prompt("document", text=problem.snippet.text) if problem.snippet else ""


def worked_examples(examples: list[tuple[Problem, str]]) -> str:
    """Worked examples (problem, solution text) as prompt blocks."""
    return "\n".join(
        render_prompt("worked_example", question=p.question, solution=solution, answer=p.answer)
        for p, solution in examples
    )


# a base model (chat: false) continues a few-shot transcript and stops before the next problem
COMPLETION_STOP = ["\nProblem:"]
CALIBRATE_PURPOSE = "calibrate"  # the gateway's sampling namespace of final calibration: fresh draws


def calibration_purpose(purpose: str | None) -> bool:
    """Whether `purpose` names a calibration's draws (final calibration, or a re-screen of it such as
    `finmbs requalify`'s "calibrate/requalify..."): asked with the training prompt."""
    return purpose is not None and (purpose == CALIBRATE_PURPOSE or purpose.startswith(CALIBRATE_PURPOSE + "/"))


def train_prompt(problem: Problem) -> str:
    """The prompt a problem is trained on (`finmbs export`) and calibrated with, so the band measured
    is the band the policy meets in training; a finance problem carries its snippet inside it."""
    if problem.domain == "finance":
        if problem.snippet is None:
            raise ValueError(f"finance problem {problem.id} has no snippet: p = (q, d) needs d")
        return render_prompt("train_prompt_finance", question=problem.question, snippet=problem.snippet.text)
    return render_prompt("train_prompt_math", question=problem.question)


def solve_request(
    endpoint: Endpoint, problem: Problem, examples: list[tuple[Problem, str]] | None = None, *, train: bool = False
) -> dict:
    """The request that asks for a worked solution, conditioned on worked examples when given:
    chat messages (`train`: the training prompt), or for a base model a few-shot completion prompt
    with the examples as shots."""
    document = document_block(problem)
    if train and endpoint.chat:
        return {"messages": [{"role": "user", "content": train_prompt(problem)}]}
    if not endpoint.chat:
        shots = "".join(
            render_prompt("completion/example", question=p.question, solution=s, answer=p.answer)
            for p, s in examples or []
        )
        prompt = render_prompt("completion/solve", examples=shots, document=document, question=problem.question)
        return {"prompt": prompt, "stop": COMPLETION_STOP}
    if examples:
        text = render_prompt(
            "solve_conditioned", document=document, examples=worked_examples(examples), question=problem.question
        )
    else:
        text = render_prompt("solve", document=document, question=problem.question)
    return {"messages": [{"role": "user", "content": text}]}


async def rollouts(
    ctx: Context,
    endpoint: Endpoint,
    role: str,
    problem: Problem,
    n: int,
    *,
    examples: list[tuple[Problem, str]] | None = None,
    first_index: int = 0,
    max_tokens: int | None = None,
    purpose: str | None = None,
) -> list[Rollout]:
    """n sampled solutions of `problem`, each verified against its answer. `purpose` (final calibration)
    draws them apart from every other purpose's samples and asks with the training prompt."""
    samples = await ctx.gateway.generate(
        endpoint,
        role=role,
        n=n,
        first_index=first_index,
        max_tokens=max_tokens,
        purpose=purpose,
        **solve_request(endpoint, problem, examples, train=calibration_purpose(purpose)),
    )
    result = []
    for sample in samples:
        check = await verify_response(
            problem.domain,
            sample.text,
            problem.answer,
            question=problem.question,
            gateway=ctx.gateway,
            judge=ctx.config.roles.judge,
            math_judge=ctx.config.verify.math_judge,
        )
        result.append(
            Rollout(
                text=sample.text,
                extracted_answer=check.extracted,
                reward=float(check.correct),
                finish_reason=sample.finish_reason if sample.finish_reason in ("stop", "length") else "other",
                completion_tokens=sample.completion_tokens,
                model=endpoint.name,
            )
        )
    return result


def accuracy(samples: list[Rollout]) -> float:
    return sum(r.reward for r in samples) / len(samples) if samples else 0.0


async def student_accuracy(
    ctx: Context, student: Endpoint, problem: Problem, examples: list[tuple[Problem, str]] | None = None
) -> float:
    """acc(S, p) over N samples, or acc_cond(S, p | examples) when examples are given."""
    ctx.tick(Progress.STUDENTS)
    return accuracy(await rollouts(ctx, student, "student", problem, ctx.stages.N, examples=examples))
