"""Typed records that flow between stages (paper section 3.1 vocabulary)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Domain = Literal["math", "finance"]
Band = Literal["hard", "goldilocks", "stale"]
FinishReason = Literal["stop", "length", "error", "other"]


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(dotted location, message) of a validation error's first problem, for one-line reports."""
    err = exc.errors()[0]
    return ".".join(str(part) for part in err["loc"]), err["msg"]


def shown_path(source_path: str) -> str:
    """A document's path as a record or a search hit shows it: relative to the working directory when the file lies
    under it (the index keys files by absolute path; a run folder, dataset or search result should not carry a
    machine's)."""
    path = Path(source_path)
    try:
        return path.relative_to(Path.cwd()).as_posix() if path.is_absolute() else source_path
    except ValueError:
        return source_path


class Record(BaseModel):
    """Base for every record: unknown keys are errors, JSON round-trips exactly."""

    model_config = ConfigDict(extra="forbid")


class Document(Record):
    """One ingested source document (a filing, an agreement, an exhibit)."""

    doc_id: str
    source_path: str
    sha256: str
    doc_type: str = "unknown"
    title: str = ""
    company: str | None = None
    period: str | None = None
    cik: str | None = None  # the SEC Central Index Key, where the filing states it (no leading zeros)
    n_pages: int | None = None
    summary: str = ""
    entities: dict[str, list[str]] = Field(default_factory=dict)
    chunking: str = ""  # how it was parsed and chunked (`pipeline.chunking`): another one re-ingests the file


class Snippet(Record):
    """A verbatim passage of a document: the `d` of a finance problem `p = (q, d)`."""

    text: str
    doc_id: str | None = None
    source_path: str | None = None
    section_path: str = ""
    page: int | None = None
    char_start: int | None = None
    char_end: int | None = None


class Chunk(Snippet):
    """A retrievable unit of a document, as stored in the index."""

    chunk_id: str
    kind: Literal["text", "table", "definition"] = "text"
    term: str | None = None


class Provenance(Record):
    """Where a problem came from: its seed, method, stage and position in a tree."""

    seed_id: str | None = None
    method: Literal["seed", "mbs", "direct", "corpus"] = "seed"
    stage: str = "seed"
    tree_path: str = ""
    parent_ids: list[str] = Field(default_factory=list)
    source: str | None = None


class Problem(Record):
    """A problem `(p, a*)`; in finance `p = (q, d)` with `d` the snippet."""

    id: str
    question: str
    answer: str
    domain: Domain = "math"
    snippet: Snippet | None = None
    entity: str | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    meta: dict[str, Any] = Field(default_factory=dict)


class Trace(Record):
    """A worked solution ending in one final answer."""

    text: str
    answer: str | None
    model: str = ""
    verified: bool = False


class Rollout(Record):
    """One sampled response with its extracted answer, 0/1 reward and finish reason."""

    text: str
    extracted_answer: str | None
    reward: float
    finish_reason: FinishReason
    completion_tokens: int = 0
    model: str = ""


class DifficultyReport(Record):
    """Success of one policy on one problem over n rollouts at budget L."""

    policy: str
    budget: int
    n: int
    k: int
    band: Band
    in_budget: bool
    verified_hard: bool = False

    @property
    def success_rate(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def qualified(self) -> bool:
        return self.band == "goldilocks" and self.in_budget


PASS_RATE_SCHEMA = 1  # the version of PassRate this finmbs writes; an entry with a higher one is refused


class PassRate(Record):
    """One entry of a problem's pass-rate history (`finmbs requalify`, appended, never rewritten): one policy's
    DifficultyReport on the problem, with who that policy was and when it was measured."""

    schema_version: int = PASS_RATE_SCHEMA
    problem_id: str
    policy: str  # the endpoint's name
    model: str = ""  # the endpoint's model string
    weights_sha256: str | None = None  # the policy's weights file, where it is local (embedded, --weights)
    n: int
    k: int
    band: Band
    in_budget: bool
    verified_hard: bool = False
    budget: int  # L, the rollout budget in tokens
    date: str  # ISO 8601, UTC
    source: Literal["calibrate", "requalify"] = "requalify"  # calibrate: the pool's own calibration, read back

    @model_validator(mode="before")
    @classmethod
    def _not_newer(cls, data: Any) -> Any:
        """An entry a newer finmbs wrote is refused as such (not as an entry with unknown fields)."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > PASS_RATE_SCHEMA:
            raise ValueError(
                f"a pass-rate entry written by a newer finmbs (schema {version}, this finmbs reads up to "
                f"{PASS_RATE_SCHEMA}); upgrade finmbs to read this history"
            )
        return data

    @property
    def report(self) -> DifficultyReport:
        return DifficultyReport.model_validate(self.model_dump(include=set(DifficultyReport.model_fields)))


class Decision(Record):
    """One decision taken on a node (kept so yields can be audited)."""

    stage: str
    outcome: Literal["accepted", "rejected", "info"]
    reason: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


ROOT_PATH = "0"  # a tree's root node; its children "0.0", "0.1", ...


class TreeNode(Record):
    """A node of a decomposition or synthetic tree."""

    problem: Problem
    trace: Trace | None = None
    children: list[TreeNode] = Field(default_factory=list)
    path: str = ROOT_PATH
    student_accuracy: dict[str, float] = Field(default_factory=dict)
    conditioned_accuracy: dict[str, float] = Field(default_factory=dict)
    target: DifficultyReport | None = None
    decisions: list[Decision] = Field(default_factory=list)
    mirrors: str | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self):
        """Yield this node and every descendant, parents first."""
        yield self
        for child in self.children:
            yield from child.walk()


class DecompositionTree(Record):
    """The verified decomposition tree of one seed (top-down stage)."""

    seed_id: str
    root: TreeNode


class SyntheticTree(Record):
    """A synthetic tree grown bottom-up in parallel to a decomposition tree."""

    seed_id: str
    index: int
    root: TreeNode
    grounding: Snippet | None = None
    entity: str | None = None


ANSWERS = "; answers: "  # how an unverified candidate's reason ends: the answers its traces reached


class Rejection(Record):
    """A candidate that did not make it, with the stage and reason."""

    problem: Problem
    stage: str
    reason: str
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def brief(self) -> str:
        """The reason without the traces' answers it may end with (negative context for a retry)."""
        return self.reason.split(ANSWERS)[0]

    @property
    def answers(self) -> list[str]:
        """The traces' answers the reason lists last (none when it lists none)."""
        _, found, listed = self.reason.partition(ANSWERS)
        return [a.strip() for a in listed.split(", ") if a.strip()] if found else []


class SeedCounts(Record):
    """One seed's counted decisions, recorded as they happen (`mbs.context.Ledger`) and stored in its tree
    file; metrics.json sums them over the finished seeds. A problem counts once, by its first rejection
    (rejected.jsonl keeps one row per problem too)."""

    answer_leaks: int = 0  # subproblems rejected for revealing their parent's answer
    # of answer_leaks, per form of stages.answer_leaks: the child's answer is the parent's, its question or
    # its worked solution states it
    leaks_by_answer: int = 0
    leaks_by_question: int = 0
    leaks_by_solution: int = 0
    novelty_rejected: int = 0  # synthetic problems restating their seed, source or a sibling
    not_well_posed: int = 0  # math problems quality control rejected
    reground_unverified: int = 0  # re-grounded problems with no verified teacher trace
    reground_too_easy: int = 0  # re-grounded problems failing their stage's weakest-student screen
    program_rejected: int = 0  # candidates rejected by the program check
    same_structure: int = 0  # novelty.structure: leaf variants whose program has their source's skeleton
    gated_roots: int = 0  # synthetic roots the novelty guard or quality control rejected before calibration
    decompositions_effective: int = 0
    decompositions_attempted: int = 0
    decompositions_from_program: int = 0  # of the attempted: built from slices of the node's program
    from_program_effective: int = 0  # of the effective: built from slices of the node's program
    prose_fallbacks: int = 0  # nodes decomposed from prose for want of a program or a usable slice

    def add(self, other: SeedCounts) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class SeedTrees(Record):
    """The tree file trees/SEED.json: one seed, its decomposition tree and synthetic trees, and what
    the seed cost and counted. The engine writes it (`SeedOutcome.tree_file`); export, report, audit and
    the run's metrics read it (`finmbs.runs.load`)."""

    seed: Problem
    decomposition: DecompositionTree | None = None
    synthetic: list[SyntheticTree] = Field(default_factory=list)
    dropped: str | None = None  # why the seed yielded no synthetic tree
    tokens: dict[str, int] = Field(default_factory=dict)  # tokens spent on the seed, per role
    # requests and tokens per stage; model seconds differ from run to run (a resumed seed is answered from
    # the cache), so they go to metrics.json alone and the tree file stays the same
    stages: dict[str, dict[str, int | float]] = Field(default_factory=dict)
    counts: SeedCounts | None = None  # None in tree files written before the counts were stored


class RoleUsage(Record):
    """LLM accounting for one role."""

    calls: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    retries: int = 0
    errors: int = 0
    parse_failures: int = 0
    repairs: int = 0


def merge_usage(*usages: dict[str, RoleUsage]) -> dict[str, RoleUsage]:
    """Per-role usage summed field by field (earlier runs of a resumed folder + this one)."""
    total: dict[str, RoleUsage] = {}
    for usage in usages:
        for role, u in usage.items():
            base = total.setdefault(role, RoleUsage())
            for field in RoleUsage.model_fields:
                setattr(base, field, getattr(base, field) + getattr(u, field))
    return total


# The rules a run folder's decisions and metrics follow, written to its metrics.json. 2 (issue 48): the
# leak check's forms counted apart, too-easy seeds' roots counted apart, seed conversion over the finished
# seeds. A folder written under another version is never resumed into (`runs.grow`); an older one is read
# with the metrics whose meaning changed recomputed (`runs.load`), a newer one refused.
RULES_VERSION = 2


class RunMetrics(Record):
    """The paper's run metrics (section 4.1, table 8)."""

    rules_version: int = RULES_VERSION
    method: str = "mbs"
    keep: str = "roots"
    seeds_in: int = 0
    seeds_done: int = 0  # seeds finished (their tree files written): construction tokens per seed divide by these
    seeds_with_trace: int = 0
    seeds_too_easy: int = 0  # roots the weakest student already solves (nothing to scaffold)
    # calibrated synthetic roots (and the qualified ones) of the too-easy seeds: with stages.easy_seeds: leaf
    # (finmbs's) harder variants of the seed itself, not grown from a decomposition
    too_easy_roots: int = 0
    too_easy_qualified: int = 0
    decompositions_effective: int = 0
    decompositions_attempted: int = 0
    decompositions_from_program: int = 0  # stages.decompose_from_program: attempts built from program slices
    from_program_effective: int = 0  # effective decompositions built from program slices
    prose_fallbacks: int = 0  # nodes decomposed from prose for want of a program or a usable slice (why: trees)
    answer_leaks: int = 0  # subproblems rejected for revealing their parent's answer
    leaks_by_answer: int = 0  # of answer_leaks: the child's answer is the parent's
    leaks_by_question: int = 0  # of answer_leaks: the child's question states the parent's answer
    leaks_by_solution: int = 0  # of answer_leaks: the child's worked solution states it
    descendants: int = 0  # calibrated synthetic roots (the paper's count)
    gated_roots: int = 0  # synthetic roots the novelty guard or quality control rejected before calibration
    goldilocks: int = 0
    qualified: int = 0
    seeds_converted: int = 0
    novelty_rejected: int = 0  # synthetic problems restating their seed, source or a sibling
    not_well_posed: int = 0  # math problems quality control rejected (a quantity the question never states)
    # of novelty_rejected: the synthetic roots the final novelty guard rejected (read from rejected.jsonl's
    # data.root); the rest are leaf variants and other nodes. The report's funnel divides each final gate's
    # rejections by the roots that reached that gate (novelty first, then quality control)
    novelty_rejected_roots: int = 0
    reground_unverified: int = 0  # re-grounded problems with no verified teacher trace
    reground_too_easy: int = 0  # re-grounded problems failing their stage's weakest-student screen
    program_rejected: int = 0  # verify.programs: candidates rejected by the program check (failed, disagreed)
    relabeled: int = 0  # qualified synthetic roots whose stated answer was relabeled (meta.relabeled_from)
    same_structure: int = 0  # novelty.structure: leaf variants rejected for their source's program skeleton
    # novelty.structure: qualified synthetic roots whose program differs in structure from their source's
    # (meta.structure "new"); the share is over every qualified root (a composed one is not measured)
    new_structure: int = 0
    # stages.leaf_operators / novelty.structure: per operator (meta.operator; "none" for a root made by no
    # operator), its qualified roots and how many of them are new in structure
    by_operator: dict[str, dict[str, int]] = Field(default_factory=dict)
    # stages.program_operators: per engine operator, how many of its variants reached each check (attempted,
    # built, worded, round_trip, screened, goldilocks, qualified) and the target's mean pass rate on their
    # sources before and on the variants after (finmbs/mbs/engine_leaves.py `operator_funnel`)
    engine_funnel: dict[str, dict[str, float | int | None]] = Field(default_factory=dict)
    other_descendants: int = 0  # keep=all: calibrated non-root synthetic nodes, apart from the above
    other_goldilocks: int = 0
    other_qualified: int = 0
    construction_tokens: int = 0  # prompt + completion tokens of every role but the target policy
    # fresh draws: calibrated roots whose alpha screen ran on the target's own model (the weakest student is
    # the target's model) and put them in the Goldilocks band, and how many of those calibration's fresh
    # draws put outside it
    screen_goldilocks: int = 0
    screen_goldilocks_out: int = 0
    stages: dict[str, dict[str, float]] = Field(default_factory=dict)  # requests, tokens, model seconds per stage
    usage: dict[str, RoleUsage] = Field(default_factory=dict)
    wall_time_s: float = 0.0

    @property
    def root_candidates(self) -> int:
        """The rates' denominator: every synthetic root that reached the final gates (calibrated, or
        rejected by the novelty guard or quality control just before)."""
        return self.descendants + self.gated_roots

    @property
    def goldilocks_rate(self) -> float:
        return self.goldilocks / self.root_candidates if self.root_candidates else 0.0

    @property
    def qualified_rate(self) -> float:
        return self.qualified / self.root_candidates if self.root_candidates else 0.0

    @property
    def seed_conversion(self) -> float:
        """Seeds with a qualified descendant over the finished seeds (`seeds_done`), the denominator
        construction tokens per seed use too: a partial run's unfinished seeds are neither converted nor
        failed yet, so dividing by `seeds_in` would understate it (both counts are in metrics.json)."""
        return self.seeds_converted / self.seeds_done if self.seeds_done else 0.0

    @property
    def construction_tokens_per_seed(self) -> float:
        """Construction tokens of the finished seeds over the finished seeds (an unfinished seed's tokens
        are not in its tree file yet)."""
        return self.construction_tokens / self.seeds_done if self.seeds_done else 0.0

    @property
    def construction_tokens_per_qualified(self) -> float | None:
        return self.construction_tokens / self.qualified if self.qualified else None

    @property
    def new_structure_rate(self) -> float:
        """The share of the qualified roots that are new in structure (novelty.structure)."""
        return self.new_structure / self.qualified if self.qualified else 0.0

    @property
    def cache_hits(self) -> int:
        return sum(u.cache_hits for u in self.usage.values())

    def summary(self) -> dict[str, Any]:
        """Flat dict with the derived rates, as written to metrics.json."""
        data = self.model_dump()
        data.update(
            root_candidates=self.root_candidates,
            goldilocks_rate=self.goldilocks_rate,
            qualified_rate=self.qualified_rate,
            seed_conversion=self.seed_conversion,
            construction_tokens_per_seed=self.construction_tokens_per_seed,
            construction_tokens_per_qualified=self.construction_tokens_per_qualified,
            cache_hits=self.cache_hits,
            new_structure_rate=self.new_structure_rate,
        )
        return data
