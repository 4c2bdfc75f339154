"""Benchmark definitions: one small YAML per benchmark in `eval/` (source, fields, prompts, scoring)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from finmbs.config import ConfigError
from finmbs.records import first_error
from finmbs.resources import resource_dir

Mode = Literal["closed-book", "oracle", "retrieval"]


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldMap(Spec):
    """Which source column holds each part of an item (None: not in this benchmark)."""

    id: str | None = None
    question: str
    answer: str
    question_type: str | None = None
    company: str | None = None
    doc_name: str | None = None
    context: str | None = None
    evidence: str | None = None


class EvidenceFieldMap(Spec):
    """Keys inside one evidence entry (FinanceBench: evidence_text, doc_name, evidence_page_num)."""

    text: str = "evidence_text"
    doc_name: str = "doc_name"
    page: str = "evidence_page_num"
    full_page: str = "evidence_text_full_page"


class Scoring(Spec):
    """The protocol's sampling defaults and the k of pass@k to report."""

    n: int = Field(8, ge=1)
    temperature: float = Field(1.0, ge=0)
    max_tokens: int = Field(8192, ge=1)
    k: list[int] = Field(default_factory=lambda: [1])


class Benchmark(Spec):
    """One benchmark: where its rows come from, how to read them, prompt and scoring."""

    name: str
    description: str = ""
    domain: Literal["math", "finance"]
    license: str = ""
    files: list[str] = Field(min_length=1, description="file patterns in --data; the first that matches wins")
    hub: str | None = Field(None, description="Hugging Face dataset id, used when no --data is given")
    hub_revision: str | None = None
    hub_files: list[str] = Field(default_factory=lambda: ["*.jsonl", "*.parquet"])
    fields: FieldMap
    evidence_fields: EvidenceFieldMap = Field(default_factory=EvidenceFieldMap)
    answer_marker: str | None = Field(None, description="gold answer is the text after the last marker")
    question_type: str | None = Field(None, description="constant question type when no field holds one")
    modes: list[Mode] = Field(min_length=1)
    default_mode: Mode
    prompts: dict[Mode, str]
    scoring: Scoring = Field(default_factory=Scoring)

    @model_validator(mode="after")
    def _modes_have_prompts(self) -> Benchmark:
        missing = [m for m in self.modes if m not in self.prompts]
        if missing or self.default_mode not in self.modes:
            raise ValueError(f"every mode needs a prompt and default_mode must be a mode (missing: {missing})")
        return self


def benchmark_dir() -> Path:
    return resource_dir("eval")


def known_benchmarks() -> list[str]:
    return sorted(p.stem for p in benchmark_dir().glob("*.yaml"))


def load_benchmark(name: str) -> Benchmark:
    """The benchmark named `name` (eval/NAME.yaml) or a path to such a YAML file."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else benchmark_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown benchmark '{name}'; known: {', '.join(known_benchmarks())}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return Benchmark.model_validate(data)
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=str(path)) from None
    except ValidationError as exc:
        key, message = first_error(exc)
        raise ConfigError(message, source=str(path), key=key or "(root)") from None
