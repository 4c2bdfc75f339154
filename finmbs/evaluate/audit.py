"""`finmbs audit`: the paper's judge-based data-quality audits (appendix F, table 4) on run folders.

Blueprint preservation and novelty: a fixed reasoning blueprint is extracted once per seed from the
seed, its verified solution and answer; each candidate (problem, reference solution, answer) is then
scored 1-5 on both criteria in its own call, blind: the prompt never names the method or the run.
With `--against` the candidates are same-seed pairs, one per method, matched on the target policy's
correct-rollout count. Reported: the share of candidates with both scores >= 4.

Correctness: a panel of judges (the config's judge plus extra endpoints) each says correct /
incorrect / uncertain for a problem and its ground-truth answer (finance: with its document);
reported: at least one verifies, majority verifies, all reject.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from finmbs.config import Endpoint
from finmbs.evaluate import EvalError
from finmbs.evaluate.results import percent
from finmbs.llm import Gateway
from finmbs.llm.structured import written_in_order
from finmbs.records import Problem, Record, RoleUsage, SeedTrees
from finmbs.resources import render_prompt
from finmbs.runs.folder import METRICS, QUALIFIED
from finmbs.runs.load import RunReadError
from finmbs.runs.load import load_run as read_run
from finmbs.verify.judge import delimited

ROLE = "judge"
Tick = Callable[[], None]


class Candidate(Record):
    """A qualified problem with its reference solution and the label of the method that made it."""

    problem: Problem
    label: str
    solution: str = ""

    @property
    def seed_id(self) -> str:
        return self.problem.provenance.seed_id or self.problem.id

    @property
    def target_k(self) -> int:
        return int((self.problem.meta.get("difficulty") or {}).get("k", 0))


class RunData(Record):
    """What the audit reads from one run folder."""

    name: str
    trees: dict[str, SeedTrees]
    candidates: list[Candidate]


def load_run(root: Path) -> RunData:
    """The seed trees and qualified problems of a run folder (read by the run loader); a bad file is named.
    A run that recorded its metrics and qualified nothing has no qualified.jsonl: it is audited with no
    candidates (its trees still count), not refused."""
    if not (root / QUALIFIED).is_file() and not (root / METRICS).is_file():
        raise FileNotFoundError(f"{root} is not a finished run folder: no {QUALIFIED} or {METRICS}")
    try:
        run = read_run(root)
    except RunReadError as exc:
        raise EvalError(str(exc)) from None
    solutions = {
        node.problem.id: node.trace.text
        for tree in run.trees.values()
        for synthetic in tree.synthetic
        for node in synthetic.root.walk()
        if node.trace
    }
    candidates = [
        Candidate(
            problem=problem,
            label=problem.provenance.method,
            solution=str(problem.meta.get("teacher_solution") or solutions.get(problem.id, "")),
        )
        for problem in run.qualified
    ]
    return RunData(name=root.name, trees=run.trees, candidates=candidates)


def label_runs(runs: Sequence[RunData]) -> list[Candidate]:
    """All candidates, labelled by method; by run name when two runs share a method."""
    methods = [{c.label for c in run.candidates} for run in runs]
    clash = len(runs) > 1 and bool(set.intersection(*methods))
    return [c.model_copy(update={"label": run.name}) if clash else c for run in runs for c in run.candidates]


def select_candidates(candidates: list[Candidate], limit: int, seed: int = 0) -> list[Candidate]:
    """Up to `limit` seeds' candidates: one per label per seed, matched on target correct-rollout count.

    With two labels only seeds that have both get in, and the pair with the closest counts is taken.
    """
    rng = random.Random(seed)
    labels = sorted({c.label for c in candidates})
    by_seed: dict[str, dict[str, list[Candidate]]] = {}
    for c in candidates:
        by_seed.setdefault(c.seed_id, {}).setdefault(c.label, []).append(c)
    chosen: list[list[Candidate]] = []
    for seed_id in sorted(by_seed):
        groups = by_seed[seed_id]
        if len(labels) == 2:
            if len(groups) < 2:
                continue
            a, b = (groups[label] for label in labels)
            chosen.append(list(min(((x, y) for x in a for y in b), key=lambda p: abs(p[0].target_k - p[1].target_k))))
        else:
            chosen.append([rng.choice(groups[label]) for label in labels if label in groups])
    picked = rng.sample(chosen, min(limit, len(chosen)))
    return [c for group in picked for c in group]


def sample_per_label(candidates: list[Candidate], limit: int, seed: int = 0) -> list[Candidate]:
    """Up to `limit` random candidates of each label (the correctness panel's sample)."""
    rng = random.Random(seed)
    picked = []
    for label in sorted({c.label for c in candidates}):
        mine = [c for c in candidates if c.label == label]
        picked += rng.sample(mine, min(limit, len(mine)))
    return picked


class BlueprintScores(BaseModel):
    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    preservation: int = Field(ge=1, le=5)
    novelty: int = Field(ge=1, le=5)


class PanelVerdict(BaseModel):
    model_config = ConfigDict(json_schema_extra=written_in_order)

    reason: str = ""
    verdict: Literal["correct", "incorrect", "uncertain"]


class ScoredPair(Record):
    """One candidate's blind scores against its seed (None when the judge reply was unusable)."""

    seed_id: str
    candidate_id: str
    label: str
    preservation: int | None
    novelty: int | None
    reason: str = ""


class PanelVotes(Record):
    """Every panel judge's verdict on one problem and its answer."""

    problem_id: str
    label: str
    verdicts: dict[str, str]


def document_text(problem: Problem) -> str:
    return problem.snippet.text if problem.snippet else ""


def fenced_document(tag: str, problem: Problem, nonce: str) -> str:
    """A problem's document as a fenced block of an audit prompt (`delimited`'s tags); empty in math."""
    return render_prompt("audit_document", tag=tag, nonce=nonce, text=problem.snippet.text) if problem.snippet else ""


async def extract_blueprint(gateway: Gateway, judge: Endpoint, tree: SeedTrees) -> str:
    """The seed's fixed reasoning blueprint, from the seed, its verified solution and answer (fenced:
    the texts are data to the judge, never instructions)."""
    root = tree.decomposition.root if tree.decomposition else None
    fields = delimited(
        document=document_text(tree.seed),
        question=tree.seed.question,
        solution=root.trace.text if root and root.trace else "(no verified solution recorded)",
        answer=tree.seed.answer,
    )
    document = fenced_document("document", tree.seed, fields["nonce"])
    prompt = render_prompt("audit_blueprint", **{**fields, "document": document})
    [sample] = await gateway.generate(judge, role=ROLE, messages=[{"role": "user", "content": prompt}], temperature=0.0)
    return sample.text.strip()


async def score_candidate(
    gateway: Gateway, judge: Endpoint, tree: SeedTrees, blueprint: str, candidate: Candidate
) -> ScoredPair:
    """Blind 1-5 preservation and novelty scores: the prompt names neither the method nor the run. The
    texts are fenced and the scores are the reply's last JSON object."""
    problem = candidate.problem
    own_document = problem.snippet != tree.seed.snippet
    fields = delimited(
        seed_document=document_text(tree.seed),
        seed_question=tree.seed.question,
        blueprint=blueprint,
        candidate_document=document_text(problem) if own_document else "",
        question=problem.question,
        solution=candidate.solution or "(none recorded)",
        answer=problem.answer,
    )
    nonce = fields["nonce"]
    prompt = render_prompt(
        "audit_score",
        **{
            **fields,
            "seed_document": fenced_document("seed_document", tree.seed, nonce),
            "candidate_document": fenced_document("generated_document", problem, nonce) if own_document else "",
        },
    )
    [scores] = await gateway.structured(
        judge, BlueprintScores, role=ROLE, messages=[{"role": "user", "content": prompt}], temperature=0.0, last=True
    )
    return ScoredPair(
        seed_id=candidate.seed_id,
        candidate_id=problem.id,
        label=candidate.label,
        preservation=scores and scores.preservation,
        novelty=scores and scores.novelty,
        reason=scores.reason if scores else "judge reply unparseable",
    )


async def panel_votes(gateway: Gateway, panel: dict[str, Endpoint], candidate: Candidate) -> PanelVotes:
    """Each panel judge's verdict (an unusable reply counts as uncertain); the texts are fenced and the
    verdict is the reply's last JSON object."""
    problem = candidate.problem
    fields = delimited(document=document_text(problem), question=problem.question, answer=problem.answer)
    document = fenced_document("document", problem, fields["nonce"])
    prompt = render_prompt("audit_correctness", **{**fields, "document": document})
    replies = await asyncio.gather(
        *(
            gateway.structured(
                judge,
                PanelVerdict,
                role=ROLE,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
                last=True,
            )
            for judge in panel.values()
        )
    )
    verdicts = {name: reply.verdict if reply else "uncertain" for name, [reply] in zip(panel, replies)}
    return PanelVotes(problem_id=problem.id, label=candidate.label, verdicts=verdicts)


class BlueprintSummary(Record):
    """Blueprint preservation and novelty over one method's scored candidates (shares in 0..1)."""

    label: str
    scored: int
    unparsed: int
    mean_preservation: float
    mean_novelty: float
    preservation_ge4: float
    novelty_ge4: float
    both_ge4: float
    preservation_ge3: float
    novelty_ge3: float


class PanelSummary(Record):
    """Table 4 for one method: shares of problems at least one / a majority verifies / all reject."""

    label: str
    problems: int
    judges: list[str]
    at_least_one_verifies: float
    majority_verifies: float
    all_reject: float


class AuditReport(Record):
    """Everything `finmbs audit` measured, as written to audit.json."""

    runs: list[str]
    scorer: str
    panel: list[str]
    blueprint: list[BlueprintSummary]
    correctness: list[PanelSummary]
    pairs: list[ScoredPair]
    votes: list[PanelVotes]
    usage: dict[str, RoleUsage] = Field(default_factory=dict)


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def summarize_pairs(label: str, pairs: list[ScoredPair]) -> BlueprintSummary:
    ok = [p for p in pairs if p.preservation is not None and p.novelty is not None]
    pres, nov = [p.preservation or 0 for p in ok], [p.novelty or 0 for p in ok]
    return BlueprintSummary(
        label=label,
        scored=len(ok),
        unparsed=len(pairs) - len(ok),
        mean_preservation=sum(pres) / len(ok) if ok else 0.0,
        mean_novelty=sum(nov) / len(ok) if ok else 0.0,
        preservation_ge4=_share([p >= 4 for p in pres]),
        novelty_ge4=_share([n >= 4 for n in nov]),
        both_ge4=_share([p >= 4 and n >= 4 for p, n in zip(pres, nov)]),
        preservation_ge3=_share([p >= 3 for p in pres]),
        novelty_ge3=_share([n >= 3 for n in nov]),
    )


def summarize_votes(label: str, votes: list[PanelVotes], judges: list[str]) -> PanelSummary:
    correct = [sum(v == "correct" for v in vote.verdicts.values()) for vote in votes]
    rejected = [all(v == "incorrect" for v in vote.verdicts.values()) for vote in votes]
    return PanelSummary(
        label=label,
        problems=len(votes),
        judges=judges,
        at_least_one_verifies=_share([c >= 1 for c in correct]),
        majority_verifies=_share([c > len(judges) / 2 for c in correct]),
        all_reject=_share(rejected),
    )


async def audit(
    runs: list[RunData],
    gateway: Gateway,
    panel: dict[str, Endpoint],
    *,
    pairs: int,
    problems: int,
    seed: int = 0,
    progress: Callable[[int], Tick] | None = None,
) -> AuditReport:
    """Blind blueprint/novelty scores on matched candidates, and the correctness panel on a sample."""
    scorer_name, scorer = next(iter(panel.items()))
    trees = {seed_id: tree for run in reversed(runs) for seed_id, tree in run.trees.items()}
    candidates = label_runs(runs)
    scored = select_candidates([c for c in candidates if c.seed_id in trees], pairs, seed)
    labels = sorted({c.label for c in candidates})
    checked = sample_per_label(candidates, problems, seed)
    tick = progress(len(scored) + len(checked)) if progress else None
    gate = asyncio.Semaphore(16)
    blueprints: dict[str, asyncio.Task[str]] = {}

    async def one_pair(candidate: Candidate) -> ScoredPair:
        async with gate:
            tree = trees[candidate.seed_id]
            if candidate.seed_id not in blueprints:
                blueprints[candidate.seed_id] = asyncio.ensure_future(extract_blueprint(gateway, scorer, tree))
            result = await score_candidate(gateway, scorer, tree, await blueprints[candidate.seed_id], candidate)
        if tick:
            tick()
        return result

    async def one_problem(candidate: Candidate) -> PanelVotes:
        async with gate:
            result = await panel_votes(gateway, panel, candidate)
        if tick:
            tick()
        return result

    scored_pairs = await asyncio.gather(*(one_pair(c) for c in scored))
    votes = await asyncio.gather(*(one_problem(c) for c in checked))
    return AuditReport(
        runs=[run.name for run in runs],
        scorer=scorer_name,
        panel=list(panel),
        blueprint=[summarize_pairs(label, [p for p in scored_pairs if p.label == label]) for label in labels],
        correctness=[summarize_votes(label, [v for v in votes if v.label == label], list(panel)) for label in labels],
        pairs=list(scored_pairs),
        votes=list(votes),
        usage=gateway.usage,
    )


def audit_markdown(report: AuditReport) -> str:
    """Both audits as Markdown tables (shares in %)."""
    lines = [
        f"### Audit of {', '.join(report.runs)}",
        "",
        f"Blueprint preservation and novelty (appendix F), scored blind by {report.scorer}:",
        "",
        "| method | scored | unparsed | mean preservation | mean novelty | preservation >= 4 | novelty >= 4 "
        "| both >= 4 | preservation >= 3 | novelty >= 3 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in report.blueprint:
        lines.append(
            f"| {b.label} | {b.scored} | {b.unparsed} | {b.mean_preservation:.2f} | {b.mean_novelty:.2f} "
            f"| {percent(b.preservation_ge4)} | {percent(b.novelty_ge4)} | {percent(b.both_ge4)} "
            f"| {percent(b.preservation_ge3)} | {percent(b.novelty_ge3)} |"
        )
    lines += [
        "",
        f"Correctness panel (table 4), judges: {', '.join(report.panel)}:",
        "",
        "| method | problems | at least one verifies | majority verifies | all reject |",
        "|---|---|---|---|---|",
    ]
    for c in report.correctness:
        lines.append(
            f"| {c.label} | {c.problems} | {percent(c.at_least_one_verifies)} | {percent(c.majority_verifies)} "
            f"| {percent(c.all_reject)} |"
        )
    return "\n".join(lines) + "\n"
