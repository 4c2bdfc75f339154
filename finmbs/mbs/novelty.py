"""Answer matching between problems, and the novelty guard.

Appendix C asks for problems that are "substantively new rather than a paraphrase"; appendix B.3 asks
that a subproblem not reveal its parent's answer. Both come down to comparing two problems:

- `same_answer`: the two answers are equal by the domain's checker (math-verify in math, the
  finance comparer in finance; an undecided comparison is not a match);
- `reveals`: a subproblem gives away its parent's answer: its own answer is the parent's, or its
  question states the parent's answer (a figure of the question equal to it, short counts aside)
  where the parent's own question does not state it as a given;
- `restated`: a synthetic problem restates another problem when it has the same answer and
  near-identical text (`similarity` >= `novelty.max_similarity`) and does not ask about another
  document (`grounded_apart`: another document, and each question names its own entity or takes its
  answer from its own passage); whatever its answer and document, it copies its seed when it
  reproduces most of the seed's long word n-grams (`copies_seed`: the overlap that `finmbs export`
  drops as contamination by the seeds, so a problem counted here as qualified is one export keeps).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from difflib import SequenceMatcher
from fractions import Fraction

from finmbs.config import NoveltySettings
from finmbs.mbs.leakage import entity_name, from_question
from finmbs.mbs.stages import Stage
from finmbs.ngrams import NgramIndex, Reference
from finmbs.records import Problem
from finmbs.verify.finance import compare, compare_figures, figures
from finmbs.verify.math import math_equal

STAGE = Stage.NOVELTY
_TOKEN = re.compile(r"\w+|[^\w\s]")
SHORT_COUNT = 9  # finance: a whole number up to this is too common in text to count as stating an answer
# math numbers as written: \frac{a}{b} (\dfrac, \tfrac), a/b, 1,470 and plain integers and decimals
_MATH_NUMBER = re.compile(
    r"\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}"
    r"|(?<![\w.])(-?\d+)\s*/\s*(\d+)(?![\w.])"
    r"|(?<![\w.,])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)(?![\w]|\.\d|,\d{3})"
)
# a lone letter joined to a spaced operator: "x + 2.0%", "5 + M" (a rating such as "A-1" has no spaces)
_UNKNOWN = re.compile(r"(?<![\w.$(])[A-Za-z]\s+[-+*/×]\s|\s[-+*/×]\s+[A-Za-z](?![\w)])")
MAX_ANSWER_WORDS = 12  # a final answer longer than this is a sentence ("$1,250,000 per fiscal quarter" is 4)


def same_answer(domain: str, a: str, b: str, question: str | None = None) -> bool:
    if domain == "math":
        return math_equal(a, b)
    return compare(a, b, question=question).verdict == "equal"


def similarity(a: str, b: str) -> float:
    """How much of the shorter text the longer one repeats, in order: matched word tokens over the
    shorter text's tokens, in [0, 1] (case and spacing aside). A rewording that adds a clause to the
    seed scores near 1; two problems sharing a frame but not their figures score lower."""
    x, y = _TOKEN.findall(a.lower()), _TOKEN.findall(b.lower())
    if not x or not y:
        return 0.0
    matched = sum(block.size for block in SequenceMatcher(None, x, y, autojunk=False).get_matching_blocks())
    return matched / min(len(x), len(y))


def _same_figure(a, b, question: str) -> bool:
    """Whether two figures state the same value (units and scale words aside): each equal to the other,
    so "2.0%" states "2%" but "2.5%", which the comparer rounds to a gold of "2%", does not."""
    return compare_figures(a, b, question).verdict == "equal" and compare_figures(b, a, question).verdict == "equal"


def math_numbers(text: str) -> list[Fraction]:
    """Every number `text` writes, exactly: fractions (\\frac{3}{4}, 3/4), 1,470, -2, 0.75."""
    found = []
    for m in _MATH_NUMBER.finditer(text):
        num, den = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if num is not None:
            if int(den):
                found.append(Fraction(int(num), int(den)))
            continue
        found.append(Fraction(m.group(5).replace(",", "")))
    return found


_HOW_MANY = re.compile(r"\bhow\s+many\b", re.I)  # a question that asks for a count


def math_number(answer: str) -> Fraction | None:
    """The value of a math answer that is one number (dollar signs, \\boxed and spaces aside), else None."""
    text = re.sub(r"\\boxed\{(.*)\}", r"\1", answer.strip().strip("$").strip())
    m = _MATH_NUMBER.fullmatch(text.replace(" ", "") if "frac" not in text else text)
    return math_numbers(m.group(0))[0] if m else None


def _states(domain: str, text: str, answer: str, question: str, counts: bool = True) -> bool:
    """Whether `text` states `answer`: in math any number equal to it (fractions and decimals alike; small
    counts too unless `counts` is False); in finance a single figure that is not a short count (a whole
    number up to 9)."""
    if domain == "math":
        value = math_number(answer)
        if value is None or (not counts and value.denominator == 1 and abs(value) <= SHORT_COUNT):
            return False
        return value in math_numbers(text)
    gold = figures(answer)
    if len(gold) != 1 or (
        gold[0].kind in ("plain", "count") and gold[0].step >= 1 and abs(gold[0].value) <= SHORT_COUNT
    ):
        return False  # "5.00" is a figure, "5" may be a count
    return any(_same_figure(f, gold[0], question) for f in figures(text))


LEAK_FORMS = ("answer", "question", "solution")  # stages.answer_leaks: how a subproblem can reveal its parent's answer


def revealing(
    child: Problem, parent: Problem, forms: Collection[str] = LEAK_FORMS, shown: str = ""
) -> tuple[str, str] | None:
    """(form, why) when `child` gives away `parent`'s answer in one of `forms` (stages.answer_leaks): its
    answer is the parent's (`answer`), its question states it (`question`), or `shown`, the worked solution
    students read beside it, states it (`solution`); else None."""
    if "answer" in forms and same_answer(parent.domain, child.answer, parent.answer, parent.question):
        return "answer", f"reveals the parent's answer: its answer {child.answer!r} is the parent's ({parent.answer!r})"
    if not {"question", "solution"} & set(forms) or _states(
        parent.domain, parent.question, parent.answer, parent.question
    ):
        return None  # a figure the parent's own question gives is a given of the child too, not a reveal
    if "question" in forms and _states(parent.domain, child.question, parent.answer, parent.question):
        return "question", f"reveals the parent's answer: its question states {parent.answer!r}"
    if "solution" in forms and shown and _states(parent.domain, shown, parent.answer, parent.question):
        return "solution", f"reveals the parent's answer: its worked solution states {parent.answer!r}"
    return None


def reveals(child: Problem, parent: Problem, by_answer: bool = True, shown: str = "") -> str | None:
    """Why `child` gives away `parent`'s answer in any form (by its answer, unless `by_answer` is False; by
    its question; by `shown`), or None."""
    forms = LEAK_FORMS if by_answer else ("question", "solution")
    found = revealing(child, parent, forms, shown)
    return found[1] if found else None


def gives_own_answer(problem: Problem) -> str | None:
    """Why a teacher-written question gives its own answer away, or None: small teachers copy the answer
    into the question ("... (answer: 7)"), or make the answer the question's only given ("if the default
    rate is 2.0% above the rate otherwise payable, what is the total rate?" 2.0%), and a trace then
    "verifies" by reading it back. A figure that is its question's only one and equals its answer
    (short counts aside) leaves nothing to work out; one given among others (a floor that applies) does."""
    answer = problem.answer.strip()
    if answer and re.search(rf"\banswers?\b\W{{0,6}}(?:is\W{{0,3}})?{re.escape(answer)}(?!\w)", problem.question, re.I):
        return f"the question gives its own answer ({answer!r})"
    if answer and _only_figure(problem):
        return f"the question's only figure is its own answer ({answer!r}): nothing is worked out"
    return None


def sentence_answer(problem: Problem) -> str | None:
    """Why the answer is no single short value that a reward function can check, or None: small teachers
    answer a lookup with the clause itself ("The interest rate otherwise applicable to such Class of
    Loans plus an additional two percent (2.0%) per annum"), or, in finance, with a formula over an
    unknown the question never gives ("x + 2.0%")."""
    words = len(problem.answer.split())
    if words > MAX_ANSWER_WORDS:
        return f"the answer is a sentence of {words} words, not one short value a reward can check"
    if problem.domain == "finance" and (m := _UNKNOWN.search(problem.answer)):
        return f"the answer is a formula over an unknown ({m.group(0).strip()!r}), not one value a reward can check"
    return None


def negative_count(problem: Problem) -> str | None:
    """Why a math answer is no value its question can have, or None: a question that asks "how many"
    answered by a negative number ("a pizza cut into 9 slices, 6 friends each eat 3: how many are left?"
    -9, which the 1.5B wrote, and its program and traces agreed on) states quantities that contradict
    each other. A program computes such an answer faithfully, so only its form gives it away."""
    if problem.domain != "math" or not _HOW_MANY.search(problem.question):
        return None
    value = math_number(problem.answer)
    if value is not None and value < 0:
        return (
            f"the question asks how many and the answer is negative ({problem.answer!r}): "
            "its quantities contradict each other"
        )
    return None


def unworkable(problem: Problem) -> tuple[str, str] | None:
    """(check, reason) when a teacher-written problem can be no RLVR problem whatever its traces say:
    `own_answer` (`gives_own_answer`) or `answer_form` (`sentence_answer`, `negative_count`); None otherwise."""
    if why := gives_own_answer(problem):
        return "own_answer", why
    if why := sentence_answer(problem) or negative_count(problem):
        return "answer_form", why
    return None


def _only_figure(problem: Problem) -> bool:
    """Whether the question states its answer and no other figure."""
    domain, question, answer = problem.domain, problem.question, problem.answer.strip()
    if not _states(domain, question, answer, question, counts=False):  # "3 pens ... how many?" 3 may be a count
        return False
    if domain == "math":
        return all(n == math_number(answer) for n in math_numbers(question))
    [gold] = figures(answer)
    return all(_same_figure(f, gold, question) for f in figures(question))


def copies_seed(problem: Problem, seed: Problem, settings: NoveltySettings) -> str | None:
    """Why `problem` copies its seed's wording, or None: it reproduces `seed_coverage` of the seed's word
    `seed_ngram`-grams, the overlap `finmbs export` drops as contamination by the seeds. A variant that
    changes only a number near the end of a long seed has another answer and is no restatement, but it
    is no new problem either, and would be counted qualified here only to be dropped at export."""
    index = NgramIndex(
        [Reference("seeds", seed.id, seed.question)], settings.seed_ngram, min_coverage=settings.seed_coverage
    )
    found = index.overlaps(problem.question, whole=True)
    if found is None:
        return None
    _, coverage, _ = found
    return (
        f"copies its seed {seed.id}: reproduces {coverage:.0%} of its {settings.seed_ngram}-word sequences "
        f"(>= {settings.seed_coverage:.0%}, what export drops as contamination)"
    )


def names_its_entity(problem: Problem) -> bool:
    """Whether the question names its own entity (by its name without the legal form)."""
    name = entity_name(problem.entity)
    return bool(name) and name.lower() in problem.question.lower()


def needs_its_passage(problem: Problem) -> bool:
    """Whether the question's answer takes something from its passage: not every answer figure follows
    from the question's own figures (`leakage.from_question`)."""
    return not from_question(problem.question, problem.answer)


def grounded_apart(a: Problem, b: Problem) -> bool:
    """Whether two problems ask about different documents: grounded on different ones, and either each
    question names its own entity or each answer takes something from its passage. The same lookup
    about another agreement (a re-grounded lookup whose figure happens to match) asks about other facts;
    a question that names no entity and holds all it needs is the same problem on any document (copied
    onto another agreement, it is "re-grounded" without change)."""
    docs = [p.snippet.doc_id or p.snippet.source_path if p.snippet else None for p in (a, b)]
    if None in docs or docs[0] == docs[1]:
        return False
    return (names_its_entity(a) and names_its_entity(b)) or (needs_its_passage(a) and needs_its_passage(b))


def restated(problem: Problem, others: list[tuple[str, Problem]], settings: NoveltySettings) -> str | None:
    """Why `problem` restates one of `others` ((relation, problem) pairs) or copies its seed, or None."""
    seed = next((o for _, o in others if o.id == problem.provenance.seed_id), None)
    if seed is not None and (why := copies_seed(problem, seed, settings)):
        return why
    for relation, other in others:
        if other.id == problem.id or grounded_apart(problem, other):
            continue
        if not same_answer(problem.domain, problem.answer, other.answer, other.question):
            continue
        score = similarity(problem.question, other.question)
        if score >= settings.max_similarity:
            return (
                f"restates its {relation} {other.id}: same answer {other.answer!r}, "
                f"text similarity {score:.2f} >= {settings.max_similarity}"
            )
    return None
