"""`grow` under stress against the scripted arithmetic world on the real OpenAI-compatible server: the
budget holds across reruns, one writer per run folder, SIGTERM saves everything paid for, missing keys
and bad folders fail before any call, and export never ships a row twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from finmbs.config import ConfigError, RunConfig
from finmbs.llm import BudgetExceeded
from finmbs.runs import UsageLedger, read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.runs.load import RunReadError, load_run
from finmbs.seeds import load_seeds
from finmbs.testing.world import Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
QUESTIONS = ["(2 + 3) * (4 + 1)", "(1 + 6) * (2 + 2)", "(3 + 3) * (5 + 1)", "(2 + 2) * (3 + 4)"]


def write_seeds(tmp_path):
    path = tmp_path / "seeds.jsonl"
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"Compute {q}.", "answer": str(eval(q))}) + "\n"  # noqa: S307
            for i, q in enumerate(QUESTIONS)
        )
    )
    return path


def config_data(server, tmp_path, **top):
    cfg = world_config(
        server.base_url,
        ["weak-teacher", "strong-teacher"],
        ["s1", "s2"],
        "target",
        str(tmp_path / "cache.sqlite"),
        Nt=2,
        N=8,
        N_leaf=2,
        L=100,
    )
    return cfg.model_dump(mode="json") | {"seed_concurrency": 1} | top


def ledger_calls(out, field="calls") -> int:
    ledger = UsageLedger(out / "usage.jsonl")
    return sum(u[field] for snapshot in ledger.before.values() for u in snapshot.values())


def test_budget_holds_across_reruns_and_raising_it_continues(tmp_path, openai_server):
    openai_server.handler = World(agents=dict(AGENTS))
    seeds, out = load_seeds(write_seeds(tmp_path)), tmp_path / "run"
    capped = RunConfig.model_validate(config_data(openai_server, tmp_path, budget={"max_tokens": 3000}))
    with pytest.raises(BudgetExceeded):
        asyncio.run(run_grow(capped, seeds, out))
    first = openai_server.request_count
    assert first > 0
    with pytest.raises(BudgetExceeded):  # the folder has spent the budget: no call at all
        asyncio.run(run_grow(capped, seeds, out))
    assert openai_server.request_count == first
    raised = RunConfig.model_validate(config_data(openai_server, tmp_path, budget={"max_tokens": 10**7}))
    metrics = asyncio.run(run_grow(raised, seeds, out))
    assert len(list((out / "done").iterdir())) == len(QUESTIONS)
    assert sum(u.calls for u in metrics.usage.values()) == openai_server.request_count


def test_missing_key_stops_before_any_call(tmp_path, openai_server, monkeypatch):
    monkeypatch.delenv("FINMBS_NO_SUCH_KEY", raising=False)
    data = config_data(openai_server, tmp_path)
    data["roles"]["target"]["api_key_env"] = "FINMBS_NO_SUCH_KEY"
    with pytest.raises(ConfigError, match="target environment variable FINMBS_NO_SUCH_KEY is not set"):
        asyncio.run(run_grow(RunConfig.model_validate(data), load_seeds(write_seeds(tmp_path)), tmp_path / "run"))
    assert openai_server.request_count == 0


def cli(*args):
    return [sys.executable, "-m", "finmbs.cli", "grow", *args]


def test_one_writer_per_folder_and_sigterm_saves_every_paid_call(tmp_path, openai_server):
    openai_server.handler = World(agents=dict(AGENTS))
    openai_server.latency = 0.5  # a call spends most of its time in flight: a SIGTERM lands on some
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(config_data(openai_server, tmp_path)))
    out, env = tmp_path / "run", {**os.environ, "COLUMNS": "200"}
    command = cli("--seeds", str(write_seeds(tmp_path)), "--out", str(out), "--config", str(config))
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and openai_server.request_count < 5:
        time.sleep(0.05)
    started = time.monotonic()
    second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert second.returncode != 0
    assert f"in use by pid {first.pid} on" in " ".join(second.stderr.split())
    assert time.monotonic() - started < 30  # refused at once (start-up included), not after doing work

    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 130, stderr
    assert "interrupted" in stderr
    # the calls in flight at the SIGTERM were answered before the run stopped and no call was sent after it:
    # the ledger holds exactly the calls the server received
    received = openai_server.request_count
    assert received > 5 and ledger_calls(out) == received
    assert ledger_calls(out, "samples") == sum(r.n for r in openai_server.requests)  # every one answered, accounted
    time.sleep(0.5)
    assert openai_server.request_count == received  # nothing reached the server after the process ended

    file_out = tmp_path / "a-file"
    file_out.write_text("")
    bad = subprocess.run(
        cli("--seeds", str(write_seeds(tmp_path)), "--out", str(file_out), "--config", str(config)),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "is a file, not a folder" in bad.stderr and "Traceback" not in bad.stderr


def test_export_reads_each_qualified_row_once_and_refuses_conflicting_ones(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    row = {"id": "p1", "question": "Compute 1 + 1.", "answer": "2", "domain": "math"}
    (run / "seeds.jsonl").write_text(json.dumps(row) + "\n")
    (run / "qualified.jsonl").write_text((json.dumps(row) + "\n") * 2)
    assert [p.id for p in load_run(run).qualified] == ["p1"]
    (run / "qualified.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(dict(row, answer="3")) + "\n")
    with pytest.raises(RunReadError, match="rows 1 and 2 share id 'p1'"):
        load_run(run)
    assert len(list(read_jsonl(run / "qualified.jsonl"))) == 2
