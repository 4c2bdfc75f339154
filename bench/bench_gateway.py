"""Gateway overhead: achieved calls/s against a fixed-latency OpenAI-compatible server.

For each concurrency C the ideal rate is C / latency. The gateway (litellm, cache, limits,
retries, accounting) is run side by side with a bare aiohttp client (the baseline: no gateway) on
the same server, and each prints achieved / ideal. Then the same workload is rerun on the
gateway's persistent cache, which must send 0 requests.

    python bench/bench_gateway.py --latency 0.2 --concurrency 32 256 --calls-per-slot 6
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from finmbs.config import Endpoint
from finmbs.llm import Gateway


def start_server(latency: float) -> tuple[subprocess.Popen, str]:
    """The scripted server in its own process, so its CPU is not the client's event loop."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "finmbs.testing.server", "--latency", str(latency)], stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


def prompts(count: int, tag: str) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{tag} question {i}"}] for i in range(count)]


async def run_gateway(gateway: Gateway, endpoint: Endpoint, work: list) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(gateway.generate(endpoint, role="bench", messages=m) for m in work))
    return time.perf_counter() - start


async def run_baseline(base_url: str, concurrency: int, work: list) -> float:
    """Bare aiohttp POSTs under a semaphore: what server and machine allow without the gateway."""
    semaphore = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as client:

        async def one(messages: list) -> None:
            async with semaphore:
                body = {"model": "x", "messages": messages}
                async with client.post(f"{base_url}/chat/completions", json=body) as response:
                    response.raise_for_status()
                    await response.json()

        start = time.perf_counter()
        await asyncio.gather(*(one(m) for m in work))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--calls-per-slot", type=int, default=6, help="calls = concurrency x this")
    args = parser.parse_args()
    proc, base_url = start_server(args.latency)
    try:
        print(f"server {base_url} latency {args.latency * 1000:.0f} ms")
        print(
            f"{'conc':>5} {'calls':>6} {'ideal/s':>8} {'gateway/s':>10} {'ratio':>6} {'bare/s':>8} {'ratio':>6} {'gw/bare':>8}"
        )
        for concurrency in args.concurrency:
            calls = concurrency * args.calls_per_slot
            ideal = concurrency / args.latency
            endpoint = Endpoint(
                name="bench",
                model="openai/bench",
                api_base=base_url,
                max_concurrency=concurrency,
                max_tokens=16,
                timeout_s=60,
            )
            with tempfile.TemporaryDirectory() as tmp:
                cache = str(Path(tmp) / "cache.sqlite")
                gateway = Gateway(cache_path=cache)
                asyncio.run(run_gateway(gateway, endpoint, prompts(8, "warm-up")))  # litellm's lazy first-call setup
                gw_s = asyncio.run(run_gateway(gateway, endpoint, prompts(calls, f"c{concurrency}")))
                base_s = asyncio.run(run_baseline(base_url, concurrency, prompts(calls, f"b{concurrency}")))
                rerun = Gateway(cache_path=cache)
                asyncio.run(run_gateway(rerun, endpoint, prompts(calls, f"c{concurrency}")))
            gw_rate, base_rate = calls / gw_s, calls / base_s
            print(
                f"{concurrency:>5} {calls:>6} {ideal:>8.0f} {gw_rate:>10.1f} {gw_rate / ideal:>6.2f} "
                f"{base_rate:>8.1f} {base_rate / ideal:>6.2f} {gw_rate / base_rate:>8.2f}"
            )
            print(f"      cache rerun: {rerun.total_calls} requests, {rerun.usage['bench'].cache_hits} cache hits")
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
