"""Named mutation operators for leaf variants (`stages.leaf_operators`, finmbs's, not in the paper).

The paper asks a teacher for "harder" variants of a leaf; a small teacher asked that rewrites the leaf.
Instead each variant is asked for by one operator of the domain's catalogue
(prompts/operators/DOMAIN.yaml): one concrete change (the inverse problem, a step that reuses an
intermediate result, a threshold crossed...) with a worked example, the problem before and after. The
engine chooses the operators: for one leaf, the catalogue in a rotation that starts at an offset taken
from the leaf's id (so the leaves of a run start at different operators), each operator at most once;
a leaf asks for no more variants than the catalogue holds. The chosen operator is named in the prompt
(prompts/leaf_operator.txt) and recorded as the variant's meta.operator.
"""

from __future__ import annotations

import zlib
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError

from finmbs.errors import FinmbsError
from finmbs.resources import render_prompt, resource_dir

FOLDER = "operators"  # under prompts/


class OperatorError(FinmbsError, ValueError):
    """A catalogue of operators that cannot be used: the message names the file and the entry."""


class Example(BaseModel):
    """One side of an operator's worked example."""

    question: str = Field(min_length=1)
    answer: str = Field(min_length=1)
    program: str | None = None


class Operator(BaseModel):
    """A named mutation: what to change, and a worked example of the change (on `passage`, in finance)."""

    name: str = Field(min_length=1, pattern=r"^[a-z][a-z0-9_]*$")
    instruction: str = Field(min_length=1)
    passage: str | None = None
    before: Example
    after: Example


def catalogue_path(domain: str) -> Path:
    return resource_dir("prompts") / FOLDER / f"{domain}.yaml"


@cache
def catalogue(domain: str) -> tuple[Operator, ...]:
    """The domain's operators (prompts/operators/DOMAIN.yaml), in file order."""
    return load_catalogue(catalogue_path(domain))


def load_catalogue(path: Path) -> tuple[Operator, ...]:
    """The operators of one catalogue file; a missing or bad file is one error naming it (and the entry)."""
    if not path.is_file():
        raise OperatorError(f"{path}: no operator catalogue (a YAML list of operators) there")
    try:
        rows = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise OperatorError(f"{path}: not YAML: {exc}") from None
    if not isinstance(rows, list) or not rows:
        raise OperatorError(f"{path}: a non-empty list of operators expected")
    operators: list[Operator] = []
    for i, row in enumerate(rows):
        label = f"entry {i}" + (f" ({row.get('name')})" if isinstance(row, dict) and row.get("name") else "")
        try:
            operator = Operator.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise OperatorError(f"{path}: {label}: {where}: {first['msg']}") from None
        if any(o.name == operator.name for o in operators):
            raise OperatorError(f"{path}: {label}: the name {operator.name!r} is used twice")
        operators.append(operator)
    return tuple(operators)


def rotation(leaf_id: str, operators: tuple[Operator, ...]) -> list[Operator]:
    """Every operator once, for one leaf: the catalogue rotated to start at an offset taken from the
    leaf's id (a stable hash, so a rerun asks the same)."""
    start = zlib.crc32(leaf_id.encode("utf-8")) % len(operators)
    return [*operators[start:], *operators[:start]]


def _side(example: Example, programs: bool) -> str:
    lines = [f"question: {example.question}", f"answer: {example.answer}"]
    if programs and example.program:
        lines.append("program:\n" + example.program.strip())
    return "\n".join(lines)


def operator_block(operator: Operator, programs: bool) -> str:
    """The operator as the leaf prompt names it: its instruction and worked example (programs shown when
    the teacher is asked for one too)."""
    return render_prompt(
        "leaf_operator_example",
        operator=operator.name,
        instruction=operator.instruction.strip(),
        passage=f"<example_passage>\n{operator.passage.strip()}\n</example_passage>\n" if operator.passage else "",
        before=_side(operator.before, programs),
        after=_side(operator.after, programs),
    )
