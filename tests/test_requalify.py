"""`finmbs requalify` against the scripted OpenAI-speaking server: the band split and the refreshed outputs, the
history appended and never rewritten, resume after SIGTERM with no problem lost or duplicated, a bad pool line,
an endpoint that is down, a history a newer finmbs wrote, `finmbs export --policy` and the report's drift section."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from finmbs.cli import app
from finmbs.records import PassRate, Problem, Provenance
from finmbs.runs.load import RunReadError
from finmbs.runs.requalify import HISTORY, read_history
from finmbs.seeds import load_seeds
from finmbs.testing.server import Request, ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
N = 4
QUESTION = re.compile(r"Q(\d+) (stale|gold|hard|drift)")


def solve(request: Request) -> list[str]:
    """The scripted policy: a problem tagged stale is always solved, gold half the time, hard never; a drift
    problem is hard for step1 and solved by every other policy. Step0 never answers (it made the pool)."""
    found = QUESTION.search(request.text)
    if found is None:  # the judge, if it is ever asked
        return ['{"reason": "scripted", "equal": false}']
    number, tag = found.groups()
    right, wrong = f"So it is {number}.\nFinal answer: \\boxed{{{number}}}", "Final answer: \\boxed{-1}"
    if tag == "drift":
        tag = "hard" if request.model.endswith("step1") else "stale"
    return {"stale": [right], "gold": [right, wrong], "hard": [wrong]}[tag]


def problem(number: int, tag: str, seed: str) -> Problem:
    return Problem(
        id=f"{seed}.p{number}",
        question=f"Q{number} {tag}: what number is this?",
        answer=str(number),
        provenance=Provenance(seed_id=seed, method="mbs", stage="leaf", tree_path="0"),
        meta={
            "difficulty": {"policy": "step0", "budget": 64, "n": N, "k": 2, "band": "goldilocks", "in_budget": True},
            "kind": "root",
        },
    )


def seed(name: str) -> Problem:
    return Problem(id=name, question=f"seed {name}: what number?", answer="1", provenance=Provenance(seed_id=name))


def write_pool(folder: Path, problems: list[Problem], seeds: list[Problem]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "seeds.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in seeds))
    (folder / "qualified.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in problems))
    return folder


def settings(server: ScriptedOpenAIServer, tmp_path: Path, policy: str = "step1", concurrency: int = 8) -> list[str]:
    pairs = {
        "roles.target.name": policy,
        "roles.target.model": f"openai/{policy}",
        "roles.target.api_base": server.base_url,
        "roles.target.supports_n": "true",
        "roles.target.max_concurrency": str(concurrency),
        "roles.target.timeout_s": "10",
        "roles.judge.model": "openai/judge",
        "roles.judge.api_base": server.base_url,
        "cache_path": str(tmp_path / "cache.sqlite"),
        "stages.N": str(N),
        "stages.L": "64",
    }
    return [arg for key, value in pairs.items() for arg in ("--set", f"{key}={value}")]


@pytest.fixture
def server():
    with ScriptedOpenAIServer(handler=solve) as running:
        yield running


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    """Three seeds: a's descendants all go stale, b's stay in the band, c's go hard."""
    problems = [problem(i, "stale", "a") for i in (1, 2, 3)]
    problems += [problem(i, "gold", "b") for i in (4, 5)]
    problems += [problem(i, "hard", "c") for i in (6, 7)]
    return write_pool(tmp_path / "run", problems, [seed("a"), seed("b"), seed("c")])


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})


def requalify_entries(folder: Path) -> list[PassRate]:
    return [e for e in read_history(folder / HISTORY) if e.source == "requalify"]


def test_band_split_refreshed_pool_hard_and_stale_seeds(server, pool, tmp_path):
    result = invoke("requalify", str(pool), *settings(server, tmp_path))
    assert result.exit_code == 0, result.output
    out = pool / "requalify" / "step1"
    qualified = [Problem.model_validate_json(line) for line in (out / "qualified.jsonl").read_text().splitlines()]
    hard = [Problem.model_validate_json(line) for line in (out / "hard.jsonl").read_text().splitlines()]
    assert sorted(p.id for p in qualified) == ["b.p4", "b.p5"]
    assert {p.meta["difficulty"]["policy"] for p in qualified} == {"step1"}
    assert [p.meta["difficulty"]["k"] for p in qualified] == [2, 2]  # right, wrong, right, wrong of N = 4
    assert sorted(p.id for p in hard) == ["c.p6", "c.p7"]
    stale_seeds = load_seeds(out / "stale_seeds.jsonl")  # ready for `finmbs grow`
    assert [s.id for s in stale_seeds] == ["a"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["bands"] == {"hard": 2, "goldilocks": 2, "stale": 3}
    assert summary["moved"] == {"goldilocks": {"stale": 3, "goldilocks": 2, "hard": 2}}
    assert summary["by_seed"]["a"]["into"]["stale"] == 3 and summary["by_seed"]["b"]["unchanged"] == 2
    assert summary["by_domain"]["math"]["into"] == {"hard": 2, "goldilocks": 0, "stale": 3}
    assert summary["screened"] == 7 and summary["rollouts"] == 7 * N
    # every rollout asked with the training prompt
    assert all(r.text.startswith("Solve the following problem.") for r in server.requests if "Q" in r.text)


def test_history_appended_never_rewritten(server, pool, tmp_path):
    assert invoke("requalify", str(pool), *settings(server, tmp_path)).exit_code == 0
    path = pool / "requalify" / HISTORY
    first = path.read_bytes()
    entries = read_history(path)
    assert Counter(e.source for e in entries) == {"calibrate": 7, "requalify": 7}
    assert {e.policy for e in entries if e.source == "calibrate"} == {"step0"}
    step1 = requalify_entries(pool / "requalify")
    assert all(e.n == N and e.budget == 64 and e.date and e.weights_sha256 is None for e in step1)
    asked = server.request_count
    assert invoke("requalify", str(pool), *settings(server, tmp_path)).exit_code == 0  # the same policy again
    assert path.read_bytes() == first and server.request_count == asked  # nothing re-asked, nothing rewritten
    assert invoke("requalify", str(pool), *settings(server, tmp_path, policy="step2")).exit_code == 0
    grown = path.read_bytes()
    assert grown.startswith(first) and len(grown.splitlines()) == len(first.splitlines()) + 7
    weights = tmp_path / "step3.bin"
    weights.write_bytes(b"checkpoint 3")
    assert (
        invoke("requalify", str(pool), *settings(server, tmp_path, policy="step3"), "--weights", str(weights)).exit_code
        == 0
    )
    step3 = [e for e in read_history(path) if e.policy == "step3"]
    assert {e.weights_sha256 for e in step3} == {hashlib.sha256(b"checkpoint 3").hexdigest()}
    assert len(step3) == 7 and path.read_bytes().startswith(grown)


def test_export_policy_and_report_drift(server, pool, tmp_path):
    drift = [problem(8, "drift", "d")]
    write_pool(
        pool,
        [*map(Problem.model_validate_json, (pool / "qualified.jsonl").read_text().splitlines()), *drift],
        [seed("a"), seed("b"), seed("c"), seed("d")],
    )
    assert invoke("requalify", str(pool), *settings(server, tmp_path)).exit_code == 0
    assert invoke("requalify", str(pool), *settings(server, tmp_path, policy="step2")).exit_code == 0
    out = tmp_path / "export"
    result = invoke(
        "export",
        str(pool),
        "--policy",
        "step1",
        "-f",
        "jsonl",
        "--no-decontaminate",
        "--split",
        "train=1",
        "-o",
        str(out),
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert sorted(r["extra_info"]["id"] for r in rows) == ["b.p4", "b.p5"]
    assert {r["extra_info"]["policy"] for r in rows} == {"step1"}
    missing = invoke("export", str(pool), "--policy", "step9", "-o", str(tmp_path / "none"))
    assert missing.exit_code != 0 and "no entry for policy 'step9'" in missing.output
    from finmbs.report.html import render_report

    html = render_report(pool)
    assert 'id="drift"' in html and "Moved per seed" in html and "Moved per domain" in html
    from finmbs.report.drift import drift_view

    view = drift_view(pool)
    assert [s.label for s in view.sessions] == ["step0 N=4 L=64", "step1 N=4 L=64", "step2 N=4 L=64"]
    assert view.steps[0].total.into == {"hard": 3, "goldilocks": 0, "stale": 3}  # c's two and d's drift problem
    assert view.steps[1].total.into["stale"] == 1 and view.steps[1].by_seed["d"].into["stale"] == 1


def test_bad_pool_line_named_and_the_rest_goes_on(server, tmp_path):
    pool = tmp_path / "pool.jsonl"
    rows = [problem(1, "gold", "a").model_dump(mode="json"), {"id": "x", "question": "Q2 gold: no answer here"}]
    rows.append(problem(3, "stale", "a").model_dump(mode="json"))
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    result = invoke("requalify", str(pool), *settings(server, tmp_path))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"{pool} line 2: missing answer" in text and f"{pool} line 4: malformed JSON" in text
    folder = tmp_path / "pool.requalify"
    assert sorted(e.problem_id for e in requalify_entries(folder)) == ["a.p1", "a.p3"]
    summary = json.loads((folder / "step1" / "summary.json").read_text())
    assert len(summary["bad_lines"]) == 2 and summary["screened"] == 2


def test_down_endpoint_fails_before_the_first_problem(pool, tmp_path):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = ScriptedOpenAIServer(port=port)  # never started: only its URL
    started = time.monotonic()
    result = invoke("requalify", str(pool), *settings(dead, tmp_path))
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert f"target endpoint 'step1' at {dead.base_url} is not answering" in text
    assert time.monotonic() - started < 15
    assert not (pool / "requalify").exists()  # nothing written, nothing asked


def test_history_from_a_newer_finmbs_is_refused_in_one_line(server, pool, tmp_path):
    folder = pool / "requalify"
    folder.mkdir()
    newer = {
        "schema_version": 99,
        "problem_id": "a.p1",
        "policy": "step9",
        "n": 4,
        "k": 1,
        "band": "goldilocks",
        "in_budget": True,
        "budget": 64,
        "date": "2027-01-01T00:00:00+00:00",
        "confidence": 0.5,
    }
    (folder / HISTORY).write_text(json.dumps(newer) + "\n")
    with pytest.raises(RunReadError, match=r"history.jsonl line 1: .*a pass-rate entry written by a newer finmbs"):
        read_history(folder / HISTORY)
    result = invoke("requalify", str(pool), *settings(server, tmp_path))
    assert result.exit_code != 0 and "newer finmbs" in result.output
    assert (folder / HISTORY).read_text() == json.dumps(newer) + "\n"  # refused, not rewritten


def test_dataset_pool_reads_back_an_export(server, pool, tmp_path):
    exported = tmp_path / "dataset"
    assert invoke("export", str(pool), "-f", "verl", "--no-decontaminate", "-o", str(exported)).exit_code == 0
    result = invoke("requalify", str(exported), *settings(server, tmp_path))
    assert result.exit_code == 0, result.output
    assert len(requalify_entries(tmp_path / "dataset.requalify")) == 7


def entries_written(history: Path) -> int:
    """Requalify entries in the history so far, counted without parsing (polled while the run writes)."""
    return history.read_bytes().count(b'"source": "requalify"') if history.is_file() else 0


def test_sigterm_then_resume_loses_and_duplicates_nothing(tmp_path):
    """1,000 problems against the scripted server (50 ms a request): SIGTERM mid-run, then the same command
    again; every problem has exactly one entry for the policy. Prints both runs' wall time."""
    problems = [problem(i, ("stale", "gold", "hard")[i % 3], f"s{i // 10}") for i in range(1000)]
    pool = write_pool(tmp_path / "run", problems, [seed(f"s{i}") for i in range(100)])
    history = pool / "requalify" / HISTORY
    with ScriptedOpenAIServer(handler=solve, latency=0.05) as server:
        command = [
            sys.executable,
            "-m",
            "finmbs.cli",
            "requalify",
            str(pool),
            *settings(server, tmp_path, concurrency=32),
        ]
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        killed = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and entries_written(history) < 300:
            time.sleep(0.1)
        killed.send_signal(signal.SIGTERM)
        output = killed.communicate(timeout=60)[0].decode()
        first_s = time.monotonic() - started
        assert killed.returncode == 130, output
        done = len(requalify_entries(pool / "requalify"))
        assert 300 <= done < 1000, done
        started = time.monotonic()
        resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        second_s = time.monotonic() - started
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    entries = requalify_entries(pool / "requalify")
    ids = Counter(e.problem_id for e in entries)
    assert len(ids) == 1000 and set(ids.values()) == {1}
    assert Counter(e.source for e in read_history(history))["calibrate"] == 1000
    summary = json.loads((pool / "requalify" / "step1" / "summary.json").read_text())
    assert summary["resumed"] == done and summary["screened"] == 1000 - done
    assert summary["bands"] == {"hard": 333, "goldilocks": 333, "stale": 334}
    print(
        f"\n1,000 problems: killed after {done} in {first_s:.1f} s; resumed {1000 - done} in {second_s:.1f} s "
        f"({summary['rollouts_per_s']:.0f} rollouts/s in the resumed run)"
    )


def test_training_rows_read_back_with_their_excerpt_and_band():
    """A finance row's excerpt is read back from its training prompt; a row with no answer is refused."""
    from finmbs.export.rows import training_row
    from finmbs.export.trl import trl_row
    from finmbs.records import Snippet
    from finmbs.runs.pool import from_training_row

    source = problem(9, "gold", "f").model_copy(
        update={"domain": "finance", "snippet": Snippet(text="Revenue was $1.2 million.\n<b>net</b> 0.4")}
    )
    row = training_row(source, 0, "train")
    for read in (from_training_row(row), from_training_row(trl_row(row))):
        assert (read.id, read.question, read.answer, read.domain) == (source.id, source.question, "9", "finance")
        assert read.snippet is not None and read.snippet.text == source.snippet.text
        assert read.meta["difficulty"]["policy"] == "step0" and read.provenance.seed_id == "f"
    row["reward_model"]["ground_truth"] = " "
    with pytest.raises(ValueError, match="missing answer"):
        from_training_row(row)


def test_calibration_entries_carry_the_date_of_their_calibration(server, pool, tmp_path):
    """The pool's own calibration enters the history dated when it was measured: when its seed finished
    (the run's done marker: the time it holds, or an older empty marker's modification time), not when
    requalify ran; a seed with no marker falls back to the time of entry."""
    done = pool / "done"
    done.mkdir()
    (done / "a").write_text("2026-03-01T10:00:00+00:00\n")
    (done / "b").write_text("")
    os.utime(done / "b", (1767225600, 1767225600))  # 2026-01-01T00:00:00Z
    assert invoke("requalify", str(pool), *settings(server, tmp_path)).exit_code == 0
    dates = {
        e.problem_id.split(".")[0]: e.date
        for e in read_history(pool / "requalify" / HISTORY)
        if e.source == "calibrate"
    }
    assert dates["a"] == "2026-03-01T10:00:00+00:00" and dates["b"] == "2026-01-01T00:00:00+00:00"
    assert dates["c"] > "2026-03-02"  # no marker: entered now
    assert all(e.date > "2026-03-02" for e in requalify_entries(pool / "requalify"))  # measured now


def test_a_finished_seed_marker_holds_its_time(tmp_path):
    from finmbs.runs.folder import RunDir

    run = RunDir(tmp_path / "run")
    assert run.done_at("s") is None
    run.mark_done("s")
    assert run.is_done("s") and run.done_at("s") == (tmp_path / "run" / "done" / "s").read_text().strip()
