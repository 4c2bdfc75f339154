"""Re-qualify a pool against the next checkpoint, beside grow's calibration stage on the same problems
(issue 49): counts moved stale / Goldilocks / hard, wall time and rollouts per second of each, in one run.

    flock /tmp/finmbs-cpu.lock python bench/bench_requalify.py [POOL] [--with-seeds] [--next MODEL] [--out DIR]

POOL (default corpora/demo/quickstart-run, grown for the embedded 0.5B target; --with-seeds adds its seeds) is
read as `finmbs requalify` reads it. Three passes, each with fresh draws (a new response cache in OUT):
  calibrate   grow's calibration stage (`mbs.calibrate.calibrate_all`) with the config's target (the 0.5B): the
              pool as calibrated for the 0.5B, which the two passes below re-qualify and measure moves from
  next        `finmbs requalify` with MODEL (default the embedded 1.5B) standing in as the next checkpoint
  requalify   `finmbs requalify` with the same policy: the stage's own overhead at equal model, and how many
              problems move by drawing N rollouts again (sampling noise)
All three use N = stages.N and L = stages.L of the config (configs/default.yaml: N=4, L=384).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from finmbs.config import load_config
from finmbs.llm import Gateway
from finmbs.mbs.calibrate import band_summary, calibrate_all
from finmbs.mbs.context import Context
from finmbs.records import DifficultyReport
from finmbs.runs.pool import read_pool
from finmbs.runs.requalify import Policy, RequalifySummary, requalify, weights_sha256
from finmbs.verify import verify_response

ROOT = Path(__file__).resolve().parents[1]


def line(name: str, policy: str, rollouts: int, wall_s: float, bands: dict[str, int]) -> str:
    rate = rollouts / wall_s if wall_s else 0.0
    counts = " ".join(f"{band} {bands.get(band, 0)}" for band in ("hard", "goldilocks", "stale"))
    return f"{name:<10} {policy:<22} {rollouts:>8} {wall_s:>8.1f} {rate:>10.3f}   {counts}"


async def bench(pool_path: Path, next_model: str, out: Path, with_seeds: bool, overrides: list[str]) -> int:
    pool = read_pool(pool_path)
    for error in pool.errors:
        print(f"skipped: {error}")
    if with_seeds:  # the seeds themselves join the pool (hard verified questions, calibrated by the first pass)
        known = {p.id for p in pool.problems}
        pool.problems += [s for s in pool.seeds if s.id not in known]
    config = load_config(overrides=[*overrides, f"cache_path={out / 'cache.sqlite'}"])
    n, budget = config.stages.N, config.stages.L
    target = config.roles.target
    following = target.model_copy(update={"name": next_model.removeprefix("embedded/") + "-next", "model": next_model})
    started = time.monotonic()
    for endpoint in (target, following):  # loaded before any pass is timed: no pass pays a model load
        if endpoint.is_embedded:
            from finmbs.llm.embedded import decoder

            decoder(endpoint.model, config.embedded.n_ctx, config.embedded.repack)
    await verify_response("math", "Final answer: \\boxed{1}", "1")  # the verifier's imports, before any timing
    print(
        f"pool {pool_path}: {len(pool.problems)} problems, N={n}, L={budget}; models loaded in "
        f"{time.monotonic() - started:.1f} s"
    )
    print(f"{'pass':<10} {'policy':<22} {'rollouts':>8} {'wall s':>8} {'rollout/s':>10}   bands")
    rows = []
    gateway = Gateway.from_config(config)
    try:
        started = time.monotonic()
        annotated = await calibrate_all(
            Context(config=config, gateway=gateway), pool.problems, target=target, concurrency=target.max_concurrency
        )
        wall = time.monotonic() - started
        bands = band_summary([DifficultyReport.model_validate(p.meta["difficulty"]) for p in annotated])
        rows.append(line("calibrate", target.name, len(annotated) * n, wall, bands))
        print(rows[-1], flush=True)
        pool.problems = annotated  # the pool as calibrated for the target by this run: what the next passes move from
        summaries: list[RequalifySummary] = []
        for name, endpoint in (("next", following), ("requalify", target)):  # the demonstration first
            policy = Policy(endpoint=endpoint, weights_sha256=weights_sha256(endpoint))
            summary = await requalify(config, pool, policy, out / f"requalify-{name}", gateway=gateway)
            summaries.append(summary)
            rows.append(line(name, endpoint.name, summary.rollouts, summary.wall_s, summary.bands))
            print(rows[-1], flush=True)
    finally:
        gateway.close()
    for moved in summaries:  # the next checkpoint, then the same policy drawn again (sampling noise at N)
        print(f"\nunder {moved.policy}, from the calibrate pass (band then -> band now):")
        for was, now in moved.moved.items():
            print(f"  {was:<10} -> " + ", ".join(f"{band} {count}" for band, count in sorted(now.items())))
        print(
            f"  in the band: {moved.qualified}, hard held back: {moved.bands.get('hard', 0)}, "
            f"stale seeds: {moved.stale_seeds or 'none'}"
        )
    print(f"\nhistories and refreshed pools: {out}/requalify-*")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pool", nargs="?", type=Path, default=ROOT / "corpora" / "demo" / "quickstart-run")
    parser.add_argument("--next", default="embedded/qwen2.5-coder-1.5b-instruct", help="the next checkpoint's model")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_requalify"), help="scratch folder (replaced)")
    parser.add_argument("--with-seeds", action="store_true", help="the pool's seeds join it (a larger pool)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    return asyncio.run(bench(args.pool, args.next, args.out, args.with_seeds, args.set))


if __name__ == "__main__":
    sys.exit(main())
