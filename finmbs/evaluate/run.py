"""`finmbs eval`: sample every question n times, grade each sample, report pass@k overall and per type."""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from pydantic import Field

from finmbs.config import Endpoint, RunConfig, check_endpoints
from finmbs.evaluate import EvalError
from finmbs.evaluate.benchmarks import Benchmark, Mode
from finmbs.evaluate.contexts import Retriever, SkipItem, build_prompt, index_retriever
from finmbs.evaluate.grading import grade_samples
from finmbs.evaluate.loaders import EvalItem, Skipped, load_items
from finmbs.evaluate.results import EvalResult, QuestionResult, SampleLog, markdown_table, metrics_by_type
from finmbs.evaluate.sampling import sample_responses
from finmbs.executors import Executor, Tick
from finmbs.executors.local import LocalExecutor
from finmbs.llm import BudgetExceeded, Gateway, GatewayError
from finmbs.records import Record
from finmbs.runs import atomic_write_json, atomic_write_text, safe_name


class EvalSettings(Record):
    """How one benchmark is run: mode, sampling, k, which questions, where the data lies."""

    mode: Mode
    n: int = Field(ge=1)
    temperature: float = Field(ge=0)
    max_tokens: int = Field(ge=1)
    k: list[int]
    limit: int | float | None = Field(None, gt=0)
    seed: int = Field(0, ge=0)
    system_prompt: str | None = None
    data: str | None = None
    pdf_dir: str | None = None
    retrieval_k: int = Field(5, ge=1)
    concurrency: int = Field(32, ge=1)


def check_settings(bench: Benchmark, settings: EvalSettings) -> None:
    """Reject a mode the benchmark lacks and any k above n, before a single call is made."""
    if settings.mode not in bench.modes:
        raise EvalError(f"benchmark {bench.name} has modes {', '.join(bench.modes)}, not '{settings.mode}'")
    if isinstance(settings.limit, float) and settings.limit > 1:
        raise EvalError(f"--limit {settings.limit}: a fraction must be within (0, 1], a count a whole number")
    too_big = [k for k in settings.k if not 1 <= k <= settings.n]
    if too_big:
        raise EvalError(f"pass@k needs 1 <= k <= n: k={too_big} with n={settings.n} samples per question")


async def evaluate_item(
    bench: Benchmark,
    item: EvalItem,
    settings: EvalSettings,
    gateway: Gateway,
    policy: Endpoint,
    judge: Endpoint | None,
    retriever: Retriever | None,
) -> QuestionResult:
    """Sample one question n times and grade every sample (raises SkipItem when it cannot be asked)."""
    prompt = build_prompt(
        bench, item, settings.mode, pdf_dir=Path(settings.pdf_dir) if settings.pdf_dir else None, retriever=retriever
    )
    messages = chat_messages(prompt, settings.system_prompt)
    samples = await sample_responses(
        gateway,
        policy,
        messages,
        n=settings.n,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        first_index=settings.seed * settings.n,
    )
    grades = await grade_samples(item, samples, gateway, judge)
    logs = [
        SampleLog.of(item.id, index, messages, sample, grade)
        for index, (sample, grade) in enumerate(zip(samples, grades))
    ]
    found = retriever.found_evidence(item) if hasattr(retriever, "found_evidence") else None
    return QuestionResult(
        id=item.id,
        question_type=item.question_type,
        answer=item.answer,
        samples=grades,
        logs=logs,
        evidence_retrieved=found,
    )


def chat_messages(prompt: str, system_prompt: str | None) -> list[dict[str, str]]:
    """The user prompt, after the system prompt when one is given."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": prompt}]


def limit_count(limit: int | float | None, total: int) -> int:
    """How many questions `--limit` keeps: a count, or a fraction of the total (rounded up)."""
    if limit is None:
        return total
    if isinstance(limit, float):
        return min(total, math.ceil(limit * total))
    return min(total, limit)


async def evaluate_work(
    item: EvalItem,
    gateway: Gateway,
    tick: Tick,
    *,
    bench: Benchmark,
    settings: EvalSettings,
    policy: Endpoint,
    judge: Endpoint | None,
    retriever: Retriever | None,
) -> QuestionResult | Skipped:
    """One question as a unit of executor work; a question that fails is skipped with its reason."""
    try:
        return await evaluate_item(bench, item, settings, gateway, policy, judge, retriever)
    except SkipItem as exc:
        return Skipped(id=item.id, reason=str(exc))
    except BudgetExceeded:
        raise
    except GatewayError as exc:
        return Skipped(id=item.id, reason=f"model call failed: {exc}")


async def evaluate(
    bench: Benchmark,
    items: list[EvalItem],
    settings: EvalSettings,
    executor: Executor,
    policy: Endpoint,
    judge: Endpoint | None,
    retriever: Retriever | None = None,
    on_done: Callable[[], None] | None = None,
) -> tuple[list[QuestionResult], list[Skipped]]:
    """All questions, a bounded number at a time per worker of `executor`, results in question order."""
    outcomes: dict[int, QuestionResult | Skipped] = {}

    def done(item: EvalItem, outcome: QuestionResult | Skipped) -> None:
        outcomes[id(item)] = outcome
        if on_done:
            on_done()

    work = partial(evaluate_work, bench=bench, settings=settings, policy=policy, judge=judge, retriever=retriever)
    await executor.map(work, items, concurrency=settings.concurrency, on_result=done)
    ordered = [outcomes[id(item)] for item in items]
    return [o for o in ordered if isinstance(o, QuestionResult)], [o for o in ordered if isinstance(o, Skipped)]


def endpoint_summary(endpoint: Endpoint) -> dict[str, object]:
    return {"name": endpoint.name, "model": endpoint.model, "api_base": endpoint.api_base}


def run_eval(
    bench: Benchmark,
    settings: EvalSettings,
    config: RunConfig,
    policy: Endpoint,
    judge: Endpoint | None,
    progress: Callable[[int], Callable[[], None]] | None = None,
    executor: Executor | None = None,
) -> EvalResult:
    """Load, sample, grade and summarize one benchmark; `progress(total)` returns a per-question tick.

    Questions run on `executor` (default: this process); retrieval mode needs this process's index.
    """
    check_settings(bench, settings)
    check_endpoints([("policy", policy), *([("judge", judge)] if judge else [])])
    if settings.mode == "retrieval" and executor is not None and not executor.in_process:
        raise EvalError("retrieval mode reads the index in this process: run it with --executor local")
    items, skipped = load_items(bench, Path(settings.data) if settings.data else None)
    items = items[: limit_count(settings.limit, len(items))]
    retrieval = index_retriever(config.index, settings.retrieval_k) if settings.mode == "retrieval" else nullcontext()
    own = executor is None
    executor = executor or LocalExecutor(Gateway.from_config(config), own_gateway=True)
    start = time.monotonic()
    try:
        with retrieval as retriever:
            tick = progress(len(items)) if progress else None
            questions, failed = asyncio.run(evaluate(bench, items, settings, executor, policy, judge, retriever, tick))
    finally:
        if own:
            executor.close()
    skipped += failed
    if not questions:
        reasons = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:3])
        raise EvalError(f"no question of {bench.name} could be evaluated ({len(skipped)} skipped: {reasons})")
    return EvalResult(
        benchmark=bench.name,
        domain=bench.domain,
        mode=settings.mode,
        model=endpoint_summary(policy),
        judge=endpoint_summary(judge) if judge else None,
        n=settings.n,
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        k=settings.k,
        data=settings.data or f"hub:{bench.hub}",
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        settings=settings.model_dump(),
        wall_time_s=round(time.monotonic() - start, 3),
        usage=executor.usage,
        skipped=skipped,
        metrics=metrics_by_type(questions, settings.k),
        questions=questions,
    )


def settings_stem(benchmark: str, model_name: str, settings: EvalSettings) -> str:
    """BENCH-MODE-MODEL-nN-tT-LMAX[-limitX][-seedS][-sysHASH]: results of other settings never share a name."""
    parts = [
        benchmark,
        settings.mode,
        safe_name(model_name),
        f"n{settings.n}",
        f"t{settings.temperature:g}",
        f"L{settings.max_tokens}",
    ]
    if settings.limit is not None:
        parts.append(f"limit{settings.limit:g}")
    if settings.seed:
        parts.append(f"seed{settings.seed}")
    if settings.system_prompt:
        parts.append("sys" + hashlib.sha256(settings.system_prompt.encode("utf-8")).hexdigest()[:8])
    return "-".join(parts)


def result_path(out: Path, benchmark: str, model_name: str, settings: EvalSettings) -> Path:
    """`out` itself when it names a .json file, else OUT/<settings_stem>.json."""
    if out.suffix == ".json":
        return out
    return out / f"{settings_stem(benchmark, model_name, settings)}.json"


def result_files(json_path: Path) -> tuple[Path, Path, Path]:
    """The result JSON, its Markdown table and its per-sample log (JSONL) side by side."""
    return json_path, json_path.with_suffix(".md"), json_path.with_suffix(".samples.jsonl")


def refuse_overwrite(json_path: Path, overwrite: bool) -> None:
    """Stop before any model call when a result of these settings exists and --overwrite was not given."""
    existing = [path for path in result_files(json_path) if path.exists()]
    if existing and not overwrite:
        raise EvalError(
            f"{existing[0]} exists: results are never replaced silently; pass --overwrite to "
            "replace it (finished samples come from the cache), or choose another --out"
        )


def write_result(result: EvalResult, json_path: Path) -> tuple[Path, Path, Path]:
    """The result as JSON, a Markdown table and the per-sample JSONL log beside it (all atomic)."""
    json_path, md_path, log_path = result_files(json_path)
    atomic_write_json(json_path, result)
    atomic_write_text(md_path, markdown_table(result))
    atomic_write_text(log_path, "".join(log.model_dump_json() + "\n" for q in result.questions for log in q.logs))
    return json_path, md_path, log_path
