"""A scripted finance world: the arithmetic world (`world.py`) behind real finance seeds and documents.

Each seed question is registered with a shadow expression ("Compute (7 + 8) * (9 - 1)."): wherever a
prompt carries the seed question, the world reads the shadow instead, so decomposition, leaf synthesis,
composition and the students work exactly as in the arithmetic world, and a correct solution of the
seed answers the seed's real gold answer; asked for a decomposed seed's program (`verify.programs`), the
teacher writes one that computes the gold answer (its shadow children do not compose to it). Re-grounding
tasks work on the real passages:

- extraction: the teacher copies, verbatim, the excerpt chunk of the new document with the most
  figures and names the document id as the entity (`misquote`: for document ids containing one of
  these strings it alters a figure, so the passage is not verbatim); with `stages.extract: select` it
  chooses that excerpt by its number (`misquote`: a number no excerpt has);
- re-grounding: every node's integers are mapped onto whole-number figures of the new passage (the
  same mapping across the tree), the question names the new entity, and the worked solution shows
  each operation; `plant`: for entities containing one of these strings, a figure of the seed passage
  is added to the root (a seed-only fact); `invent`: a figure found nowhere is added (the judge's case);
- the answerability judge: answerable when every figure of the question is in the passage, supported
  when the answer is the expression's value;
- mining (`finmbs seeds mine`): the teacher asks "Under NAME's credit agreement, using the passage:
  Compute EXPR." over the passage's first whole-number figures (lookup `a * 1`, one-step `a + b`,
  multi-step and cross-passage `(a + b) * c`), quoting the passage lines that hold them; for companies
  containing one of `mine_misquote` a quoted figure is altered, `mine_anonymous` the question names no
  company, `mine_wrong` the stated answer is off by one, `mine_invent` a figure found nowhere is added,
  `mine_repeat` every question of the document is the same one.

`agreements_index` builds the small real index the tests and `bench/bench_finance.py` re-ground on:
the opening articles (definitions with their pricing grids) of three real credit agreements from
`../shared/data/credit_agreements`, cut to keep the embedding work small, plus a byte-identical copy
of one of them under another name (the same agreement ingested twice). Ingest is idempotent by content
hash, so building it again in the same folder is free.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from finmbs.config import IndexSettings
from finmbs.ingest import ingest_paths
from finmbs.mbs.leakage import quoted_terms, text_figures, trivial
from finmbs.testing.server import Reply, Request
from finmbs.testing.world import (
    PROGRAM_MARKER,
    SPANS_MARKER,
    TASK_MARKERS,
    World,
    blocks,
    choosing_program,
    expression,
    norm,
    value,
)
from finmbs.verify.finance import figures

FINANCE_MARKERS = {
    "extract": "find the analogous passage",
    "select": "choose the analogous passage",
    "reground": "re-ground a synthetic problem tree",
    "answerable": "the passage alone must suffice",
    "equivalence": "grading a financial question-answering",
    "mine": "a set of hard finance questions",
}
INVENTED = 987654
_NODE = re.compile(r'<node path="([^"]*)"[^>]*>\s*Problem:(.*?)\nSolution:', re.DOTALL)
_BOXED = re.compile(r"\\boxed\{(-?\d+)\}")


def whole_figures(text: str, small: bool = False) -> list[int]:
    """Distinct positive whole-number figures of a text (small counts only with `small`), in order."""
    found = [
        int(f.value)
        for f in text_figures(text)
        if f.value.denominator == 1 and f.value > 0 and (small or not trivial(f))
    ]
    return list(dict.fromkeys(found))


def quoting_program(expr: str, passage: str) -> str:
    """verify.programs: "answer = EXPR" with each figure of the passage bound by quote(its text, value)."""
    texts: dict[int, str] = {}
    for fig in text_figures(passage):
        if fig.value.denominator == 1 and fig.value > 0:
            texts.setdefault(int(fig.value), fig.text.strip("()+ "))
    quoted = re.sub(
        r"\d+",
        lambda m: f"quote({texts[int(m.group())]!r}, {m.group()})" if int(m.group()) in texts else m.group(),
        expr,
    )
    return f"answer = {quoted}"


def stepwise(expr: str) -> str:
    """A worked solution that shows every operation, innermost first."""
    steps = []

    def walk(node: ast.expr) -> int:
        if isinstance(node, ast.BinOp):
            left, right = walk(node.left), walk(node.right)
            result = value(f"({left}) {_op(node)} ({right})")
            steps.append(f"{left} {_op(node)} {right} = {result}.")
            return result
        return int(node.value)  # type: ignore[attr-defined]

    total = walk(ast.parse(expr, mode="eval").body)
    return " ".join(steps) or f"The value is {total}."


def _op(node: ast.BinOp) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]


@dataclass
class FinanceWorld(World):
    """`seeds`: seed question -> (gold answer, shadow expression)."""

    seeds: dict[str, tuple[str, str]] = field(default_factory=dict)
    misquote: set[str] = field(default_factory=set)
    plant: set[str] = field(default_factory=set)
    invent: set[str] = field(default_factory=set)
    plant_once: bool = False  # plant only in a first re-grounding, not when told why it was rejected
    mispath: bool = False  # re-grounded nodes come back under paths the tree does not have ("1" for "0")
    seed_entity: set[str] = field(default_factory=set)  # documents for which step 1 names the seed's entity as e'
    mine_misquote: set[str] = field(default_factory=set)  # mining, by company: these knobs (see the docstring)
    mine_anonymous: set[str] = field(default_factory=set)
    mine_wrong: set[str] = field(default_factory=set)
    mine_invent: set[str] = field(default_factory=set)
    mine_repeat: set[str] = field(default_factory=set)

    def __call__(self, request: Request) -> Reply:
        text = request.messages[0]["content"] if request.messages else request.text
        task = next((name for name, marker in FINANCE_MARKERS.items() if marker in text), None)
        if task:
            return Reply(texts=[json.dumps(getattr(self, task)(text))])
        seed = next((q for q in self.seeds if q in text), None)
        if seed is None:
            return super().__call__(request)
        gold, shadow = self.seeds[seed]
        if TASK_MARKERS["program_parent"] in text:
            return Reply(texts=[json.dumps({"program": f"answer = {float(figures(gold)[0].value)!r}"})])
        messages = [{**m, "content": m["content"].replace(seed, f"Compute {shadow}.")} for m in request.messages]
        reply = super().__call__(Request(request.path, {**request.body, "messages": messages}))
        if "<problem>" in text and seed in blocks(text, "problem")[-1]:  # solving the seed itself
            right = str(value(shadow))
            reply.texts = [
                _BOXED.sub(lambda m: "\\boxed{%s}" % (gold if m.group(1) == right else "999"), t) for t in reply.texts
            ]
        return reply

    # re-grounding tasks --------------------------------------------------------------------------
    @staticmethod
    def best_excerpt(text: str, chunks: list[str]) -> int:
        """The excerpt a teacher takes: one holding a term the seed passage quotes, then the most figures."""
        terms = quoted_terms(blocks(text, "seed_passage")[0])
        return min(
            range(len(chunks)),
            key=lambda i: (not any(t in chunks[i] for t in terms), -len(whole_figures(chunks[i], small=True))),
        )

    def extract(self, text: str) -> dict:
        doc_id = re.search(r'<new_document id="([^"]*)"', text).group(1)  # type: ignore[union-attr]
        document = re.search(r"<new_document[^>]*>\n(.*)\n</new_document>", text, re.DOTALL).group(1)  # type: ignore[union-attr]
        chunks = document.split("\n...\n")
        best = chunks[self.best_excerpt(text, chunks)]
        passage = best.split("\n", 1)[1] if best.startswith("[") and "\n" in best else best
        passage = passage.strip()[:1500].rsplit(" ", 1)[0]
        if any(m in doc_id for m in self.misquote):  # one figure (or, with none, one word) changed
            changed = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), passage, count=1)
            passage = changed if changed != passage else re.sub(r"\bthe\b", "such", passage, count=1)
        return {"entity": self.entity(text, doc_id), "passage": passage}

    def select(self, text: str) -> dict:
        """The same excerpt as `extract`, chosen by number (a `misquote` document: a number out of range)."""
        doc_id = re.search(r'<new_document id="([^"]*)"', text).group(1)  # type: ignore[union-attr]
        chunks = re.findall(r'<excerpt n="\d+">\n(.*?)\n</excerpt>', text, re.DOTALL)
        number = len(chunks) + 5 if any(m in doc_id for m in self.misquote) else self.best_excerpt(text, chunks) + 1
        return {"reason": "the same provision", "entity": self.entity(text, doc_id), "excerpts": [number]}

    def entity(self, text: str, doc_id: str) -> str:
        """e' as the world names it: the document id, or for a `seed_entity` document the seed's entity."""
        return blocks(text, "seed_entity")[0].strip() if any(m in doc_id for m in self.seed_entity) else doc_id

    def reground(self, text: str) -> dict:
        entity = blocks(text, "new_entity")[0].strip()
        passage = blocks(text, "new_passage")[0]
        numbers = whole_figures(passage, small=True) or [13, 14, 15]
        nodes = [(path, norm(expression(question))) for path, question in _NODE.findall(blocks(text, "tree")[0])]
        constants = sorted({int(c) for _, e in nodes for c in re.findall(r"\d+", e)})
        mapping = {c: numbers[i % len(numbers)] for i, c in enumerate(constants)}
        extra = ""
        if any(m in entity for m in self.plant) and not (self.plant_once and "<rejected>" in text):
            planted = [n for n in whole_figures(blocks(text, "seed_passage")[0]) if n not in numbers]
            extra = f" + {planted[0]}" if planted else ""
        if any(m in entity for m in self.invent):
            extra += f" + {INVENTED}"
        replies = []
        for i, (path, expr) in enumerate(nodes):
            new = re.sub(r"\d+", lambda m: str(mapping[int(m.group())]), expr) + (extra if i == 0 else "")
            replies.append(
                {
                    "path": f"{int(path.split('.')[-1]) + 1}" if self.mispath else path,
                    "question": f"For {entity}, using the passage: Compute {new}.",
                    "solution": stepwise(new),
                    "answer": str(value(new)),
                    **(
                        (
                            choosing_program(new, text)
                            if SPANS_MARKER in text
                            else {"program": quoting_program(new, passage)}
                        )
                        if PROGRAM_MARKER in text
                        else {}
                    ),
                }
            )
        return {"nodes": replies}

    def answerable(self, text: str) -> dict:
        passage = set(whole_figures(blocks(text, "passage")[0], small=True))
        expr = expression(blocks(text, "question")[0])
        missing = [n for n in whole_figures(expr) if n not in passage]
        supported = blocks(text, "proposed_answer")[0].strip() == str(value(expr))
        reason = f"{missing[0]} is not in the passage" if missing else "every figure is in the passage"
        return {"answerable": not missing, "supported": supported, "reason": reason}

    def mine(self, text: str) -> dict:
        """One mined question over the passage's figures, with the passage lines holding them as evidence."""
        company = blocks(text, "company")[0].strip()
        name = re.search(r"Name (.+?) in the question", text).group(1)  # type: ignore[union-attr]
        kind = re.search(r"Question type \((\w+)\)", text).group(1)  # type: ignore[union-attr]
        passage = blocks(text, "passage")[0]
        select = passage.lstrip().startswith("[1] ")  # --evidence select: numbered lines, answered by number
        if select:
            passage = re.sub(r"(?m)^\[\d+\] ", "", passage)
        all_lines = [line.strip() for line in passage.split("\n") if line.strip()]
        lines = [line for line in passage.split("\n") if whole_figures(line, small=True)]
        numbers = [n for n in whole_figures(passage, small=True) if n >= 2] or [13, 14, 15]
        a, b, c = (numbers * 3)[:3]
        expr = {"lookup": f"{a} * 1", "one_step": f"{a} + {b}"}.get(kind, f"({a} + {b}) * {c}")
        if any(m in company for m in self.mine_repeat):  # the same question whatever the passage
            expr = "(2 + 3) * 4"
        if any(m in company for m in self.mine_invent):
            expr += f" + {INVENTED}"
        quotes = list(
            dict.fromkeys(next((ln for ln in lines if n in whole_figures(ln, small=True)), "") for n in (a, b, c))
        )
        quotes = [q.strip() for q in quotes if q.strip()] or [passage.strip()[:200]]
        if any(m in company for m in self.mine_misquote):
            changed = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), quotes[0], count=1)
            quotes[0] = changed if changed != quotes[0] else re.sub(r"\bthe\b", "such", quotes[0], count=1)
        if select:  # the numbers of the quoted lines (misquote: a number no line has)
            quotes = (
                [len(all_lines) + 5]
                if any(m in company for m in self.mine_misquote)
                else [all_lines.index(q.strip()) + 1 for q in quotes if q.strip() in all_lines] or [1]
            )
        answer = value(expr) + (1 if any(m in company for m in self.mine_wrong) else 0)
        who = "the borrower" if any(m in company for m in self.mine_anonymous) else name
        return {
            "evidence": quotes,
            "question": f"Under {who}'s credit agreement, using the passage: Compute {expr}.",
            "solution": stepwise(expr),
            "answer": str(answer),
            **({"program": quoting_program(expr, passage)} if PROGRAM_MARKER in text else {}),
        }

    def equivalence(self, text: str) -> dict:
        gold, predicted = blocks(text, "ground_truth")[0].strip(), blocks(text, "predicted")[0].strip()
        return {"equal": gold == predicted, "reason": "scripted"}


# file stem -> characters kept (each cut leaves the "Applicable Rate/Margin" definition whole)
AGREEMENTS = {
    "brown_forman_2023_credit_agreement": 12_500,
    "commercial_metals_2022_sixth_ar_credit_agreement": 41_000,
    "host_hotels_2023_sixth_ar_credit_agreement": 26_500,
}
DUPLICATE = ("brown_forman_2023_credit_agreement", "bf_conformed_copy")


def agreements_index(base: Path, shared_data: Path) -> IndexSettings:
    """Index settings of the built index (documents written under base/docs, the index in base/index)."""
    docs = base / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for stem, keep in AGREEMENTS.items():
        text = (shared_data / "credit_agreements" / "docs" / f"{stem}.txt").read_text(encoding="utf-8")
        (docs / f"{stem}.txt").write_text(text[:keep].rsplit("\n", 1)[0] + "\n", encoding="utf-8")
    source, copy = DUPLICATE
    (docs / f"{copy}.txt").write_bytes((docs / f"{source}.txt").read_bytes())
    settings = IndexSettings(path=str(base / "index"))
    report = ingest_paths([docs], settings, show_progress=False)
    if report.failed:
        raise RuntimeError(f"could not ingest the test agreements: {report.skipped}")
    return settings
