"""Seeds files: every bad line named, nothing sent to a model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.seeds import SeedsError, load_seeds


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_loads_seeds_with_snippet_string_and_defaults(tmp_path):
    path = write(
        tmp_path / "s.jsonl",
        [
            json.dumps({"id": 1, "question": "What is 2+2?", "answer": 4}),
            "",
            json.dumps(
                {
                    "id": "f",
                    "question": "Q?",
                    "answer": "$1.2 billion",
                    "domain": "finance",
                    "snippet": "Revenue was $1.2 billion.",
                    "entity": "Acme",
                    "meta": {"k": 1},
                }
            ),
        ],
    )
    seeds = load_seeds(path)
    assert [s.id for s in seeds] == ["1", "f"]
    assert seeds[0].answer == "4" and seeds[0].domain == "math"
    assert seeds[0].provenance.seed_id == "1" and seeds[0].provenance.method == "seed"
    assert seeds[1].snippet.text == "Revenue was $1.2 billion." and seeds[1].entity == "Acme"


def test_every_bad_line_is_named(tmp_path):
    path = write(
        tmp_path / "bad.jsonl",
        [
            json.dumps({"id": "a", "question": "Q1", "answer": "1"}),
            '{"id": "b", "question": "Q2", "answer": ',
            json.dumps({"id": "c", "question": "Q3"}),
            json.dumps({"id": "a", "question": "Q4", "answer": "4"}),
            json.dumps({"id": "d", "question": "Q5", "answer": "5", "colour": "red"}),
            json.dumps(["not", "an", "object"]),
        ],
    )
    with pytest.raises(SeedsError) as info:
        load_seeds(path)
    message = str(info.value)
    assert str(path) in message and "5 bad line(s)" in message
    assert "line 2: malformed JSON" in message
    assert "line 3: missing answer" in message
    assert "line 4: duplicate id 'a' (first on line 1)" in message
    assert "line 5: unknown field(s) ['colour']" in message
    assert "line 6: a line must be a JSON object" in message


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(SeedsError, match="no seeds"):
        load_seeds(write(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_seeds(tmp_path / "nope.jsonl")


def test_grow_stops_before_any_model_call(tmp_path, openai_server):
    path = write(tmp_path / "bad.jsonl", [json.dumps({"id": "a", "question": "Q"}), "{oops"])
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["grow", "--seeds", str(path), "--out", str(out)])
    assert result.exit_code == 2
    assert "line 1: missing answer" in result.output and "line 2: malformed JSON" in result.output
    assert not out.exists() and openai_server.request_count == 0
