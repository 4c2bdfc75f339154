"""What every stage shares: the run config, the gateway, progress, and a per-seed ledger of rejections
(with the counts metrics.json reports) and meter of tokens."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from finmbs.config import Endpoint, RunConfig, StageParams
from finmbs.executors import Tick, no_tick
from finmbs.llm import Gateway
from finmbs.mbs.stages import Check, Stage
from finmbs.records import Decision, DecompositionTree, Problem, Rejection, SeedCounts, TreeNode
from finmbs.resources import render_prompt

TARGET_ROLE = "target"
OTHER_STAGE = Stage.OTHER
SECONDS = "model_seconds"
# the teacher prompts with appendix E's wording in prompts/paper/ (stages.prompts: paper)
PAPER_PROMPTS = frozenset({"decompose", "leaf_harder", "compose_parent", "direct_synthesis"})
CURRENT_STAGE: ContextVar[str | None] = ContextVar("finmbs_stage", default=None)


@contextmanager
def in_stage(name: Stage) -> Iterator[None]:
    """Account the model calls made inside (tasks started inside too) to stage `name`; an enclosing
    stage keeps them (a decomposition child's trace counts to the decomposition, not to traces)."""
    if CURRENT_STAGE.get() is not None:
        yield
        return
    token = CURRENT_STAGE.set(name)
    try:
        yield
    finally:
        CURRENT_STAGE.reset(token)


class SeedGateway:
    """The run's gateway as one seed sees it: every call passes through, and its tokens (the prompt
    once, every sample's completion) are counted per role; cached samples count too, so the count is
    what constructing this seed's problems costs whether or not a cache saved the calls. Per stage
    (`in_stage`) it also counts requests, tokens and seconds spent waiting on the model (concurrent
    requests overlap, so a stage's seconds can exceed its wall time)."""

    def __init__(self, gateway: Gateway):
        self.inner = gateway
        self.tokens: Counter[str] = Counter()
        self.stages: dict[str, Counter[str]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def generate(self, endpoint: Endpoint, *, role: str, **request: Any) -> list:
        start = time.monotonic()
        samples = await self.inner.generate(endpoint, role=role, **request)
        prompt = max((s.prompt_tokens for s in samples), default=0)  # one request: its prompt counts once
        tokens = prompt + sum(s.completion_tokens for s in samples)
        self.tokens[role] += tokens
        stage = self.stages.setdefault(CURRENT_STAGE.get() or OTHER_STAGE, Counter())
        stage.update({"requests": 1, "tokens": tokens, SECONDS: time.monotonic() - start})
        return samples

    structured = Gateway.structured  # its generate calls come back through this meter


@dataclass
class Context:
    """Shared by all seeds of a run: config, the one gateway, and a progress callback `tick(stage)`."""

    config: RunConfig
    gateway: Gateway
    tick: Tick = no_tick
    excluded_documents: frozenset[str] = frozenset()  # never re-grounded on: other seeds', held-out ones
    peers: tuple[Problem, ...] = ()  # the run's seeds in order (the engine's `chained` operator draws on them)

    @property
    def stages(self) -> StageParams:
        return self.config.stages

    @property
    def teachers(self) -> list[Endpoint]:
        return self.config.roles.teachers

    @property
    def students(self) -> list[Endpoint]:
        """Strongest first (S1..SJ)."""
        return self.config.roles.students

    @property
    def weakest(self) -> Endpoint:
        return self.config.roles.students[-1]

    def prompt(self, name: str, **fields: object) -> str:
        """Prompt `name` filled: appendix E's verbatim template (prompts/paper/) with `stages.prompts: paper`
        where there is one, else finmbs's."""
        paper = self.stages.prompts == "paper" and name in PAPER_PROMPTS
        return render_prompt(f"paper/{name}" if paper else name, **fields)

    def for_seed(self) -> Context:
        """This context with a fresh per-seed token meter on its gateway."""
        inner = self.gateway.inner if isinstance(self.gateway, SeedGateway) else self.gateway
        return Context(
            config=self.config,
            gateway=SeedGateway(inner),
            tick=self.tick,  # type: ignore[arg-type]
            excluded_documents=self.excluded_documents,
            peers=self.peers,
        )

    def tokens(self) -> dict[str, int]:
        """Tokens per role spent through this context's meter (empty without one)."""
        return dict(self.gateway.tokens) if isinstance(self.gateway, SeedGateway) else {}

    def stage_usage(self) -> dict[str, dict[str, float]]:
        """Requests, tokens and model seconds per stage spent through this context's meter."""
        if not isinstance(self.gateway, SeedGateway):
            return {}
        return {stage: {k: round(v, 3) for k, v in c.items()} for stage, c in self.gateway.stages.items()}

    def construction_tokens(self) -> int:
        """Tokens spent constructing problems: every role but the target policy's calibration."""
        return sum(n for role, n in self.tokens().items() if role != TARGET_ROLE)


def decomposition_attempts(node: TreeNode) -> list[Decision]:
    """The node's decomposition proposals, one decision each ("accepted" for an effective one)."""
    return [d for d in node.decisions if d.stage == Stage.DECOMPOSE and "attempt" in d.data]


def leak_form(reason: str) -> str:
    """The form of an answer leak recorded before rejections carried `data.form` (rejected.jsonl rows of
    older runs, replayed), read from the reason `novelty.revealing` wrote."""
    return "question" if "its question states" in reason else "solution" if "worked solution" in reason else "answer"


@dataclass
class Ledger:
    """One seed's record of every candidate that did not make it, with stage and reason, and the counts
    metrics.json reports, kept as the rejections happen. A problem counts once, by its first rejection
    (`first`), as rejected.jsonl keeps one row per problem."""

    seed_id: str
    rejected: list[Rejection] = field(default_factory=list)
    counts: SeedCounts = field(default_factory=SeedCounts)
    first: dict[str, Rejection] = field(default_factory=dict)

    def reject(self, problem: Problem, stage: Stage, reason: str, **data: Any) -> None:
        rejection = Rejection(problem=problem, stage=stage, reason=reason, data=data)
        self.rejected.append(rejection)
        if problem.id in self.first:
            return
        self.first[problem.id] = rejection
        check, counts = data.get("check"), self.counts
        if stage == Stage.DECOMPOSE and check == Check.ANSWER_LEAK:
            counts.answer_leaks += 1
            form = data.get("form") or leak_form(reason)
            setattr(counts, f"leaks_by_{form}", getattr(counts, f"leaks_by_{form}") + 1)
        counts.novelty_rejected += stage == Stage.NOVELTY
        counts.not_well_posed += stage == Stage.QUALITY
        counts.reground_unverified += stage == Stage.REGROUND and check == Check.VERIFY
        counts.reground_too_easy += stage == Stage.REGROUND and check == Check.SCREEN
        counts.program_rejected += check == Check.PROGRAM
        counts.same_structure += check == Check.STRUCTURE

    def mark_roots(self, since: int, roots: set[str] | None = None) -> None:
        """Mark the rejections recorded since `since` with `data.root`: whether each was a synthetic root
        (in `roots`; every one when None). The rates count a root the novelty guard or quality control
        rejects among the candidates (`gated_roots`)."""
        for rejection in self.rejected[since:]:
            root = rejection.data["root"] = roots is None or rejection.problem.id in roots
            counted = self.first.get(rejection.problem.id) is rejection
            if root and counted and rejection.stage in (Stage.NOVELTY, Stage.QUALITY):
                self.counts.gated_roots += 1

    def count_decompositions(self, tree: DecompositionTree | None) -> None:
        """Count the effective and attempted decomposition proposals recorded on the seed's tree and on
        the children dropped from it (those built from program slices apart), and the nodes decomposed
        from prose for want of a program or a usable slice."""
        dropped = [
            TreeNode.model_validate(r.data["node"])
            for r in self.first.values()
            if r.stage == Stage.DECOMPOSE and "node" in r.data
        ]
        nodes = [*(tree.root.walk() if tree else []), *dropped]
        attempts = [d for n in nodes for d in decomposition_attempts(n)]
        self.counts.decompositions_effective = sum(d.outcome == "accepted" for d in attempts)
        self.counts.decompositions_attempted = len(attempts)
        sliced = [d for d in attempts if d.data.get("from_program")]
        self.counts.decompositions_from_program = len(sliced)
        self.counts.from_program_effective = sum(d.outcome == "accepted" for d in sliced)
        self.counts.prose_fallbacks = sum(
            any("prose_fallback" in d.data for d in n.decisions if d.stage == Stage.DECOMPOSE) for n in nodes
        )
