"""Stage 1 (section 3.2): rejection-sampled teacher traces over the ordered teacher pool."""

from __future__ import annotations

from finmbs.config import Endpoint
from finmbs.mbs.context import Context
from finmbs.mbs.solve import rollouts
from finmbs.records import Problem, Trace


async def teacher_trace(
    ctx: Context, problem: Problem, teachers: list[Endpoint] | None = None
) -> tuple[Trace | None, str]:
    """The first trace whose answer verifies, trying teachers in order, up to Nt samples each.

    Returns (trace, "") or (None, why) after |T| * Nt unverified attempts.
    """
    teachers = teachers or ctx.teachers
    seen: list[str] = []
    for teacher in teachers:
        for i in range(ctx.stages.Nt):
            [sample] = await rollouts(ctx, teacher, "teacher", problem, 1, first_index=i)
            ctx.tick("traces")
            if sample.reward == 1.0:
                return Trace(text=sample.text, answer=sample.extracted_answer, model=teacher.name, verified=True), ""
            seen.append(f"{teacher.name}#{i}: {sample.extracted_answer!r} ({sample.finish_reason})")
    return None, f"no verified trace after {len(teachers)}x{ctx.stages.Nt} tries; answers: " + ", ".join(seen)
