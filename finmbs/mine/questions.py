"""One document's mined questions: the teacher writes a question with its answer, worked solution and
verbatim evidence for each planned (type, passage); a question is kept only when every check passes,
cheapest first:

    reply         the teacher's reply parsed (a pydantic schema, constrained where the endpoint can)
    evidence      every quote is verbatim in the document (whitespace and quote marks aside) and inside
                  the cited passage; its section, page and offsets are recorded
    entity        the question names its company, so it is answerable out of this context
    own_answer /  the question gives its own answer away, or the answer is a sentence or a formula
    answer_form   (`novelty.unworkable`, as for every teacher-written problem)
    contaminated  the question (or passage) overlaps an evaluation question (export's n-gram check)
    verify        a teacher trace verifies the answer (stage 1's rejection sampling; `stages.relabel` as
                  configured)
    judge         the answerability judge: the passage answers it and supports the answer
    novelty       it restates no question mined before it from the same document (`novelty.restated`)
    not_hard      `--hard-only`: the target policy solved it at least once in N rollouts at L

Every kept question is calibrated against the target (N rollouts at L) and records its accuracy in
meta.measured. With `verify.programs` on, `verify` also runs the teacher's program (document figures bound
by quote() from the cited passage) and keeps the question only when its result is the stated answer.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from finmbs.export.decontaminate import Decontaminator
from finmbs.ingest import find_verbatim
from finmbs.mbs.calibrate import calibrate
from finmbs.mbs.candidates import WorkedProblem, placeholder, reply_model, verified_node
from finmbs.mbs.context import Context, Ledger, in_stage
from finmbs.mbs.engine_leaves import round_trip
from finmbs.mbs.finance_terms import short_name
from finmbs.mbs.novelty import STAGE as NOVELTY
from finmbs.mbs.novelty import names_its_entity, restated, unworkable
from finmbs.mbs.programs import program_prompt
from finmbs.mbs.reground import answerability
from finmbs.mbs.stages import Stage
from finmbs.mbs.traces import teacher_trace
from finmbs.mine.company import document_company
from finmbs.mine.passages import Passage
from finmbs.records import Chunk, DifficultyReport, Document, Problem, Provenance, Record, Rejection
from finmbs.resources import render_prompt

STAGE = Stage.MINE
CHECKS = (
    "no_company",
    "no_passage",
    "reply",
    "evidence",
    "entity",
    "own_answer",
    "answer_form",
    "contaminated",
    "verify",
    "judge",
    NOVELTY,
    "not_hard",
    "no_facts",  # mine.from_facts (finmbs/mine/from_facts.py): the rejections of a question over chosen facts
    "facts",
    "program",
    "operation",
)


def evidence_first(schema: dict) -> None:
    """`json_schema_extra` of MinedQuestion: a constrained teacher copies its evidence before it writes the
    question on it, and writes every field."""
    properties = schema.get("properties", {})
    schema["properties"] = {
        "evidence": properties["evidence"],
        **{k: v for k, v in properties.items() if k != "evidence"},
    }
    schema["required"] = list(schema["properties"])


class MinedQuestion(WorkedProblem):
    """The teacher's reply: a question over the passage, its worked solution, answer and verbatim evidence."""

    model_config = ConfigDict(json_schema_extra=evidence_first)

    evidence: list[str] = Field(
        min_length=1, description="pieces of the passage copied exactly, holding the figures used"
    )

    @field_validator("evidence")
    @classmethod
    def _quoted(cls, quotes: list[str]) -> list[str]:
        """A quote copied from the reply template ("<a piece of the passage, copied exactly>") is no quote: the
        reply fails to parse and is asked again."""
        real = [q for q in quotes if not placeholder(q)]
        if not real:
            raise ValueError("every evidence quote is a placeholder, not a piece of the passage")
        return real


class MinedSelection(MinedQuestion):
    """The reply with `--evidence select`: the evidence is the numbers of the passage's lines that hold it."""

    evidence: list[int] = Field(min_length=1, description="numbers of the passage's lines holding the figures used")  # type: ignore[assignment]

    @field_validator("evidence")
    @classmethod
    def _quoted(cls, numbers: list[int]) -> list[int]:
        return numbers


def passage_lines(passage: Passage) -> list[str]:
    """The passage's non-empty lines, as `--evidence select` numbers them (each one the document's own text)."""
    return [line.strip() for part in passage.parts for line in part.text.split("\n") if line.strip()]


def numbered(passage: Passage) -> str:
    return "\n".join(f"[{i}] {line}" for i, line in enumerate(passage_lines(passage), 1))


class DocumentOutcome(Record):
    """One finished document: its kept seeds, its rejected candidates, and what it cost."""

    doc_id: str
    passages: int = 0
    candidates: list[str] = Field(default_factory=list)  # the question type of each candidate
    kept: list[Problem] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    tokens: dict[str, int] = Field(default_factory=dict)
    stages: dict[str, dict[str, float]] = Field(default_factory=dict)
    seconds: float = 0.0


class Options(BaseModel):
    """What a mining run makes (a rerun on the same run folder must ask for the same)."""

    per_document: int = Field(4, ge=1)
    types: list[str]
    hard_only: bool = False
    evidence: Literal["quote", "select"] = Field(
        "quote",
        description="quote: the teacher copies its evidence, proven verbatim (the issue's rule); select (not "
        "the issue's): it names the passage's numbered lines, verbatim by construction",
    )


# quote marks (typographic or plain) read as spaces, dashes as one dash; one character to one, so offsets hold.
# Agreements set defined terms in spaced curly quotes ("“ Cash Dominion Period ” shall mean"); a teacher may copy
# such a definition word for word without the quote marks.
_SAME = str.maketrans({"“": " ", "”": " ", "‘": " ", "’": " ", '"': " ", "'": " ", "–": "-", "—": "-", "\u00a0": " "})


def find_quote(quote: str, text: str) -> tuple[int, int] | None:
    """(start, end) of `quote` in `text`, equal up to whitespace runs, quote marks and the form of dashes:
    every word and figure as the document has it."""
    if span := find_verbatim(quote, text):
        return span
    if (span := find_verbatim(quote.translate(_SAME), text.translate(_SAME))) is None:
        return None
    start, end = span
    while start < end and text[start] in "“”‘’\"' ":  # a match opening on a quote mark read as a space
        start += 1
    return start, end


def home_chunk(chunks: list[Chunk], start: int) -> Chunk | None:
    return next(
        (
            c
            for c in chunks
            if c.char_start is not None and c.char_end is not None and c.char_start <= start < c.char_end
        ),
        None,
    )


def locate_evidence(
    quotes: list[str], passage: Passage, text: str, chunks: list[Chunk]
) -> tuple[list[dict], str | None]:
    """(the location of each quote in the document, why the evidence fails or None): each quote must lie
    inside one excerpt of the cited passage (found there first, so a phrase the document repeats is
    located where the passage has it) and so be verbatim in the document."""
    found = []
    for quote in quotes:
        if len(quote.split()) < 2:
            return found, f"evidence {quote!r} is no quote of the passage (under two words)"
        span = next(
            (
                (p.char_start + s, p.char_start + e)
                for p in passage.parts
                if p.char_start is not None
                for s, e in [find_quote(quote, p.text) or (-1, -1)]
                if s >= 0
            ),
            None,
        )
        if span is None:
            where = (
                "in the document but outside the cited passage"
                if find_quote(quote, text)
                else "not verbatim in the document"
            )
            return found, f"evidence {where}: {quote[:120]!r}"
        start, end = span
        home = home_chunk(chunks, start)
        found.append(
            {
                "text": text[start:end],
                "char_start": start,
                "char_end": end,
                "section_path": home.section_path if home else "",
                "page": home.page if home else None,
            }
        )
    return found, None


def measured(report: DifficultyReport) -> dict[str, Any]:
    """meta.measured: the target's accuracy on the question (k of n rollouts at budget L)."""
    return {
        "policy": report.policy,
        "k": report.k,
        "n": report.n,
        "accuracy": round(report.k / report.n, 4),
        "budget": report.budget,
        "band": report.band,
    }


class DocumentMiner:
    """Mines one document: plans passages, asks the teacher, checks and calibrates the questions."""

    def __init__(
        self,
        ctx: Context,
        doc: Document,
        text: str,
        chunks: list[Chunk],
        options: Options,
        decontaminator: Decontaminator | None,
    ):
        self.ctx, self.doc, self.text, self.chunks, self.options = ctx, doc, text, chunks, options
        self.decontaminator = decontaminator
        self.ledger = Ledger(doc.doc_id)
        self.company = document_company(doc, text) or ""
        self.name = short_name(self.company)

    def candidate(self, number: int, kind: str, passage: Passage, reply: MinedQuestion | None) -> Problem:
        """The candidate as a Problem (the reply's fields; empty ones when there is no reply)."""
        meta: dict[str, Any] = {"type": kind, "passage_score": round(passage.score, 2)}
        if passage.term:
            meta["term"] = passage.term
        if reply is not None:
            meta.update(
                teacher_solution=reply.solution.strip(),
                quoted=reply.evidence,
                **({"program": reply.program} if getattr(reply, "program", None) else {}),
            )
        return Problem(
            id=f"{self.doc.doc_id}.q{number}",
            question=reply.question.strip() if reply else "",
            answer=reply.answer.strip() if reply else "",
            domain="finance",
            snippet=passage.snippet(),
            entity=self.company or None,
            provenance=Provenance(seed_id=f"{self.doc.doc_id}.q{number}", stage=STAGE),
            meta=meta,
        )

    def reject(self, problem: Problem, check: str, reason: str) -> None:
        self.ledger.reject(problem, STAGE, reason, check=check, type=problem.meta.get("type"), document=self.doc.doc_id)

    async def ask(self, number: int, kind: str, passage: Passage) -> MinedQuestion | None:
        teacher = self.ctx.teachers[number % len(self.ctx.teachers)]
        select = self.options.evidence == "select"
        prompt = render_prompt(
            "mine_question",
            company=self.company,
            short=self.name,
            title=self.doc.title or self.doc.doc_id,
            type=kind,
            type_rule=render_prompt(f"mine_type_{kind}").strip(),
            passage=numbered(passage) if select else passage.text,
            evidence_rule=render_prompt(f"mine_evidence_{self.options.evidence}").strip(),
            evidence_example="[1]" if select else '["<a piece of the passage, copied exactly>"]',
        )
        # verify.programs: the reply carries a program binding the passage's figures with quote()
        reply_shape = reply_model(self.ctx, MinedSelection if select else MinedQuestion)
        [reply] = await self.ctx.gateway.structured(
            teacher,
            reply_shape,
            role="teacher",
            messages=[{"role": "user", "content": program_prompt(self.ctx, prompt, "finance")}],
        )
        self.ctx.tick(STAGE)
        return reply

    async def checked(self, number: int, kind: str, passage: Passage) -> Problem | None:
        """The candidate after every check but novelty and hardness, or None (the rejection recorded)."""
        with in_stage(STAGE):
            reply = await self.ask(number, kind, passage)
        problem = self.candidate(number, kind, passage, reply)
        if reply is None:
            self.reject(problem, "reply", "the teacher's reply did not parse")
            return None
        grounded = await self.grounded(problem, reply, passage)
        return None if grounded is None else await self.checks(grounded)

    async def grounded(self, problem: Problem, reply: Any, passage: Passage) -> Problem | None:
        """The candidate with its evidence located in the document, or None (the rejection recorded)."""
        quotes: list[str] = reply.evidence  # type: ignore[assignment]
        if isinstance(reply, MinedSelection):
            lines = passage_lines(passage)
            quotes = [lines[n - 1] for n in dict.fromkeys(reply.evidence) if 1 <= n <= len(lines)]
            if not quotes:
                self.reject(
                    problem,
                    "evidence",
                    f"evidence names no line of the passage ({reply.evidence}; it has {len(lines)})",
                )
                return None
        evidence, why = locate_evidence(quotes, passage, self.text, self.chunks)
        if why:
            self.reject(problem, "evidence", why)
            return None
        problem.meta["evidence"] = evidence
        return problem

    async def checks(self, problem: Problem) -> Problem | None:
        """A candidate with its evidence located through every check after it but novelty and hardness:
        entity, own answer and answer form, contamination, verify, judge (None: the rejection recorded)."""
        if not (names_its_entity(problem) or self.name.lower() in problem.question.lower()):
            self.reject(
                problem,
                "entity",
                f"the question does not name its company ({self.name!r}): not answerable out of context",
            )
            return None
        if bad := unworkable(problem):
            self.reject(problem, bad[0], bad[1])
            return None
        if self.decontaminator is not None and (hit := self.decontaminator.check(problem)):
            self.reject(
                problem,
                "contaminated",
                f"its {hit.field} overlaps {hit.source} {hit.ref} ({hit.coverage:.0%} of its n-grams: {hit.ngram!r})",
            )
            return None
        if self.ctx.config.mine.round_trip and problem.meta.get("figure_name") and problem.meta.get("program"):
            # mine.round_trip: the engine's question and program; the round trip shows it is solvable
            solvable = await self.round_tripped(problem)
            if solvable is None:
                return None
            problem = solvable
        else:
            with in_stage(Stage.TRACES):
                node = await verified_node(self.ctx, problem, self.ledger, stage=STAGE, path="0")
            if node is None:
                last = self.ledger.rejected.pop()
                self.reject(last.problem, last.data.get("check", "verify"), last.reason)
                return None
            problem = node.problem
            problem.meta["verified_by"] = node.trace.model if node.trace else ""
        with in_stage(Stage.JUDGE):
            verdict = await answerability(self.ctx, problem)
        self.ctx.tick(Stage.JUDGE)
        if not (verdict.answerable and verdict.supported):
            what = (
                "not answerable from the passage alone"
                if not verdict.answerable
                else "answer not supported by the passage"
            )
            self.reject(problem, "judge", f"judge: {what}: {verdict.reason}")
            return None
        return problem

    async def round_tripped(self, problem: Problem) -> Problem | None:
        """`mine.round_trip`: an engine-written question whose label the engine's program computed (checked
        against its operation already) is kept when one of k teacher programs written from the question and
        passage alone computes it (`engine_leaves.round_trip`); the teacher's prose traces are drawn and
        tallied (meta.prose_traces) but do not decide. None: rejected (check `round_trip`)."""
        with in_stage(Stage.TRACES):
            hits, k = await round_trip(self.ctx, problem)
            problem.meta["round_trip"] = f"{hits} of {k}"
            if hits == 0:
                why = (
                    f"wording not solvable: none of {k} programs the teacher wrote from the text gives {problem.answer}"
                )
                self.reject(problem, "round_trip", why)
                return None
            trace, why = await teacher_trace(self.ctx, problem)
        problem.meta["prose_traces"] = f"verified by {trace.model}" if trace else why
        problem.meta["verified_by"] = f"program; round trip {hits} of {k}"
        return problem

    def novel(self, problems: list[Problem]) -> list[Problem]:
        """The problems that restate no earlier kept one of this document (in candidate order)."""
        if not self.ctx.config.novelty.enabled:
            return problems
        kept: list[Problem] = []
        for problem in problems:
            if why := restated(problem, [("mined question", k) for k in kept], self.ctx.config.novelty):
                self.reject(problem, NOVELTY, why)
                continue
            kept.append(problem)
        return kept

    async def hard(self, problem: Problem) -> Problem | None:
        """The problem with meta.measured (the target's N rollouts at L); None when `hard_only` and solved."""
        with in_stage(Stage.CALIBRATE):
            report = await calibrate(self.ctx, problem)
        problem = problem.model_copy(update={"meta": {**problem.meta, "measured": measured(report)}})
        if self.options.hard_only and report.k > 0:
            self.reject(
                problem, "not_hard", f"the target solved it {report.k} of {report.n} times (--hard-only keeps 0 of N)"
            )
            return None
        return problem

    async def mine(self, planned: list[tuple[str, Passage]]) -> DocumentOutcome:
        outcome = DocumentOutcome(
            doc_id=self.doc.doc_id, passages=len({p.text for _, p in planned}), candidates=[kind for kind, _ in planned]
        )
        if not self.company:
            self.reject(
                self.candidate(0, "none", Passage(self.doc.doc_id, [], 0.0), None),
                "no_company",
                f"document {self.doc.doc_id} names no company: its questions cannot name it",
            )
            outcome.candidates = []
        elif not planned:
            self.reject(
                self.candidate(0, "none", Passage(self.doc.doc_id, [], 0.0), None),
                "no_passage",
                f"document {self.doc.doc_id} has no passage worth asking about (no chunk with a percentage, "
                "amount or ratio)",
            )
        else:
            checked = await asyncio.gather(*(self.checked(i, kind, p) for i, (kind, p) in enumerate(planned)))
            survivors = self.novel([p for p in checked if p is not None])
            calibrated = await asyncio.gather(*(self.hard(p) for p in survivors))
            outcome.kept = [p for p in calibrated if p is not None]
        outcome.rejected = sorted(self.ledger.rejected, key=lambda r: r.problem.id)
        outcome.tokens, outcome.stages = self.ctx.tokens(), self.ctx.stage_usage()
        return outcome


def seed_row(problem: Problem) -> dict[str, Any]:
    """A kept question as a line of the seeds file: the shipped seeds' schema (question, answer, domain,
    entity, snippet with text, doc_id and source_path), with meta.type, meta.evidence and meta.measured."""
    snippet = problem.snippet.model_dump(exclude_none=True) if problem.snippet else None
    meta = {k: v for k, v in problem.meta.items() if k != "quoted"}
    row: dict[str, Any] = {
        "id": problem.id,
        "question": problem.question,
        "answer": problem.answer,
        "domain": problem.domain,
        "entity": problem.entity,
        "snippet": snippet,
        "meta": meta,
    }
    return {k: v for k, v in row.items() if v is not None}
