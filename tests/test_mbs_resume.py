"""Kill-and-resume: SIGKILL a `finmbs grow` subprocess midway, rerun the same command, and compare
outputs and request counts with an uninterrupted run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import yaml

from finmbs.runs import read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.seeds import load_seeds
from finmbs.testing.world import Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
QUESTIONS = ["(2 + 3) * (4 + 1)", "(1 + 6) * (2 + 2)", "(3 + 3) * (5 + 1)"]


def outputs(out):
    """Everything a run leaves, minus the usage and timing of the processes that produced it."""
    metrics = {
        k: v
        for k, v in json.loads((out / "metrics.json").read_text()).items()
        if k not in ("usage", "wall_time_s", "cache_hits")
    }
    for stage in metrics["stages"].values():  # model seconds are timing too
        stage.pop("model_seconds")
    trees = {p.name: json.loads(p.read_text()) for p in sorted((out / "trees").iterdir())}
    qualified = list(read_jsonl(out / "qualified.jsonl"))
    rejected = list(read_jsonl(out / "rejected.jsonl"))
    return (
        metrics,
        trees,
        sorted(json.dumps(q, sort_keys=True) for q in qualified),
        sorted(json.dumps(r, sort_keys=True) for r in rejected),
        len(qualified),
        len(rejected),
    )


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, openai_server):
    openai_server.handler = World(agents=dict(AGENTS))
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": f"Compute {q}.", "answer": str(eval(q))}) + "\n"  # noqa: S307
            for i, q in enumerate(QUESTIONS)
        )
    )

    def write_config(name):
        cfg = world_config(
            openai_server.base_url,
            ["weak-teacher", "strong-teacher"],
            ["s1", "s2"],
            "target",
            str(tmp_path / f"{name}.sqlite"),
            Nt=2,
            N=8,
            N_leaf=2,
            L=100,
        )
        data = cfg.model_dump(mode="json") | {"seed_concurrency": 1}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    # the uninterrupted reference (same engine, in process)
    reference = tmp_path / "reference"
    ref_config = yaml.safe_load(write_config("reference").read_text())
    from finmbs.config import RunConfig

    asyncio.run(run_grow(RunConfig.model_validate(ref_config), load_seeds(seeds), reference))
    reference_requests = openai_server.request_count
    openai_server.reset()
    openai_server.latency = 0.02  # slow enough for the kill to land midway

    out = tmp_path / "killed"
    command = [
        sys.executable,
        "-m",
        "finmbs.cli",
        "grow",
        "--seeds",
        str(seeds),
        "--out",
        str(out),
        "--config",
        str(write_config("killed")),
    ]
    env = {**os.environ, "COLUMNS": "120"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (out / "done").is_dir():
        time.sleep(0.05)
    time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    done_at_kill = len(list((out / "done").iterdir()))
    assert 1 <= done_at_kill < len(QUESTIONS), "the kill must land midway"
    killed_requests = openai_server.request_count

    resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "qualified" in resumed.stderr  # the summary table
    total = openai_server.request_count
    assert outputs(out) == outputs(reference)
    # resumed work replays from the cache: the two processes together sent one run's requests, plus at most
    # the requests that were in flight when the kill landed (sent, never answered into the cache)
    assert reference_requests <= total <= reference_requests + 16
    assert total - killed_requests < reference_requests
    assert Counter(r["problem"]["id"] for r in read_jsonl(out / "rejected.jsonl")).most_common(1)[0][1] == 1
