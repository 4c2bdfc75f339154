"""The mechanical grounding and leakage check of a re-grounded problem (SPEC step 5, appendix D).

A re-grounded problem `(q, d', a*)` must be supported by the new passage d' alone; no fact of the seed
document may travel into it. Facts are read with the finance comparer's readers (figures in base
units: amounts with scale words, percent and basis points, ratios; dates) plus defined terms (quoted
terms and Title Case multi-word terms such as "Consolidated Total Leverage Ratio") and section
references. The rules, in the order they are checked:

1. Seed-only facts. A figure, date, defined term or section reference of q or a* that occurs in the
   seed material the teacher saw (the seed snippet and summary) but not in d', or the seed entity's
   name, rejects the problem: "seed-only fact: 3.50:1.00".
2. Defined terms of q and a* must occur in d' (or in the new entity's name and document title). A term
   the new document itself uses (its text, when given) is the new document's own, not a seed fact, and
   passes rules 1 and 2 ("Event of Default" is in every agreement, if not in d'); the judge still
   confirms that d' alone answers the question.
3. Figures of q are the problem's givens (a question may posit "Consolidated EBITDA of $250,000,000");
   they need not occur in d' but are bound by rule 1. Every figure of a* must occur in d' or q, or be
   reachable from them by a chain of steps, each at most two arithmetic operations (+ - * /; percent
   figures also count as fractions, so "2% of $40,000,000" is one step) over the figures of d', q and
   the results the worked solution already reached (a result written in the solution joins the pool
   only if it is itself so reachable). Equality allows the rounding of the stated figure.
4. A date in a* must occur in d' or q.
5. The problem takes something from d': when every figure of a* follows from q's own givens (its
   figures that d' does not state), q must name a defined term of d' whose definition it applies
   ("Consolidated EBITDA is $250,000,000 and Total Debt $1,000,000,000: the Consolidated Leverage
   Ratio?"). "How much interest on an overdue principal of $100,000 at a rate otherwise applicable of
   10%?" $10,000 uses no passage at all (and ignores the default margin its passage states). With
   `verify.programs`, a problem whose program ran says what it took from d': its quote() calls (meta.quotes);
   it takes nothing when it quoted nothing, and rule 5 reads no guess.
Small counts (integers up to 12) are never evidence either way.

A seed term with an analogue in d' (`analogue`: one holds the other, "Post-Default Rate" and "Default
Rate"; or the same head noun and most words shared) is renamed to it (`Grounding.renames`, `rename`):
the tree is shown to the teacher in the new passage's names, and a reply that still writes the seed's
name is renamed before the check, so a small teacher's habit of copying the seed's term does not lose
a problem the new passage answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from finmbs.verify.finance import Figure, dates, figures

TRIVIAL = 12
_QUOTED = re.compile(r"[“\"]\s*([A-Z][^“”\"\n]{1,80}?)\s*[”\"]")
_TITLE_WORD = r"(?:[A-Z][A-Za-z0-9&’'\-]*|of)"
_TITLE = re.compile(rf"\b[A-Z][A-Za-z0-9&’'\-]*(?:[ \t]+{_TITLE_WORD})+")
_SECTION = re.compile(r"\bSections?\s+(\d+(?:\.\d+)*(?:\s*\([a-z0-9]+\))*)", re.I)
_GIVEN = re.compile(
    r"[^.;?]{0,60}?\b(?:is|was|were|are|of|equals?|totals?|totaling|amounts?\s+to)\s+(?:an?\s+|the\s+)?[-$(\d]"
)
_STARTERS = set(
    "a an the what which who whom whose how if under at for in on by as of and or to its it this that these those "
    "is are was were does do did can could will would should may must has have had assume assuming suppose "
    "given using use according based when where while after before during each every any all no not compute "
    "calculate determine find state what's there then also both per with from into than".split()
)
_MONTHS = set("january february march april may june july august september october november december".split())
_LEGAL = {"inc", "corp", "corporation", "co", "company", "ltd", "llc", "plc", "lp", "l.p", "n.a", "holdings", "the"}


def _norm(text: str) -> str:
    text = text.replace("’", "'").replace("“", '"').replace("”", '"').replace("\u2013", "-").replace("\u2014", "-")
    return re.sub(r"\s+", " ", text).strip().lower()


def _term_key(term: str) -> str:
    return re.sub(r"'s?$", "", _norm(term))


def term_words(term: str) -> tuple[str, ...]:
    """A term as lower-case words, plurals made singular ("Class of Loans" -> class, of, loan)."""
    return tuple(
        w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
        for w in re.findall(r"[a-z0-9]+", term.lower())
    )


def holds(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    """Whether `part` occurs in `words` as consecutive words."""
    return any(words[i : i + len(part)] == part for i in range(len(words) - len(part) + 1))


_FILLER = {"of", "the", "and", "a", "an", "for", "on", "to"}


def _head_run(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether a and b share two or more consecutive words that end one of them (its head noun):
    "Post-Default Rate" and "Default Rate of Interest" share "default rate"."""
    for i in range(len(a)):
        for j in range(len(b)):
            n = 0
            while i + n < len(a) and j + n < len(b) and a[i + n] == b[j + n]:
                n += 1
            if n >= 2 and (i + n == len(a) or j + n == len(b)):
                return True
    return False


def analogue(a: tuple[str, ...], b: tuple[str, ...]) -> float | None:
    """How closely two terms (as `term_words`) name the same thing, lower is closer: 0 the same words,
    1 one holds the other (two words or more: "Post-Default Rate" and "Default Rate"), 1.5 two or more
    consecutive words shared that end one of them ("Post-Default Rate" and "Default Rate of Interest"),
    2 - (shared share) the same head noun with at least half their words shared ("Consolidated Total
    Leverage Ratio" and "Consolidated Leverage Ratio"); None when they are not analogues."""
    if not a or not b:
        return None
    if a == b:
        return 0.0
    short, long = sorted((a, b), key=len)
    if len(short) >= 2 and holds(long, short):
        return 1.0
    if _head_run(a, b):
        return 1.5
    if a[-1] != b[-1]:
        return None
    sa, sb = set(a) - _FILLER, set(b) - _FILLER
    shared = len(sa & sb) / len(sa | sb)
    return 2.0 - shared if shared >= 0.5 and len(sa & sb) >= 2 else None


def rename(text: str, renames: dict[str, str]) -> str:
    """`text` with each seed term (any case, singular or plural, "-", "," or space between words) written as
    its analogue; longer terms first, so "Post-Default Rate" is not half-renamed as "Default Rate"."""
    for old in sorted(renames, key=len, reverse=True):
        words = [re.escape(w) for w in re.findall(r"[A-Za-z0-9]+", old)]
        stop = r"\.?" if old.endswith(".") else ""  # "Inc." ends with its full stop
        pattern = r"(?<![A-Za-z0-9-])" + r"[\s,\-]+".join(words) + stop + r"(s|es)?(?![A-Za-z0-9-])"
        new = renames[old]
        text = re.sub(
            pattern, lambda m, new=new: new + ("" if new.endswith("s") else m.group(1) or ""), text, flags=re.I
        )
    return text


def quoted_terms(text: str) -> set[str]:
    """Terms in quotes, as an agreement defines them (“ Applicable Rate ” means ...)."""
    return {m.group(1).strip() for m in _QUOTED.finditer(text)}


def defined_terms(text: str, *, givens: bool = True) -> set[str]:
    """Quoted terms and Title Case multi-word terms (sentence starters and months stripped; words up
    to a possessive are the owner, not the term). With `givens=False`, a term the text itself gives
    a figure for ("the Adjusted Term SOFR Screen Rate for the Interest Period is 4.35%") is left out."""
    found = quoted_terms(text)
    for m in _TITLE.finditer(text):
        words = m.group(0).split()
        owners = [i for i, w in enumerate(words) if re.search(r"(?:['’]s|s['’])$", w)]
        words = words[owners[-1] + 1 :] if owners else words
        while words and (words[0].lower() in _STARTERS or words[0].lower().rstrip(".") in _MONTHS):
            words.pop(0)
        while words and words[-1] == "of":
            words.pop()
        if sum(w[:1].isupper() for w in words) >= 2 and not any(w.lower().rstrip(".,") in _MONTHS for w in words):
            found.add(" ".join(words))
    terms = {t.strip(" ,.;:") for t in found if len(t) > 3}
    if not givens:
        terms -= {t for t in terms for m in re.finditer(re.escape(t), text) if _GIVEN.match(text, m.end())}
    return terms


def entity_name(entity: str | None) -> str | None:
    """An entity's name without its legal form ("Alphatec Holdings, Inc." -> "Alphatec")."""
    words = [w for w in re.split(r"[\s,]+", entity or "") if w and w.lower().strip(".") not in _LEGAL]
    return " ".join(words) or None


def entity_renames(seed_entity: str | None, entity: str | None) -> dict[str, str]:
    """The seed entity's names (as given, and without its legal form) mapped to the new entity's: the
    first step of threading a tree around e'."""
    if not seed_entity or not entity or _norm(entity_name(seed_entity) or "") == _norm(entity_name(entity) or ""):
        return {}
    pairs = {seed_entity.strip(): entity.strip(), entity_name(seed_entity) or "": entity_name(entity) or entity.strip()}
    return {old: new for old, new in pairs.items() if old and _norm(old) != _norm(new)}


def sections(text: str) -> set[str]:
    return {"section " + re.sub(r"\s+", "", m.group(1)).lower() for m in _SECTION.finditer(text)}


# a count a compound states ("a 360-day year", "a 30-day period"), which the comparer's figures leave out
_COMPOUND = re.compile(r"\b(\d{1,3}(?:,\d{3})*|\d+)-(?:days?|weeks?|months?|years?)\b", re.I)


def text_figures(text: str) -> list[Figure]:
    """The comparer's figures of a longer text, read clause by clause (section references left out)."""
    pieces = re.split(r"\n|(?<=[;:])\s|(?<=\.)\s+(?=[A-Z(])", _SECTION.sub(" ", text))
    return [fig for piece in pieces if piece.strip() for fig in figures(piece)]


def values(fig: Figure) -> set[float]:
    """A figure's readings as plain numbers: its value, and for a percent also the fraction."""
    v = float(fig.value)
    return {v, v / 100} if fig.kind == "percent" else {v}


def tolerance(fig: Figure, value: float) -> float:
    """How far a computed number may be from the figure and still round to it."""
    step = float(fig.step) or 0.0
    scale = 0.01 if fig.kind == "percent" and abs(value) < abs(float(fig.value)) else 1.0
    return max(step * scale / 2, abs(value) * 1e-9)


def trivial(fig: Figure) -> bool:
    return fig.kind in ("plain", "count") and fig.value.denominator == 1 and 0 <= fig.value <= TRIVIAL


def date_keys(text: str) -> set[str]:
    return {d.strftime("%Y-%m-%d" if day else "%Y-%m") for d, day in dates(text)}


class Pool:
    """Numbers a result may be computed from, with every one-operation result over them."""

    def __init__(self, numbers: Iterable[float]):
        self.base = np.unique(np.array([x for x in numbers if np.isfinite(x)] or [0.0], dtype=float))
        self._one = None

    def add(self, value: float) -> None:
        if not self.near(self.base, value, 0.0):
            self.base = np.unique(np.append(self.base, value))
            self._one = None

    @property
    def one(self) -> np.ndarray:
        """Every a op b over the pool (op in + - * /), sorted."""
        if self._one is None:
            a, b = self.base[:, None], self.base[None, :]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                results = np.concatenate([(a + b).ravel(), (a - b).ravel(), (a * b).ravel(), (a / b).ravel()])
            self._one = np.unique(results[np.isfinite(results)])
        return self._one

    @staticmethod
    def near(sorted_values: np.ndarray, targets, tols) -> bool:
        """Whether any target lies within its tolerance of some value."""
        targets, tols = np.atleast_1d(np.asarray(targets, float)), np.atleast_1d(np.asarray(tols, float))
        tols = np.maximum(tols, np.abs(targets) * 1e-9)
        i = np.searchsorted(sorted_values, targets)
        lo = sorted_values[np.clip(i - 1, 0, len(sorted_values) - 1)]
        hi = sorted_values[np.clip(i, 0, len(sorted_values) - 1)]
        return bool(np.any((np.abs(lo - targets) <= tols) | (np.abs(hi - targets) <= tols)))

    def reaches(self, target: float, tol: float) -> bool:
        """Target within `tol` of a pool number, a one-operation result, or r op x (r one-op, x in pool)."""
        if self.near(self.base, target, tol) or self.near(self.one, target, tol):
            return True
        x = self.base[self.base != 0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            needed = [target - x, target + x, x - target, target / x, target * x, x / target if target else x * 0]
            same = np.full_like(x, tol)
            tols = [same, same, same, tol / np.abs(x), tol * np.abs(x), np.abs(x) * tol / (target * target or 1)]
        return any(self.near(self.one, n[np.isfinite(n)], t[np.isfinite(n)]) for n, t in zip(needed, tols))


def from_question(question: str, answer: str) -> bool:
    """Whether every figure of the answer follows from the question's own figures (within two operations):
    the problem needs no passage ("the default rate is 2.0% above a base of 0.5%: the total?" 2.5%),
    where "if the rate otherwise applicable is 5%, what is the Default Rate?" 7.0% needs its margin."""
    return follows(text_figures(question), answer)


def follows(givens: Sequence[Figure], answer: str) -> bool:
    """Whether every figure of the answer (small counts aside; at least one) is reachable from `givens`."""
    figs = [f for f in text_figures(answer) if not trivial(f)]
    pool = Pool(v for f in givens for v in values(f))
    return bool(figs) and all(any(pool.reaches(v, tolerance(f, v)) for v in values(f)) for f in figs)


@dataclass
class Grounding:
    """What one re-grounding passage allows, and what of the seed it must keep out."""

    passage: str
    seed_material: Sequence[str]
    seed_entity: str | None = None
    vocabulary: Sequence[str] = ()
    document: str = ""  # the new document's whole text: the terms it uses are its own

    def __post_init__(self) -> None:
        allowed = "\n".join([self.passage, *self.vocabulary])
        self._allowed_text = _norm(allowed)
        self._passage_text = _norm(self.passage)
        self._document_text = _norm(self.document)
        self._passage_figs = text_figures(self.passage)
        self._passage_values = {v for f in self._passage_figs for v in values(f)}
        self._passage_dates = date_keys(self.passage)
        self._passage_sections = sections(allowed)
        seed = "\n".join(self.seed_material)
        self._seed_values = {v for f in text_figures(seed) if not trivial(f) for v in values(f)}
        self._seed_dates = date_keys(seed)
        self._seed_terms = {_term_key(t) for t in defined_terms(seed)}
        self._seed_sections = sections(seed)

    # ---- helpers
    def _in_passage(self, fig: Figure) -> bool:
        return any(abs(v - p) <= tolerance(fig, v) for v in values(fig) for p in self._passage_values)

    def _term_allowed(self, term: str) -> bool:
        key = _term_key(term)
        keys = (key, key[:-1]) if key.endswith("s") else (key,)
        return any(k in self._allowed_text or k in self._document_text for k in keys)

    # ---- the rules
    def seed_facts(self, text: str) -> Iterator[str]:
        """The seed-only facts in `text`, as written there, in the rules' order (figures, dates, terms,
        section references, the seed entity's name)."""
        for fig in text_figures(text):
            if not trivial(fig) and values(fig) & self._seed_values and not self._in_passage(fig):
                yield fig.text.lstrip("+ ")
        yield from sorted(date_keys(text) & (self._seed_dates - self._passage_dates))
        for term in sorted(defined_terms(text), key=text.find):
            if _term_key(term) in self._seed_terms and not self._term_allowed(term):
                yield term
        for ref in sorted(sections(text) & (self._seed_sections - self._passage_sections)):
            yield ref.title()
        name = entity_name(self.seed_entity)
        if name and _norm(name) in _norm(text) and _norm(name) not in self._allowed_text:
            yield name

    def seed_only(self, text: str) -> str | None:
        """The first seed-only fact in `text`, as written there; None if there is none."""
        return next(self.seed_facts(text), None)

    def passage_terms(self) -> list[str]:
        """The defined terms of d' (and its vocabulary), in order of first use: what a re-grounded question may name."""
        text = "\n".join([self.passage, *self.vocabulary])
        return sorted({t for t in defined_terms(text) if self._term_allowed(t)}, key=text.find)

    def renames(self, texts: Iterable[str]) -> dict[str, str]:
        """Each seed-only defined term of `texts` that has one closest analogue among d's own terms
        (`analogue`), mapped to it; a term with two equally close analogues is left alone."""
        terms = self.passage_terms()
        found: dict[str, str] = {}
        for text in texts:
            for term in defined_terms(text):
                if term in found or _term_key(term) not in self._seed_terms or self._term_allowed(term):
                    continue
                ranked = sorted(
                    (rank, t) for t in terms if (rank := analogue(term_words(term), term_words(t))) is not None
                )
                if ranked and (len(ranked) == 1 or ranked[0][0] < ranked[1][0]):
                    found[term] = ranked[0][1]
        return found

    def derivation_pool(self, question: str, solution: str) -> Pool:
        """Figures of d' and q (with the counts their compounds state: "a 360-day year"), plus each solution
        result reachable from what came before it (small intermediate results too: 1 + 5 + 5 + 1 = 12 is
        how 12 * 12 = 144 is reached)."""
        given = self._passage_figs + text_figures(question)
        counts = [float(m.group(1).replace(",", "")) for t in (self.passage, question) for m in _COMPOUND.finditer(t)]
        pool = Pool([v for f in given for v in values(f)] + counts)
        for fig in text_figures(solution):
            reached = [v for v in values(fig) if pool.reaches(v, tolerance(fig, v))]
            for v in reached:
                pool.add(v)
        return pool

    def check(
        self,
        question: str,
        answer: str,
        solution: str = "",
        quotes: Sequence[object] | None = None,
        *,
        paper: bool = False,
    ) -> str | None:
        """None when the problem passes every rule, else the reason it is rejected; `quotes`: the figures
        its program quoted from d' (rule 5 reads them when given); `paper`: rule 1 alone (appendix D: no
        seed-document fact unless d' has it), rules 2-5 being finmbs's."""
        for text in (question, answer):
            if fact := self.seed_only(text):
                return f"seed-only fact: {fact}"
        if paper:
            return None
        terms = defined_terms(question, givens=False) | defined_terms(answer)
        for term in sorted(terms, key=lambda t: (question + " " + answer).find(t)):
            if not self._term_allowed(term):
                return f"term not in passage: {term}"
        answer_figs = [f for f in text_figures(answer) if not trivial(f)]
        if answer_figs:
            pool = self.derivation_pool(question, solution)
            for fig in answer_figs:
                if not any(pool.reaches(v, tolerance(fig, v)) for v in values(fig)):
                    return f"answer figure not derivable from passage and question: {fig.text.lstrip('+ ')}"
        missing = date_keys(answer) - self._passage_dates - date_keys(question)
        if missing:
            return f"answer date not in passage: {sorted(missing)[0]}"
        if quotes is not None and not quotes:
            return "takes nothing from the passage: its program quotes no figure of it"
        if quotes is None and self.takes_nothing(question, answer):
            return "takes nothing from the passage: its answer follows from the question's own figures"
        return None

    def takes_nothing(self, question: str, answer: str) -> bool:
        """Rule 5: every answer figure follows from q's own givens (its figures that d' does not state)
        and q names no defined term of d'."""
        if not follows([f for f in text_figures(question) if not self._in_passage(f)], answer):
            return False
        return not any(_term_key(t) in self._passage_text for t in defined_terms(question))
