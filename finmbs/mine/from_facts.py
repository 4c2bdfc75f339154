"""Mined questions over engine-chosen facts (`mine.from_facts`, finmbs's; finmbs/mine/facts.py).

For each planned fact set the teacher writes the question and a program over the named facts and givens
(prompt `prompts/mine_facts.txt`); the engine writes the program's first lines (each fact quoted from the
passage, each given bound), so a quote cannot be invented and a name cannot be undefined. With
`mine.engine_program` (finmbs's, on by default) the teacher writes the question alone
(`prompts/mine_facts_question.txt`) and the program's last line is the engine's own operation: the
teacher's line was only ever a copy of the formula the prompt shows it, which the 1.5B left names out of.
Checks before the usual ones (finmbs/mine/questions.py), each a counted rejection:

    program     the teacher's lines do not parse, use a name the engine did not define, rebind a fact or a
                given, quote a figure themselves, leave a fact or a given out, or fail in the sandbox
    operation   the program's result is not the value of the operation the engine chose
    facts       the question does not state a given with its value, or states a fact's value itself

The program's result is the answer (money to the cent, percentages to two decimals; the question ends
with the sentence saying so), and its evidence is the facts' own places in the document.
"""

from __future__ import annotations

import ast
from fractions import Fraction
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field

from finmbs.ingest.index import Index
from finmbs.mbs import finance_operators as fo
from finmbs.mbs.finance_terms import FactName, answer_text, naming_error, pick, written
from finmbs.mbs.programs import BINDS_ANSWER, mended
from finmbs.mine.facts import (
    Fact,
    FactSet,
    Given,
    fiscal_year,
    ixbrl_fact_sets,
    ixbrl_facts,
    locate_facts,
    raw_filing,
    rounding,
    scaled_meaning,
    span_fact_sets,
)
from finmbs.mine.passages import MAX_PASSAGE_CHARS, Passage, body, single_passages
from finmbs.mine.questions import STAGE, DocumentMiner, DocumentOutcome, home_chunk
from finmbs.records import Chunk, Document, Problem
from finmbs.resources import render_prompt
from finmbs.verify.finance import figures
from finmbs.verify.program import refusal, run_program_async
from finmbs.verify.quotes import same_value

HELPERS = {"abs", "round", "min", "max", "sum", "math"}  # names a program may use besides the bound ones
PASSAGES_PER_QUESTION = 6  # passages scanned for fact sets per question asked


class FactAsk(BaseModel):
    """The teacher's reply with `mine.engine_program`: the question over the named facts alone."""

    question: Annotated[str, AfterValidator(written)] = Field(min_length=1)


class FactQuestion(FactAsk):
    """The teacher's reply: the question over the named facts, and the program over their names."""

    program: Annotated[str, AfterValidator(written)] = Field(min_length=1, json_schema_extra=BINDS_ANSWER)


def fact_plan(doc: Document, text: str, chunks: list[Chunk], count: int) -> list[tuple[FactSet, Passage]]:
    """Up to `count` (fact set, passage) pairs for one document: a filing's iXBRL fact sets (each with the
    table rows that show its facts), else, or when none is located in the text, the best passages' figure
    spans; one fact set per passage, an operation not chosen yet preferred."""
    planned: list[tuple[FactSet, Passage]] = []
    raw = raw_filing(doc)
    if raw:
        for fact_set in ixbrl_fact_sets(ixbrl_facts(raw)):
            snippet = locate_facts(fact_set, doc, text, chunks, MAX_PASSAGE_CHARS)
            if snippet is not None and len(planned) < count:
                planned.append((fact_set, Passage(doc.doc_id, [snippet], 0.0)))
        if planned:
            return planned
    used: list[str] = []
    for i, passage in enumerate(single_passages(doc, text, body(text, chunks), count * PASSAGES_PER_QUESTION)):
        if len(planned) >= count:
            break
        sets = span_fact_sets(passage.text, key=f"{doc.doc_id}/{i}")
        if not sets:
            continue
        fresh = [s for s in sets if s.operation not in used] or sets
        alike = tuple(s for s in fresh if s.operation == fresh[0].operation)  # a grid's rows: one drawn, not the first
        chosen = pick(alike, f"{doc.doc_id}/{i}", "fact")
        used.append(chosen.operation)
        planned.append((chosen, passage))
    return planned


def described(fact: Fact) -> str:
    """A fact as the teacher sees it: its name, its text in the passage, and what it is."""
    if fact.concept:
        return (
            f"- {fact.name}: the figure {fact.text!r} of the line {fact.context!r} for the "
            f"{fiscal_year(fact.period or '')} ({scaled_meaning(fact)})"
        )
    shown = fact.literal()
    if fact.kind == "percent":
        shown = f"{float(fact.value):g} (that is {float(fact.value * 100):g}%)"
    return f"- {fact.name} = {shown}: the figure {fact.text!r} of the passage, in: ...{fact.context}..."


def described_given(given: Given) -> str:
    return f"- {given.name} = {given.literal()}: {given.meaning}; state it as {given.stated()}"


def xbrl(fact: Fact) -> dict[str, Any]:
    return {"concept": fact.concept, "period": fact.period, "unit": fact.unit, "scale": fact.scale}


def body_error(source: str, fact_set: FactSet) -> str | None:
    """Why the teacher's program lines cannot stand after the engine's bindings, or None."""
    if why := refusal(source):  # not text, or too long or too deep to parse safely
        return f"the program cannot be read: {why}"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"the program does not parse: {exc.msg} (line {exc.lineno})"
    bound = set(fact_set.names)
    stored: set[str] = set()
    loaded: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "quote":
            return "the program quotes a figure itself: the engine binds the passage's figures"
        if isinstance(node, ast.Name):
            (stored.add if isinstance(node.ctx, ast.Store) else loaded.append)(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
    if rebound := sorted(stored & bound):
        return f"the program rebinds {', '.join(rebound)}: the engine binds them"
    if undefined := sorted(set(loaded) - bound - stored - HELPERS):
        return f"the program uses undefined name(s) {', '.join(undefined)}"
    if unused := [n for n in fact_set.names if n not in loaded]:
        return f"the program leaves out {', '.join(unused)}"
    if "answer" not in stored:
        return "the program does not bind answer"
    return None


def _states(question: str, value: Fraction, kind: str) -> bool:
    """Whether the question states `value` (a rate as its percentage, an amount or count as read)."""
    for figure in figures(question):
        read = figure.value / 100 if figure.kind == "percent" and kind == "percent" else figure.value
        if same_value(read, value):
            return True
    return False


def stating_error(question: str, fact_set: FactSet) -> str | None:
    """Why the question fails its facts: a given it does not state with its value, or a fact it states."""
    for given in fact_set.givens:
        if not _states(question, given.value, given.kind):
            return f"the question does not state {given.name} = {given.stated()}"
    for fact in fact_set.facts:
        if fact.text in question or (not fact.concept and _states(question, fact.value, fact.kind)):
            return f"the question states the passage's figure {fact.text!r} ({fact.name}) itself"
    return None


NAME = "[NAME]"  # where the teacher's words naming the figure go in the engine's question


def engine_question(fact_set: FactSet, short: str, document: str, name: str = NAME) -> str:
    """`mine.engine_question`: the question the engine writes for its operation, stating every given with
    its value and naming the passage's figure by `name` (the teacher's words); a filing's facts are named
    by their statement lines, so their question needs no words from the teacher."""
    stated = {g.name: g.stated() for g in fact_set.givens}
    head = f"Under {short}'s {document}"
    if fact_set.operation == "interest" and "margin" in fact_set.names:
        return (
            f"{head}, a loan of {stated['principal']} bears interest at a benchmark rate of {stated['benchmark']} "
            f"plus {name}. How much interest accrues on it over {stated['days']}, on a 360-day year?"
        )
    if fact_set.operation == "all_in_rate":
        return (
            f"{head}, a loan bears interest at a benchmark rate of {stated['benchmark']} plus {name}. At what "
            "rate per annum does it bear interest?"
        )
    if fact_set.operation == "interest":
        return (
            f"{head}, how much accrues on a principal of {stated['principal']} over {stated['days']} at {name}, "
            "on a 360-day year?"
        )
    if fact_set.operation == "fee":
        return (
            f"{head}, the total commitments are {stated['commitment']}, of which {stated['used']} is drawn "
            f"throughout a period of {stated['days']}. How much {name} accrues on the unused commitments over "
            "that period, on a 360-day year?"
        )
    if fact_set.operation == "headroom":
        fall = fact_set.formula.startswith("numerator")
        return (
            f"{head}, the numerator of the ratio that {name} governs is {stated['numerator']} and its "
            f"denominator is {stated['denominator']}. By how much can the numerator {'fall' if fall else 'grow'} "
            f"before the ratio {'falls below' if fall else 'exceeds'} the level the {document} sets?"
        )
    return f"According to {short}'s {document}, what is {fact_set.description}?"


def figure_name_error(name: str, text: str, fact_set: FactSet) -> str | None:
    """Why the teacher's words do not name the passage's figure as the question uses it: the checks the
    engine's finance operators make (`finance_operators.role_error`, `passage_name_error`). A margin the
    question adds to a benchmark must be one the passage adds to a rate, not to the rate otherwise
    applicable, and be named as a margin, spread or fee; a figure inside a defined term's definition is named
    by that term. Read in a mining run: the 2% of Realty Income's “Post-Default Rate” definition, named "the
    Applicable Margin for Loans that are Base Rate Loans", made a question whose solver needs another
    provision's figure, labelled with the 2%."""
    over_benchmark = "benchmark" in fact_set.names
    for fact in fact_set.facts:
        if fact.concept or fact.char_start is None:
            continue
        role, base = fo.role_of(text, fact.char_start, fact.text, fact.value, fact.kind)
        figure = fo.QuotedFigure(fact.name, fact.text, fact.value, fact.char_start, role, base, fact.context)
        if over_benchmark and base == fo.OTHERWISE:
            return f"the passage adds {fact.text!r} to the rate otherwise applicable, not to a benchmark"
        if over_benchmark:
            why = fo.role_error(name, fo.ADD_ON, fo.BENCHMARK)
        else:
            why = fo.role_error(name, role, base) if role else None
        if why or (why := fo.passage_name_error(name, text, figure)):
            return why
    return None


def document_kind(fact_set: FactSet) -> str:
    """What the questions call the document: a filing's facts come from an annual report."""
    return "annual report" if any(f.concept for f in fact_set.facts) else "credit agreement"


class FactMiner(DocumentMiner):
    """A DocumentMiner whose candidates are questions over planned fact sets (`fact_plan`)."""

    def __init__(self, *args: Any, sets: list[FactSet], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sets = sets

    async def ask(self, number: int, kind: str, passage: Passage) -> FactAsk | FactName | None:  # type: ignore[override]
        fact_set = self.sets[number]
        teacher = self.ctx.teachers[number % len(self.ctx.teachers)]
        mine = self.ctx.config.mine
        if mine.engine_question and any(f.concept for f in fact_set.facts):
            # a filing's facts are named by their statement lines: nothing to ask
            return FactName.model_construct(name=fact_set.description)
        template, shape = (
            ("mine_facts_name", FactName)  # the engine's question; the teacher names the figure
            if mine.engine_question
            else ("mine_facts_question", FactAsk)  # the engine's program line; the teacher writes the question
            if mine.engine_program
            else ("mine_facts", FactQuestion)
        )
        document = document_kind(fact_set)
        prompt = render_prompt(
            template,
            company=self.company,
            short=self.name,
            title=self.doc.title or self.doc.doc_id,
            passage=passage.text,
            facts="\n".join(described(f) for f in fact_set.facts),
            givens="\n".join(described_given(g) for g in fact_set.givens) or "- none",
            description=fact_set.description,
            formula=fact_set.formula,
            kind_of_document=document,
            question=engine_question(fact_set, self.name, document),
        )
        [reply] = await self.ctx.gateway.structured(
            teacher, shape, role="teacher", messages=[{"role": "user", "content": prompt}]
        )
        self.ctx.tick(STAGE)
        return reply

    def candidate(self, number: int, kind: str, passage: Passage, reply: Any) -> Problem:
        """The candidate: the question (with the sentence on its answer's form), the facts, givens and
        operation, and the facts' places in the document as its evidence."""
        problem = super().candidate(number, kind, passage, None)
        if not passage.parts:  # a document-level rejection (no facts, no company)
            return problem
        fact_set = self.sets[number]
        snippet = passage.parts[0]
        evidence = []
        for fact in fact_set.facts:
            start = (snippet.char_start or 0) + (fact.char_start or 0)
            home = home_chunk(self.chunks, start)
            evidence.append(
                {
                    "text": fact.text,
                    "char_start": start,
                    "char_end": start + len(fact.text),
                    "section_path": home.section_path if home else "",
                    "page": home.page if home else None,
                }
            )
        meta = {
            **problem.meta,
            "operation": fact_set.operation,
            "formula": fact_set.formula,
            "facts": [
                {
                    "name": f.name,
                    "text": f.text,
                    "value": f.literal(),
                    "context": f.context,
                    **(xbrl(f) if f.concept else {}),
                }
                for f in fact_set.facts
            ],
            "givens": {g.name: g.literal() for g in fact_set.givens},
            "evidence": evidence,
        }
        question = reply.question.strip() if isinstance(reply, FactAsk) else ""
        if isinstance(reply, FactName):
            question = engine_question(fact_set, self.name, document_kind(fact_set), reply.name.strip().rstrip("."))
            meta["figure_name"] = reply.name
        if question and "round" not in question.lower():
            question = f"{question} {rounding(fact_set.unit)}"
        return problem.model_copy(update={"question": question, "meta": meta})

    async def grounded(self, problem: Problem, reply: Any, passage: Passage) -> Problem | None:
        """The candidate with the engine's bindings and the teacher's lines run as its program, and its
        result as the answer, or None (the rejection recorded): the checks `program`, `operation`, `facts`."""
        fact_set = self.sets[int(problem.id.rsplit(".q", 1)[1])]
        if isinstance(reply, FactName) and (
            why := naming_error(reply.name) or figure_name_error(reply.name, passage.text, fact_set)
        ):
            self.reject(problem, "facts", why)
            return None
        if self.ctx.config.mine.engine_program or isinstance(reply, FactName):  # the engine's operation line
            written = f"answer = {fact_set.formula}"
        else:
            written = mended(self.ctx, reply.program.strip())
            problem.meta["program_as_written"] = reply.program
        if why := body_error(written, fact_set):
            self.reject(problem, "program", why)
            return None
        source = f"{fact_set.prelude()}\n{written}"
        problem.meta["program"] = source
        result = await run_program_async(source, passage.text)
        if not result.ok or result.value is None:
            self.reject(problem, "program", f"program failed: {result.error}")
            return None
        if not same_value(Fraction(result.value), fact_set.value):
            self.reject(
                problem,
                "operation",
                f"the program gives {result.value}, the chosen operation ({fact_set.formula}) "
                f"{float(fact_set.value)!r}",
            )
            return None
        answer = answer_text(result.value, fact_set.unit)
        problem = problem.model_copy(update={"answer": answer})
        if why := stating_error(problem.question, fact_set):
            self.reject(problem, "facts", why)
            return None
        return problem


async def mine_facts_document(
    ctx: Any, index: Index, doc: Document, text: str, chunks: list[Chunk], options: Any, decontaminator: Any
) -> DocumentOutcome:
    """One document mined from its facts: its fact plan, then the FactMiner over it; a document with no
    fact set is one counted `no_facts` rejection."""
    planned = fact_plan(doc, text, chunks, options.per_document)
    miner = FactMiner(ctx, doc, text, chunks, options, decontaminator, sets=[s for s, _ in planned])
    if not planned and miner.company:
        outcome = DocumentOutcome(doc_id=doc.doc_id)
        miner.reject(
            miner.candidate(0, "none", Passage(doc.doc_id, [], 0.0), None),
            "no_facts",
            f"document {doc.doc_id} has no fact set to compute over (no rate, fee or ratio level in its best "
            "passages, no iXBRL statement facts)",
        )
        outcome.rejected = list(miner.ledger.rejected)
        outcome.tokens, outcome.stages = ctx.tokens(), ctx.stage_usage()
        return outcome
    return await miner.mine([(s.kind, p) for s, p in planned])
