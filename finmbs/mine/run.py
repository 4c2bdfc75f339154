"""The mining run: the index's documents mined concurrently into a resumable run folder, like `grow`
(one gateway and its response cache, the token budget over every run on the folder, the folder lock,
done markers, metrics), and the seeds file rewritten after every finished document.

    RUN/
      config.yaml           resolved run config; options.json: per-document count, types, --hard-only
      documents/DOC.json    one finished document: kept seeds, rejected candidates, tokens (atomic)
      done/DOC              marker: the document is finished; a rerun skips it
      rejected.jsonl        every rejected candidate with stage "mine", reason and data.check
      metrics.json          MineMetrics.summary()
      usage.jsonl, .lock    as in a grow run folder (`finmbs.runs`)

A killed run resumes: finished documents are skipped, unfinished ones replay from the response cache.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import Field

from finmbs.config import ConfigError, IndexSettings, RunConfig
from finmbs.errors import FinmbsError
from finmbs.executors import Tick, no_tick
from finmbs.executors.local import first_failure
from finmbs.export.decontaminate import Decontaminator, load_eval_sets
from finmbs.ingest.index import Index, shared_index
from finmbs.ingest.query import company_key
from finmbs.ingest.store import store_url
from finmbs.llm import Gateway
from finmbs.llm.gateway import budget_check
from finmbs.mbs.context import TARGET_ROLE, Context
from finmbs.mine.company import document_company
from finmbs.mine.from_facts import mine_facts_document
from finmbs.mine.passages import TYPES, plan
from finmbs.mine.questions import DocumentMiner, DocumentOutcome, Options, seed_row
from finmbs.records import Document, Record, RoleUsage, merge_usage
from finmbs.runs.folder import (
    METRICS,
    REJECTED,
    USAGE,
    JsonlLog,
    RunDir,
    UsageLedger,
    atomic_write_json,
    atomic_write_text,
    file_name,
)
from finmbs.runs.grow import previous_totals, record_config, sigterm_as_interrupt, spent
from finmbs.runs.metrics import add_stage_usage

OPTIONS = "options.json"
DOCUMENTS = "documents"


class MineError(FinmbsError, ValueError):
    """Bad input to a mining run (no index, no documents, an unknown document), in one line."""


class MineMetrics(Record):
    """What a mining run found and what it cost."""

    documents: int = 0
    documents_done: int = 0
    documents_without_passage: int = 0
    passages: int = 0
    candidates: int = 0
    candidates_by_type: dict[str, int] = Field(default_factory=dict)
    kept: int = 0
    kept_by_type: dict[str, int] = Field(default_factory=dict)
    kept_by_document: dict[str, int] = Field(default_factory=dict)
    rejected_by_check: dict[str, int] = Field(default_factory=dict)
    calibrated: int = 0  # questions measured against the target (kept, and with --hard-only the solved ones)
    hard: int = 0  # of those, the ones the target never solved (0 of N)
    target: str = ""
    construction_tokens: int = 0  # every role but the target's calibration
    tokens: int = 0
    stages: dict[str, dict[str, float]] = Field(default_factory=dict)
    usage: dict[str, RoleUsage] = Field(default_factory=dict)
    wall_time_s: float = 0.0

    @property
    def hard_share(self) -> float:
        return self.hard / self.calibrated if self.calibrated else 0.0

    def summary(self) -> dict[str, Any]:
        data = self.model_dump()
        data.update(
            hard_share=self.hard_share,
            tokens_per_kept=self.tokens / self.kept if self.kept else None,
            seconds_per_kept=self.wall_time_s / self.kept if self.kept else None,
        )
        return data


def open_documents(index: Index, settings: IndexSettings, documents: list[str], companies: list[str]) -> list[Document]:
    """The documents to mine: all of the index, or those named (doc id, file name or file stem) or of the
    companies named; one MineError for an empty index or a name that matches nothing."""
    where = store_url(settings) or settings.path
    found = sorted(index.documents(), key=lambda d: d.doc_id)
    if not found:
        raise MineError(f"the index at {where} holds no documents: run `finmbs ingest PATH --index-path {where}` first")
    chosen = found
    if documents:

        def names(doc: Document) -> set[str]:
            path = Path(doc.source_path)
            return {doc.doc_id, path.name, path.stem}

        unknown = [d for d in documents if not any(d in names(doc) for doc in found)]
        if unknown:
            raise MineError(
                f"document(s) not in the index at {where}: {', '.join(unknown)} "
                f"(it holds: {', '.join(d.doc_id for d in found[:20])}{' ...' if len(found) > 20 else ''})"
            )
        chosen = [doc for doc in chosen if names(doc) & set(documents)]
    if companies:
        keys = {company_key(c) for c in companies}
        named = {d.doc_id: document_company(d, index.document_text(d.doc_id)) for d in found}
        present = {company_key(c) for c in named.values()}
        unknown = [c for c in companies if company_key(c) not in present]
        if unknown:
            known = sorted(filter(None, set(named.values())))
            raise MineError(
                f"no document of {', '.join(unknown)} in the index at {where} (companies: {', '.join(known)})"
            )
        chosen = [doc for doc in chosen if company_key(named[doc.doc_id]) in keys]
    return chosen


def check_index(settings: IndexSettings) -> None:
    """One MineError when the embedded index folder does not exist (a server index is checked by its documents)."""
    if not store_url(settings) and not Path(settings.path).is_dir():
        raise MineError(
            f"index not found at {settings.path}: run `finmbs ingest PATH --index-path {settings.path}` "
            "first, or point --index-path at the index"
        )


def record_options(run: RunDir, options: Options) -> None:
    """Write options.json; a rerun on the folder asking for other questions is refused."""
    path = run.path(OPTIONS)
    new = options.model_dump(mode="json")
    if path.exists():
        old = Options.model_validate(json.loads(path.read_text(encoding="utf-8"))).model_dump(
            mode="json"
        )  # defaults filled
        if old != new:
            changed = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in new if old.get(k) != new.get(k))
            raise ConfigError(
                f"{run.root} was mined with other options ({changed}): use a new --run-dir, or the same options"
            )
    atomic_write_json(path, new)


def outcome_path(run: RunDir, doc_id: str) -> Path:
    return run.root / DOCUMENTS / f"{file_name(doc_id)}.json"


def collect_metrics(outcomes: list[DocumentOutcome], documents: int, target: str) -> MineMetrics:
    metrics = MineMetrics(documents=documents, documents_done=len(outcomes), target=target)
    candidates, kept_types, checks = Counter[str](), Counter[str](), Counter[str]()
    for outcome in outcomes:
        metrics.passages += outcome.passages
        candidates.update(outcome.candidates)
        kept_types.update(p.meta.get("type", "") for p in outcome.kept)
        checks.update(r.data.get("check", "") for r in outcome.rejected)
        metrics.documents_without_passage += any(r.data.get("check") == "no_passage" for r in outcome.rejected)
        metrics.kept_by_document[outcome.doc_id] = len(outcome.kept)
        measured = [p.meta["measured"] for p in outcome.kept if "measured" in p.meta]
        measured += [r.problem.meta["measured"] for r in outcome.rejected if r.data.get("check") == "not_hard"]
        metrics.calibrated += len(measured)
        metrics.hard += sum(m["k"] == 0 for m in measured)
        metrics.construction_tokens += sum(n for role, n in outcome.tokens.items() if role != TARGET_ROLE)
        metrics.tokens += sum(outcome.tokens.values())
        add_stage_usage(metrics.stages, outcome.stages)
    metrics.candidates, metrics.kept = sum(candidates.values()), sum(kept_types.values())
    metrics.candidates_by_type, metrics.kept_by_type = dict(candidates), dict(kept_types)
    metrics.rejected_by_check = dict(checks.most_common())
    return metrics


async def mine_document(
    ctx: Context,
    index: Index,
    doc: Document,
    options: Options,
    decontaminator: Decontaminator | None,
    position: int = 0,
) -> DocumentOutcome:
    """One document end to end: plan its passages, then ask, check and calibrate its questions (the
    document at `position` of the run starts its turn of question types there)."""
    ctx = ctx.for_seed()
    start = time.monotonic()
    text, chunks = index.document_text(doc.doc_id), index.chunks(doc.doc_id)
    if ctx.config.mine.from_facts:  # finmbs's: the engine chooses the facts and the operation (mine/facts.py)
        outcome = await mine_facts_document(ctx, index, doc, text, chunks, options, decontaminator)
    else:
        planned = plan(doc, text, chunks, options.per_document, options.types, first=position * options.per_document)
        outcome = await DocumentMiner(ctx, doc, text, chunks, options, decontaminator).mine(planned)
    outcome.seconds = round(time.monotonic() - start, 3)
    return outcome


def write_seeds(out: Path, outcomes: list[DocumentOutcome]) -> int:
    """The seeds file (replaced atomically): every kept question of the finished documents, in document order."""
    rows = [seed_row(p) for o in outcomes for p in o.kept]
    atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


async def run_mine(
    config: RunConfig,
    options: Options,
    out: str | Path,
    run_dir: str | Path,
    *,
    documents: list[str] | None = None,
    companies: list[str] | None = None,
    eval_data: list[Path] | None = None,
    tick: Tick = no_tick,
    gateway: Gateway | None = None,
    allow_config_change: bool = False,
    on_start: Any = None,
) -> MineMetrics:
    """Mine every unfinished selected document into `run_dir`, write the seeds file `out`; the run's metrics.

    `eval_data`: evaluation sets a question must not overlap (export's n-gram decontamination); none
    given, no check. `on_start(total)` is told how many documents the run covers before any call.
    """
    unknown = sorted(set(options.types) - set(TYPES))
    if unknown:
        raise MineError(f"unknown question type(s) {unknown}: choose from {', '.join(TYPES)}")
    check_index(config.index)
    config.check_environment()
    out = Path(out)
    with RunDir(run_dir) as run:
        record_config(run, config, allow_config_change)
        record_options(run, options)
        eval_sets = load_eval_sets(eval_data) if eval_data else {}
        decontaminator = Decontaminator(eval_sets, seeds=[]) if eval_sets else None
        with shared_index(config.index) as index:
            chosen = open_documents(index, config.index, documents or [], companies or [])
            if on_start is not None:
                on_start(len(chosen))
            return await _mine_locked(run, config, options, out, index, chosen, decontaminator, tick, gateway)


async def _mine_locked(
    run: RunDir,
    config: RunConfig,
    options: Options,
    out: Path,
    index: Index,
    chosen: list[Document],
    decontaminator: Decontaminator | None,
    tick: Tick,
    gateway: Gateway | None,
) -> MineMetrics:
    ledger = UsageLedger(run.path(USAGE))
    usage_before, wall_before, _ = previous_totals(run, ledger)
    budget_check(config.budget, *spent(usage_before))
    own_gateway = gateway is None
    gateway = gateway or Gateway.from_config(config)
    gateway.spent_before = spent(usage_before)
    gateway.on_usage = lambda: ledger.write(gateway.usage)
    ctx = Context(config=config, gateway=gateway, tick=tick)
    rejected = JsonlLog(run.path(REJECTED), key="problem.id")
    done: dict[str, DocumentOutcome] = {}
    for doc in chosen:
        path = outcome_path(run, doc.doc_id)
        if run.is_done(doc.doc_id) and path.exists():
            done[doc.doc_id] = DocumentOutcome.model_validate_json(path.read_text(encoding="utf-8"))
    tick("documents", len(done))
    start = time.monotonic()

    def write_all() -> MineMetrics:
        outcomes = [done[d.doc_id] for d in chosen if d.doc_id in done]
        write_seeds(out, outcomes)
        metrics = collect_metrics(outcomes, len(chosen), config.roles.target.name)
        metrics.usage = merge_usage(usage_before, gateway.usage)
        metrics.wall_time_s = wall_before + time.monotonic() - start
        atomic_write_json(run.path(METRICS), metrics.summary())
        return metrics

    gate = asyncio.Semaphore(config.seed_concurrency)

    async def one(position: int, doc: Document) -> None:
        async with gate:
            outcome = await mine_document(ctx, index, doc, options, decontaminator, position)
        atomic_write_json(outcome_path(run, doc.doc_id), outcome)
        rejected.append(outcome.rejected)
        run.mark_done(doc.doc_id)
        done[doc.doc_id] = outcome
        ledger.write(gateway.usage)
        write_all()
        tick("kept", len(outcome.kept))
        tick("documents")

    try:
        with sigterm_as_interrupt(gateway):
            await first_failure([one(i, doc) for i, doc in enumerate(chosen) if doc.doc_id not in done])
    finally:
        ledger.write(gateway.usage)
        gateway.on_usage = None
        metrics = write_all()
        if own_gateway:
            gateway.close()
    return metrics
