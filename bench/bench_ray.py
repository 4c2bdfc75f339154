"""The Ray executor against the local executor, on the same scripted `grow` workload.

The scripted arithmetic world (finmbs/testing/world.py, the seeds and stages of bench_engine.py)
is served by a real OpenAI-compatible HTTP server in its own process, with a fixed latency per
request. Every run starts from an empty cache, so every LLM call is really sent. Reported side by
side in one run:

1. overhead: wall time of the Ray executor with one worker / the local executor, same seeds, same
   per-process seed concurrency, no added latency (engine-bound: the ratio is what Ray's actor
   start-up, pickling and result passing cost; the cluster's own start and the workers' start-up
   (a trivial item through fresh workers) are reported apart);
2. scaling: Ray with 1 and 2 workers against the server with latency (each worker runs
   `seed_concurrency` seeds at a time), and the local executor with twice the seed concurrency as the
   single-process reference for the same number of seeds in flight.

    python bench/bench_ray.py [--seeds 24] [--latency 0.25] [--concurrency 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import AGENTS, STAGES, seeds  # noqa: E402  (the engine bench's workload)

from finmbs.config import RunConfig  # noqa: E402
from finmbs.executors import make_executor  # noqa: E402
from finmbs.records import Problem, RunMetrics  # noqa: E402
from finmbs.runs.grow import run_grow  # noqa: E402
from finmbs.testing.server import ScriptedOpenAIServer  # noqa: E402
from finmbs.testing.world import World, world_config  # noqa: E402


def serve_world(latency: float, urls: multiprocessing.Queue) -> None:
    """The world's server, in its own process so that it competes with no executor for the GIL."""
    server = ScriptedOpenAIServer(World(agents=dict(AGENTS)), latency=latency).start()
    urls.put(server.base_url)
    while True:
        time.sleep(3600)


def start_world(latency: float) -> tuple[multiprocessing.Process, str]:
    context = multiprocessing.get_context("spawn")
    urls = context.Queue()
    process = context.Process(target=serve_world, args=(latency, urls), daemon=True)
    process.start()
    return process, urls.get(timeout=60)


def config(base_url: str, cache: Path, concurrency: int) -> RunConfig:
    cfg = world_config(base_url, ["weak-teacher", "strong-teacher"], ["s1", "s2"], "target", str(cache), **STAGES)
    roles = cfg.roles.model_dump()
    for endpoint in [*roles["teachers"], *roles["students"], roles["target"], roles["judge"]]:
        endpoint["max_concurrency"] = 64  # the executors, not the endpoint limits, set the pace
    return cfg.model_copy(update={"roles": type(cfg.roles).model_validate(roles), "seed_concurrency": concurrency})


def grow(
    base_url: str,
    problems: list[Problem],
    tmp: Path,
    name: str,
    concurrency: int,
    executor: str,
    workers: int | None = None,
) -> tuple[float, RunMetrics]:
    """Wall seconds of one run from an empty cache, and its metrics."""
    cfg = config(base_url, tmp / f"{name}.sqlite", concurrency)
    start = time.perf_counter()
    with make_executor(executor, cfg, ray_workers=workers) as runner:
        metrics = asyncio.run(run_grow(cfg, problems, tmp / name, executor=runner))
    return time.perf_counter() - start, metrics


async def nothing(item: int, gateway: object, tick: object) -> int:
    return item


def actor_start(cfg: RunConfig, workers: int) -> float:
    """Seconds for W fresh workers to answer one trivial item each (process start, imports, gateway)."""
    start = time.perf_counter()
    with make_executor("ray", cfg, ray_workers=workers) as runner:
        asyncio.run(runner.map(nothing, list(range(workers)), concurrency=1, on_result=lambda item, result: None))
    return time.perf_counter() - start


def row(name: str, wall: float, metrics: RunMetrics, base: float) -> dict:
    calls = sum(u.calls for u in metrics.usage.values())
    return {
        "run": name,
        "wall_s": round(wall, 2),
        "vs_first": round(wall / base, 2),
        "llm_calls": calls,
        "calls_per_s": round(calls / wall, 1),
        "qualified": metrics.qualified,
        "descendants": metrics.descendants,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--concurrency", type=int, default=2, help="seed_concurrency per process")
    parser.add_argument("--repeats", type=int, default=1, help="scaling runs of each kind (fastest kept)")
    args = parser.parse_args()
    problems = seeds(args.seeds)

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    ray_start = time.perf_counter() - start
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; ray.init {ray_start:.1f} s", flush=True)

    c = args.concurrency
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        fast, fast_url = start_world(0.0)
        local = grow(fast_url, problems, tmp, "local", c, "local")
        ray1 = grow(fast_url, problems, tmp, "ray1-fast", c, "ray", 1)
        fast.terminate()
        starts = {w: round(actor_start(config(fast_url, tmp / "noop.sqlite", c), w), 2) for w in (1, 2)}
        overhead = [
            row(f"local (seed_concurrency {c}), latency 0", *local, local[0]),
            row(f"ray, 1 worker x {c}, latency 0", *ray1, local[0]),
        ]

        slow, slow_url = start_world(args.latency)
        runs: dict[str, list[tuple[float, RunMetrics]]] = {"ray1": [], "ray2": [], "wide": []}
        for r in range(args.repeats):  # interleaved, the fastest of each kept (a shared machine is noisy)
            runs["ray1"].append(grow(slow_url, problems, tmp, f"ray1-{r}", c, "ray", 1))
            runs["ray2"].append(grow(slow_url, problems, tmp, f"ray2-{r}", c, "ray", 2))
            runs["wide"].append(grow(slow_url, problems, tmp, f"wide-{r}", 2 * c, "local"))
        one, two, wide = (min(runs[k], key=lambda run: run[0]) for k in ("ray1", "ray2", "wide"))
        slow.terminate()
        scaling = [
            row(f"ray, 1 worker x {c}, latency {args.latency}", *one, one[0]),
            row(f"ray, 2 workers x {c}, latency {args.latency}", *two, one[0]),
            row(f"local (seed_concurrency {2 * c}), latency {args.latency}", *wide, one[0]),
        ]
    ray.shutdown()
    same = len({(r.qualified, r.descendants) for r in (local[1], ray1[1], one[1], two[1], wide[1])}) == 1
    print(
        json.dumps(
            {
                "seeds": args.seeds,
                "ray_init_s": round(ray_start, 1),
                "actor_start_s": starts,
                "overhead": overhead,
                "scaling": scaling,
                "identical_yield": same,
            },
            indent=2,
        )
    )
    print(f"\nRay overhead (1 worker / local, latency 0): {ray1[0] / local[0]:.2f}x wall time")
    print(
        f"scaling 1 -> 2 Ray workers (latency {args.latency}): {one[0] / two[0]:.2f}x faster; "
        f"local with {2 * c} seeds in flight: {one[0] / wide[0]:.2f}x"
    )


if __name__ == "__main__":
    main()
