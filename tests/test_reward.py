"""veRL reward entry points: routing, the batched form, no network on deterministic cases, the judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from finmbs.resources import resource_dir
from finmbs.reward import JUDGE_CONFIG_ENV, compute_score, compute_score_batch, domain_of
from finmbs.testing.world import blocks

ROOT = Path(__file__).resolve().parents[1]

ROWS = [  # (data_source, solution, ground truth, extra_info, score, decided_by)
    ("finmbs/math", "2x = 28/3, so x = \\boxed{\\frac{14}{3}}", "14/3", None, 1.0, "math"),
    ("math500", "The answer is \\boxed{5}", "6", None, 0.0, "math"),
    ("aime2024", "Final answer: 204", "204", None, 1.0, "math"),
    ("finmbs/finance", "Leverage may not exceed \\boxed{3.5x}", "3.50:1.00", None, 1.0, "comparer"),
    (
        "financebench",
        "Net PPNE was $8,738 million.\nFinal answer: $8.7 billion",
        "$8.70",
        {"question": "What is the year end FY2018 net PPNE for 3M? Answer in USD billions."},
        1.0,
        "comparer",
    ),
    ("secque", "Final answer: 0.30%", "25 basis points", {}, 0.0, "comparer"),
    ("finmbs/finance", "Final answer: the Data Center segment", "Data Center", None, 0.0, "undecided"),
    ("finmbs/finance", "I am not sure.", "$75,000,000", None, 0.0, "no_answer"),
]


def _expected(row):
    return {"score": row[4], "decided_by": row[5]}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_compute_score(row, monkeypatch):
    monkeypatch.delenv(JUDGE_CONFIG_ENV, raising=False)
    result = compute_score(row[0], row[1], row[2], extra_info=row[3])
    assert {k: result[k] for k in ("score", "decided_by")} == _expected(row)
    assert result["acc"] is (row[4] == 1.0) and isinstance(result["pred"], str)


def test_batch_matches_single_and_takes_verl_keywords(monkeypatch):
    monkeypatch.delenv(JUDGE_CONFIG_ENV, raising=False)
    columns = list(zip(*ROWS))
    results = compute_score_batch(
        data_sources=list(columns[0]),
        solution_strs=list(columns[1]),
        ground_truths=list(columns[2]),
        extra_infos=list(columns[3]),
        unused_reward_kwarg=1,
    )
    assert [{k: r[k] for k in ("score", "decided_by")} for r in results] == [_expected(r) for r in ROWS]


def test_unknown_data_source_is_a_clear_error():
    assert domain_of("finmbs/finance") == "finance" and domain_of("gsm8k") == "math"
    with pytest.raises(ValueError, match="unknown data_source 'imdb'"):
        compute_score("imdb", "\\boxed{1}", "1")


def _judge_config(tmp_path: Path, base_url: str) -> Path:
    data = yaml.safe_load((resource_dir("configs") / "default.yaml").read_text())
    data["roles"]["judge"] = {
        "name": "judge",
        "model": "openai/judge",
        "api_base": base_url,
        "temperature": 0.0,
        "max_tokens": 64,
        "timeout_s": 5.0,
        "max_retries": 0,
    }
    data["cache_path"] = str(tmp_path / "judge-cache.sqlite")
    path = tmp_path / "judge.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_deterministic_cases_need_no_network_and_no_litellm(openai_server, tmp_path):
    """With a judge configured, decided rows still make no request and never import litellm."""
    rows = [r for r in ROWS if r[5] != "undecided"]
    script = (
        "import json, sys\n"
        "from finmbs.reward import compute_score_batch\n"
        f"rows = json.loads({json.dumps(json.dumps(rows))})\n"
        "cols = list(zip(*rows))\n"
        "res = compute_score_batch(list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3]))\n"
        "print(json.dumps({'scores': [r['score'] for r in res], 'litellm': 'litellm' in sys.modules}))\n"
    )
    env = {**os.environ, JUDGE_CONFIG_ENV: str(_judge_config(tmp_path, openai_server.base_url))}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"scores": [r[4] for r in rows], "litellm": False}
    assert openai_server.request_count == 0


def test_undecided_rows_go_to_the_configured_judge_together(openai_server, tmp_path, monkeypatch):
    openai_server.handler = lambda request: json.dumps(
        {"equal": blocks(request.text, "predicted")[0].strip() == "the Data Center segment", "reason": "scripted"}
    )
    monkeypatch.setenv(JUDGE_CONFIG_ENV, str(_judge_config(tmp_path, openai_server.base_url)))
    results = compute_score_batch(
        ["finmbs/finance", "financebench", "finmbs/finance"],
        ["\\boxed{the Data Center segment}", "Final answer: Gaming", "\\boxed{1,200 million}"],
        ["Data Center", "Data Center", "$1.2 billion"],
        [{"question": "Which segment grew fastest?"}, None, None],
    )
    assert [(r["score"], r["decided_by"]) for r in results] == [(1.0, "judge"), (0.0, "judge"), (1.0, "comparer")]
    assert openai_server.request_count == 2
    assert "Which segment grew fastest?" in openai_server.requests[0].text + openai_server.requests[1].text
    again = compute_score(
        "finmbs/finance", "\\boxed{the Data Center segment}", "Data Center", {"question": "Which segment grew fastest?"}
    )
    assert (again["score"], again["decided_by"]) == (1.0, "judge")
    assert openai_server.request_count == 2  # cached
