"""Engine throughput and cost per qualified problem, in the scripted arithmetic world.

A real local OpenAI-compatible server (finmbs.testing.server) plays teachers, students and target by
the world's rules (finmbs/testing/world.py) with a fixed latency per request. Reported side by side
in one process:

1. throughput: synthesized candidates/s (every teacher-written problem: decomposition children, leaf
   variants, composed parents) with seeds run concurrently vs. one seed at a time (the baseline), and
   the fraction of wall time each endpoint's concurrency limit is full (sampled every 2 ms);
2. `mbs` vs `direct` on the same seeds: LLM calls and tokens per qualified problem.

    python bench/bench_engine.py [--seeds 12] [--latency 0.05]

The world is built so that direct variants (renumbered seeds) keep the seed's difficulty, as the
paper observes of shallow variants; the mbs/direct ratio shows the engine's accounting, not a claim
about real models.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path

from finmbs.llm import Gateway
from finmbs.mbs.pipeline import run_grow
from finmbs.records import Problem, RunMetrics
from finmbs.runs import read_jsonl
from finmbs.testing.server import ScriptedOpenAIServer
from finmbs.testing.world import Agent, World, value, world_config

AGENTS = {
    "weak-teacher": Agent(capacity=4), "strong-teacher": Agent(),
    "s1": Agent(capacity=3, partial=0.5, boost=3), "s2": Agent(capacity=1, boost=3, partial=0.75),
    "target": Agent(capacity=5, partial=0.5),
}
STAGES = {"N": 8, "Nt": 2, "N_leaf": 3, "D": 2, "Nc": 4, "R": 2, "Nd": 2, "L": 200}


def random_expr(rng: random.Random, ops: int) -> str:
    if ops == 0:
        return str(rng.randint(1, 9))
    left = rng.randint(0, ops - 1)
    op = rng.choice(["+", "-", "*"])
    return f"({random_expr(rng, left)} {op} {random_expr(rng, ops - 1 - left)})"


def seeds(n: int) -> list[Problem]:
    rng = random.Random(7)
    exprs = [random_expr(rng, rng.choice([7, 8])) for _ in range(n)]
    return [Problem(id=f"w{i}", question=f"Compute {e[1:-1]}.", answer=str(value(e))) for i, e in enumerate(exprs)]


async def sample_fullness(gateway: Gateway, stop: asyncio.Event, counts: dict[str, list[int]]) -> None:
    while not stop.is_set():
        for key, limits in gateway._limits.items():
            full, total = counts.setdefault(key.split("|")[-1], [0, 0])
            counts[key.split("|")[-1]] = [full + (limits.in_flight >= limits.max_concurrency), total + 1]
        await asyncio.sleep(0.002)


def candidates(out: Path) -> int:
    """Every teacher-written problem of the run: synthetic nodes, decomposition nodes and rejections."""
    ids = {r["problem"]["id"] for r in read_jsonl(out / "rejected.jsonl")}
    for path in (out / "trees").glob("*.json"):
        tree = json.loads(path.read_text())
        stack = [t["root"] for t in tree["synthetic"]]
        stack += [tree["decomposition"]["root"]] if tree["decomposition"] else []
        while stack:
            node = stack.pop()
            ids.add(node["problem"]["id"])
            stack.extend(node["children"])
    return len(ids - {s["id"] for s in read_jsonl(out / "seeds.jsonl")})


async def run(server, problems, method: str, seed_concurrency: int, concurrency: int, tmp: Path):
    name = f"{method}-{seed_concurrency}"
    config = world_config(server.base_url, ["weak-teacher", "strong-teacher"], ["s1", "s2"], "target",
                          str(tmp / f"{name}.sqlite"), **STAGES)
    config = config.model_copy(update={"seed_concurrency": seed_concurrency})
    for _, endpoint in config.roles.all():
        endpoint.max_concurrency = concurrency
    gateway = Gateway.from_config(config)
    stop, counts = asyncio.Event(), {}
    sampler = asyncio.create_task(sample_fullness(gateway, stop, counts))
    start = server.request_count
    began = time.monotonic()
    metrics: RunMetrics = await run_grow(config, problems, tmp / name, method=method, gateway=gateway)
    wall = time.monotonic() - began
    stop.set()
    await sampler
    gateway.close()
    return {
        "name": name, "wall_s": wall, "requests": server.request_count - start, "candidates": candidates(tmp / name),
        "metrics": metrics, "full": {k: f / t for k, (f, t) in counts.items() if t},
    }


def totals(result) -> tuple[int, int]:
    """(LLM calls, tokens) of a run."""
    usage = result["metrics"].usage.values()
    return sum(u.calls for u in usage), sum(u.prompt_tokens + u.completion_tokens for u in usage)


def per_qualified(total: int, qualified: int) -> str:
    return f"{total / qualified:.1f}" if qualified else "n/a (0 qualified)"


async def main(args) -> None:
    problems = seeds(args.seeds)
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAIServer(World(agents=dict(AGENTS)), latency=args.latency) as server:
        tmp = Path(tmp)
        base = await run(server, problems, "mbs", 1, args.concurrency, tmp)
        fast = await run(server, problems, "mbs", args.seeds, args.concurrency, tmp)
        direct = await run(server, problems, "direct", args.seeds, args.concurrency, tmp)
    print(f"scripted world: {args.seeds} seeds, latency {args.latency * 1000:.0f} ms/request, "
          f"max_concurrency {args.concurrency} per endpoint")
    print("\n1. throughput (mbs)             one seed at a time   all seeds concurrently   ratio")
    for label, key in (("wall s", "wall_s"), ("requests", "requests"), ("candidates", "candidates")):
        print(f"   {label:28s} {base[key]:>18.1f}   {fast[key]:>22.1f}")
    rate_base, rate_fast = base["candidates"] / base["wall_s"], fast["candidates"] / fast["wall_s"]
    print(f"   {'candidates/s':28s} {rate_base:>18.1f}   {rate_fast:>22.1f}   {rate_fast / rate_base:5.1f}x")
    for endpoint in sorted(fast["full"]):
        print(f"   concurrency full: {endpoint:13s} {base['full'].get(endpoint, 0):>17.0%}   "
              f"{fast['full'][endpoint]:>22.0%}")
    print("\n2. per qualified problem          mbs        direct   (same seeds, same world)")
    m, d = fast["metrics"], direct["metrics"]
    (mc, mt), (dc, dt) = totals(fast), totals(direct)
    print(f"   qualified / descendants   {m.qualified:>5} / {m.descendants:<5} {d.qualified:>5} / {d.descendants}")
    print(f"   seed conversion           {m.seed_conversion:>12.0%} {d.seed_conversion:>12.0%}")
    print(f"   LLM calls (tokens)        {mc:>5} ({mt})  {dc:>5} ({dt})")
    print(f"   LLM calls per qualified   {per_qualified(mc, m.qualified):>12} {per_qualified(dc, d.qualified):>12}")
    print(f"   tokens per qualified      {per_qualified(mt, m.qualified):>12} {per_qualified(dt, d.qualified):>12}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
