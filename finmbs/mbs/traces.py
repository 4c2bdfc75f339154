"""Stage 1 (section 3.2): rejection-sampled teacher traces over the ordered teacher pool.

`stages.relabel` (off in the paper's configs) adds one step for teacher-written candidates only, never
for seeds: when no trace verifies the stated answer but every one of a teacher's Nt traces finished
and they all agree on another answer, the candidate takes that answer (small teachers state answers
their own worked solutions contradict; the agreeing traces are the better label). Agreement needs
`relabel_votes` traces: with fewer than that in Nt, the same teacher is sampled again (a trace that
then verifies the stated answer verifies it; one that disagrees or is cut off cancels the relabel),
since two traces of a small teacher can share one slip.
"""

from __future__ import annotations

import re

from finmbs.config import Endpoint
from finmbs.mbs.context import Context
from finmbs.mbs.novelty import same_answer
from finmbs.mbs.solve import rollouts
from finmbs.mbs.stages import Stage
from finmbs.records import ANSWERS, Problem, Rollout, Trace

_UNKNOWN = re.compile(r"(?<![A-Za-z\\])[A-Za-z](?![A-Za-z])")  # a lone letter: P in "0.0325P", x in "3x+2"


def closed_answer(answer: str) -> bool:
    """Whether `answer` is a closed value (holds a figure and no unknown): a trace that answers
    "0.0325P" has not solved the problem, however many traces agree on it."""
    return bool(re.search(r"\d", answer)) and not _UNKNOWN.search(re.sub(r"\\[A-Za-z]+", " ", answer))


def consensus(problem: Problem, samples: list[Rollout]) -> str | None:
    """The closed answer at least two samples, all finished, all agree on; None otherwise."""
    answers = [s.extracted_answer for s in samples]
    if len(samples) < 2 or any(s.finish_reason != "stop" for s in samples) or not all(answers):
        return None
    first = answers[0]
    agree = all(same_answer(problem.domain, first, a, problem.question) for a in answers[1:])  # type: ignore[arg-type]
    return first if agree and closed_answer(first) else None  # type: ignore[arg-type]


async def teacher_trace(
    ctx: Context, problem: Problem, teachers: list[Endpoint] | None = None, *, relabel: bool = False
) -> tuple[Trace | None, str]:
    """The first trace whose answer verifies, trying teachers in order, up to Nt samples each.

    Returns (trace, "") or (None, why) after |T| * Nt unverified attempts. With `relabel`, a teacher
    whose Nt traces all agree on another answer gives (trace of that answer, "relabeled: ...").
    """
    teachers = teachers or ctx.teachers
    seen: list[str] = []
    agreed: tuple[Endpoint, list[Rollout]] | None = None

    async def sample_trace(teacher: Endpoint, i: int) -> Rollout:
        [sample] = await rollouts(ctx, teacher, "teacher", problem, 1, first_index=i)
        ctx.tick(Stage.TRACES)
        seen.append(f"{teacher.name}#{i}: {sample.extracted_answer!r} ({sample.finish_reason})")
        return sample

    for teacher in teachers:
        samples: list[Rollout] = []
        for i in range(ctx.stages.Nt):
            sample = await sample_trace(teacher, i)
            if sample.reward == 1.0:
                return verified_trace(sample, teacher), ""
            samples.append(sample)
        if agreed is None and consensus(problem, samples):
            agreed = (teacher, samples)
    if relabel and agreed:
        teacher, samples = agreed
        for i in range(len(samples), ctx.stages.relabel_votes):  # more votes, while they keep agreeing
            sample = await sample_trace(teacher, i)
            if sample.reward == 1.0:
                return verified_trace(sample, teacher), ""
            samples.append(sample)
            if consensus(problem, samples) is None:
                break
        if answer := consensus(problem, samples):
            trace = Trace(text=samples[0].text, answer=answer, model=teacher.name, verified=True)
            return trace, (
                f"relabeled: stated answer {problem.answer!r}, all {len(samples)} traces of "
                f"{teacher.name} answer {answer!r}"
            )
    votes = len(seen) - len(teachers) * ctx.stages.Nt
    tries = f"{len(teachers)}x{ctx.stages.Nt}" + (f" (+{votes} relabel votes)" if votes else "")
    return None, f"no verified trace after {tries} tries{ANSWERS}" + ", ".join(seen)


def verified_trace(sample: Rollout, teacher: Endpoint) -> Trace:
    return Trace(text=sample.text, answer=sample.extracted_answer, model=teacher.name, verified=True)
