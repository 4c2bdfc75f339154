"""Soak: `grow` on a flaky scripted world, stopped twice by SIGTERM and once by SIGKILL, must end
exactly where a clean run ends, with every request paid for on record and no row twice.

The scripted arithmetic world (finmbs/testing/world.py) answers on the real OpenAI-compatible server;
`--chaos` of its replies are replaced by a 429, a 500, a malformed body or an empty `choices: []`
(a quarter each). A child process runs `run_grow` (the engine behind `finmbs grow`) with fast retry
waits; the parent stops it with SIGTERM, SIGKILL, SIGTERM as the finished seeds pass 20%, 45% and 70%,
rerunning it each time, then compares with a clean run of the same seeds on a reliable server.

    nice -n 15 python bench/soak.py --seeds 100 --chaos 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

from finmbs.runs import UsageLedger, read_jsonl
from finmbs.testing.server import Reply, Request, ScriptedOpenAIServer
from finmbs.testing.world import Agent, World, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
EMPTY = json.dumps(
    {
        "id": "e",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
    }
)
FAULTS = [Reply(status=429), Reply(status=500), Reply(raw='{"id": "x", "choices": [{"message": '), Reply(raw=EMPTY)]


class Flaky:
    """The world's handler with a fraction of replies replaced by faults (seeded, so reruns are alike)."""

    def __init__(self, world: World, chaos: float, seed: int = 0):
        self.world, self.chaos, self.random, self.faults = world, chaos, random.Random(seed), Counter()
        self.lock = threading.Lock()

    def __call__(self, request: Request) -> Reply:
        with self.lock:
            roll, pick = self.random.random(), self.random.randrange(len(FAULTS))
        if roll < self.chaos:
            self.faults[pick] += 1
            return FAULTS[pick]
        return self.world(request)


def seeds_file(path: Path, count: int) -> Path:
    rows = []
    for i in range(count):
        a, b, c, d = 1 + i % 7, 2 + i % 5, 1 + (i // 7) % 6, 2 + (i // 5) % 4
        expr = f"({a} + {b}) * ({c} + {d})"
        rows.append(json.dumps({"id": f"s{i:03d}", "question": f"Compute {expr}.", "answer": str((a + b) * (c + d))}))
    path.write_text("\n".join(rows) + "\n")
    return path


def config_file(path: Path, base_url: str, cache: Path, retries: int) -> Path:
    cfg = world_config(
        base_url, ["weak-teacher", "strong-teacher"], ["s1", "s2"], "target", str(cache), Nt=2, N=8, N_leaf=2, L=100
    )
    data = cfg.model_dump(mode="json") | {"seed_concurrency": 4}
    for role in ("teachers", "students"):
        for endpoint in data["roles"][role]:
            endpoint["max_retries"] = retries
    for role in ("target", "judge"):
        data["roles"][role]["max_retries"] = retries
    path.write_text(yaml.safe_dump(data))
    return path


def child(config: str, seeds: str, out: str) -> None:
    """One `grow` process: the CLI's engine with retry waits of milliseconds, not seconds."""
    from finmbs.config import load_config
    from finmbs.llm import Gateway
    from finmbs.runs.grow import run_grow
    from finmbs.seeds import load_seeds

    resolved = load_config(config)
    gateway = Gateway.from_config(resolved, retry_initial_s=0.005, retry_max_s=0.02)
    try:
        asyncio.run(run_grow(resolved, load_seeds(seeds), out, gateway=gateway))
    except KeyboardInterrupt:
        sys.exit(130)


def outputs(out: Path) -> tuple:
    """What a run leaves, minus usage and timing."""
    metrics = {
        k: v
        for k, v in json.loads((out / "metrics.json").read_text()).items()
        if k not in ("usage", "wall_time_s", "cache_hits")
    }
    for stage in metrics.get("stages", {}).values():  # model seconds are timing too
        stage.pop("model_seconds", None)
    trees = {p.name: json.loads(p.read_text()) for p in sorted((out / "trees").iterdir())}
    qualified = sorted(json.dumps(q, sort_keys=True) for q in read_jsonl(out / "qualified.jsonl"))
    rejected = sorted(json.dumps(r, sort_keys=True) for r in read_jsonl(out / "rejected.jsonl"))
    return metrics, trees, qualified, rejected


def duplicates(out: Path) -> int:
    qualified = Counter(r["id"] for r in read_jsonl(out / "qualified.jsonl"))
    rejected = Counter(r["problem"]["id"] for r in read_jsonl(out / "rejected.jsonl"))
    return sum(n - 1 for n in qualified.values()) + sum(n - 1 for n in rejected.values())


def ledger_calls(out: Path) -> int:
    return sum(u["calls"] for s in UsageLedger(out / "usage.jsonl").before.values() for u in s.values())


def done(out: Path) -> int:
    return len(list((out / "done").iterdir())) if (out / "done").is_dir() else 0


def run_with_stops(
    command: list[str],
    out: Path,
    total: int,
    stops: list[tuple[float, int]],
    log,
    server: ScriptedOpenAIServer | None = None,
) -> list[int]:
    """Run `command` until it finishes, stopping it with each (fraction, signal) as done/ passes the fraction;
    after each stop, log the calls on record against the requests the server received."""
    codes = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for fraction, sig in stops + [(2.0, 0)]:
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while process.poll() is None and done(out) < fraction * total:
            time.sleep(0.05)
        if process.poll() is None and sig:
            process.send_signal(sig)
        _, stderr = process.communicate(timeout=600)
        codes.append(process.returncode)
        seen = f"; calls on record {ledger_calls(out)}, requests received {server.request_count}" if server else ""
        log(
            f"  run {len(codes)}: exit {process.returncode} with {done(out)}/{total} seeds done"
            + (f" (sent {signal.Signals(sig).name})" if sig else "")
            + seen
        )
        if process.returncode not in (0, 130, -signal.SIGKILL):
            log(stderr[-2000:])
            raise SystemExit("soak child failed")
        if process.returncode == 0:
            break
    return codes


def soak(count: int, chaos: float, retries: int, log=print) -> dict:
    with tempfile.TemporaryDirectory(prefix="finmbs-soak-") as tmp:
        base = Path(tmp)
        seeds = seeds_file(base / "seeds.jsonl", count)
        me = [sys.executable, str(Path(__file__).resolve()), "--child"]

        with ScriptedOpenAIServer(handler=World(agents=dict(AGENTS))) as clean_server:
            clean = base / "clean"
            config = config_file(base / "clean.yaml", clean_server.base_url, base / "clean.sqlite", retries)
            started = time.monotonic()
            run_with_stops(me + [str(config), str(seeds), str(clean)], clean, count, [], log)
            clean_s, clean_requests = time.monotonic() - started, clean_server.request_count
            clean_calls = ledger_calls(clean)

        flaky = Flaky(World(agents=dict(AGENTS)), chaos)
        with ScriptedOpenAIServer(handler=flaky) as server:
            out = base / "stressed"
            config = config_file(base / "stressed.yaml", server.base_url, base / "stressed.sqlite", retries)
            started = time.monotonic()
            stops = [(0.2, signal.SIGTERM), (0.45, signal.SIGKILL), (0.7, signal.SIGTERM)]
            codes = run_with_stops(me + [str(config), str(seeds), str(out)], out, count, stops, log, server)
            stressed_s, requests = time.monotonic() - started, server.request_count

        metrics = json.loads((out / "metrics.json").read_text())
        return {
            "seeds": count,
            "chaos": chaos,
            "faults": {["429", "500", "malformed", "empty"][k]: v for k, v in sorted(flaky.faults.items())},
            "exit_codes": codes,
            "identical_outputs": outputs(out) == outputs(clean),
            "requests_sent": requests,
            "calls_on_record": ledger_calls(out),
            "metrics_calls": sum(u["calls"] for u in metrics["usage"].values()),
            "duplicates": duplicates(out),
            "clean_requests": clean_requests,
            "clean_calls_on_record": clean_calls,
            "qualified": len(list(read_jsonl(out / "qualified.jsonl"))),
            "clean_s": round(clean_s, 1),
            "stressed_s": round(stressed_s, 1),
        }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--chaos", type=float, default=0.2)
    parser.add_argument("--retries", type=int, default=10, help="per-endpoint max_retries (faults are independent)")
    args = parser.parse_args()
    result = soak(args.seeds, args.chaos, args.retries)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
