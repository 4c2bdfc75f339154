"""Embedded models on the CPU: tokens/s of the two default models alone and generating together.

Together, the two models' generations either share the cores (`embedded.schedule: share`: the
cores are divided among the models that have work, so both run at once) or take turns with all cores
(`serial`). Each row prints tokens/s per model and in total, and the ratio to the serial baseline.
Oversubscription (every generation with all cores at once) is what the scheduler prevents;
`--oversubscribe` measures it too, for reference.

The uneven rows give the 1.5B three times the 0.5B's work, as a grow run does (the teacher writes
and verifies, the student answers): once the 0.5B is done, `share` gives the 1.5B every core, where a
fixed split (cores / loaded models, the earlier scheduler) kept it on half of them.

The decoding rows compare, per model, llama-cpp-python's own `create_chat_completion` drawing n
samples one after another (the baseline: what finmbs ran before `finmbs/llm/decoding.py`) with
finmbs's decoder drawing them one request at a time, as n samples of one request, and as n requests
of one sample each made at the same time (different prompts, as seeds running at once send them; the
decoder batches them), at temperature 1.0.

    nice -n 15 python bench/bench_embedded.py --tokens 96 --rounds 2
    python bench/bench_embedded.py --decoding-only --samples 4 --tokens 128 [--repack off]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from finmbs.config import EmbeddedSettings, Endpoint
from finmbs.llm import embedded
from finmbs.llm.backends import EmbeddedBackend
from finmbs.llm.embedded import ThreadScheduler

MODELS = ("embedded/qwen2.5-coder-1.5b-instruct", "embedded/qwen2.5-coder-0.5b-instruct")
PROMPT = [{"role": "user", "content": "Write the numbers from 1 to 400 in words, separated by commas."}]


def endpoint(model: str) -> Endpoint:
    return Endpoint(name=model.split("/")[1], model=model)


async def generate(backend: EmbeddedBackend, model: str, tokens: int, rounds: int) -> tuple[int, float]:
    """(completion tokens, seconds) of `rounds` greedy generations of `tokens` tokens, one after another."""
    from finmbs.llm.types import Message

    messages = [Message(**m) for m in PROMPT]
    began, total = time.perf_counter(), 0
    for seed in range(rounds):
        reply = await backend.complete(
            endpoint(model),
            messages=messages,
            prompt=None,
            n=1,
            params={"max_tokens": tokens, "temperature": 0.0, "seed": seed},
        )
        total += reply.completion_tokens
    return total, time.perf_counter() - began


async def together(backend: EmbeddedBackend, tokens: int, rounds: int) -> dict[str, float]:
    """Both models generating at once; tokens/s per model and in total (over the longer wall time)."""
    results = await asyncio.gather(*(generate(backend, m, tokens, rounds) for m in MODELS))
    wall = max(seconds for _, seconds in results)
    rates = {m.split("/")[1]: count / seconds for m, (count, seconds) in zip(MODELS, results)}
    rates["total"] = sum(count for count, _ in results) / wall
    return rates


async def uneven(backend: EmbeddedBackend, tokens: int, rounds: int) -> dict[str, float]:
    """The 1.5B with 3 x `rounds` generations while the 0.5B has `rounds`; total tokens/s over the wall time."""
    began = time.perf_counter()
    results = await asyncio.gather(
        generate(backend, MODELS[0], tokens, 3 * rounds), generate(backend, MODELS[1], tokens, rounds)
    )
    wall = time.perf_counter() - began
    rates = {m.split("/")[1]: count / seconds for m, (count, seconds) in zip(MODELS, results)}
    rates["total"] = sum(count for count, _ in results) / wall
    return rates


SOLVE = [
    {
        "role": "user",
        "content": "A shop sells pens at $3 each and notebooks at $5 each. Mia buys 4 pens and "
        "some notebooks and pays $37. How many notebooks did she buy? Reason step by step.",
    }
]


def high_level_rates(model: str, tokens: int, samples: int, cores: int, repack: bool | None) -> float:
    """Tokens/s of llama-cpp-python's create_chat_completion, `samples` samples one after another."""
    from llama_cpp import Llama

    name = model.split("/")[1]
    with embedded._weight_repacking(embedded.repack_default(repack)):
        llama = Llama(
            model_path=str(embedded.model_path(name)), n_ctx=4096, n_threads=cores, n_threads_batch=cores, verbose=False
        )
    llama.create_chat_completion(messages=SOLVE, max_tokens=4, seed=0)  # warm
    began, count = time.perf_counter(), 0
    for seed in range(samples):
        out = llama.create_chat_completion(messages=SOLVE, max_tokens=tokens, temperature=1.0, seed=seed)
        count += out["usage"]["completion_tokens"]
    rate = count / (time.perf_counter() - began)
    llama.close()
    return rate


async def decoder_rate(backend: EmbeddedBackend, model: str, tokens: int, samples: int, mode: str) -> float:
    """Tokens/s of finmbs's decoder drawing `samples` samples: one request each, in a row (`row`); one
    request of all of them (`request`); one request each, all made at the same time (`requests`)."""
    from finmbs.llm.types import Message

    params = {"max_tokens": tokens, "temperature": 1.0}

    async def ask(seeds: list[int], topic: int = 0) -> int:
        messages = [Message(role="user", content=SOLVE[0]["content"].replace("4 pens", f"{4 + topic} pens"))]
        reply = await backend.complete(
            endpoint(model), messages=messages, prompt=None, n=len(seeds), params={**params, "seeds": seeds}
        )
        return reply.completion_tokens

    await backend.complete(
        endpoint(model), messages=[Message(**SOLVE[0])], prompt=None, n=1, params={**params, "max_tokens": 4}
    )
    began = time.perf_counter()
    if mode == "row":
        count = sum([await ask([s], topic=s) for s in range(samples)])
    elif mode == "request":
        count = await ask(list(range(samples)))
    else:  # different prompts, as concurrent seeds send them
        count = sum(await asyncio.gather(*(ask([s], topic=s) for s in range(samples))))
    return count / (time.perf_counter() - began)


async def decoding(args: argparse.Namespace) -> None:
    backend = EmbeddedBackend(EmbeddedSettings(schedule="serial", threads=args.threads, repack=args.repack))
    print(
        f"decoding: {args.samples} samples x {args.tokens} tokens, temperature 1.0, {backend.cores} cores, "
        f"repack {embedded.repack_default(args.repack)}"
    )
    print(
        f"{'model':<30} {'create_chat_completion':>24} {'decoder, 1 at a time':>22} {'1 request of n':>16}"
        f" {'n requests at once':>20}"
    )
    for model in MODELS:
        # on a thread that ends with it: llama.cpp's OpenMP threads outlive a calling thread's work until
        # that thread ends, and a second set of them slows every other (decoding.Decoder._wait_or_drive)
        with ThreadPoolExecutor(1) as pool:
            base = pool.submit(high_level_rates, model, args.tokens, args.samples, backend.cores, args.repack).result()
        rates = [
            await decoder_rate(backend, model, args.tokens, args.samples, mode)
            for mode in ("row", "request", "requests")
        ]
        cells = " ".join(f"{r:9.1f} ({r / base:4.2f}x)" for r in rates)
        print(f"{model.split('/')[1]:<30} {base:17.1f} tok/s {cells}", flush=True)


def fixed_split(cores: int | None) -> EmbeddedBackend:
    """The earlier scheduler: every generation on cores / loaded models threads, busy or not."""
    backend = EmbeddedBackend(EmbeddedSettings(schedule="share", threads=cores))
    backend._threads_wanted = lambda: max(1, backend.cores // len(MODELS))  # type: ignore[method-assign]
    return backend


def backend_for(schedule: str, cores: int | None, oversubscribe: bool = False) -> EmbeddedBackend:
    backend = EmbeddedBackend(EmbeddedSettings(schedule=schedule, threads=cores))
    if oversubscribe:  # every generation takes all cores at once: no admission
        backend.scheduler = ThreadScheduler(backend.cores * len(MODELS))
        backend._threads_wanted = lambda: backend.cores  # type: ignore[method-assign]
    return backend


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="cores for embedded models (default: all)")
    parser.add_argument("--oversubscribe", action="store_true", help="also run without the scheduler")
    parser.add_argument("--samples", type=int, default=4, help="samples per request in the decoding rows")
    parser.add_argument("--repack", choices=["on", "off"], default=None, help="weight repacking (default: auto)")
    parser.add_argument("--decoding-only", action="store_true", help="only the decoding rows")
    args = parser.parse_args()
    args.repack = None if args.repack is None else args.repack == "on"
    await decoding(args)
    if args.decoding_only:
        return

    serial = backend_for("serial", args.threads)
    for model in MODELS:  # load both models (and warm them) before timing
        await generate(serial, model, 4, 1)
    print(f"cores: {serial.cores}; {args.rounds} x {args.tokens} tokens per model, greedy")
    for model in MODELS:
        count, seconds = await generate(serial, model, args.tokens, args.rounds)
        print(f"alone       {model.split('/')[1]:<30} {count / seconds:6.1f} tokens/s (all cores)")
    rows = [("serial", serial)]
    rows.append(("share", backend_for("share", args.threads)))
    if args.oversubscribe:
        rows.append(("oversubscribed", backend_for("serial", args.threads, oversubscribe=True)))
    baseline = None
    print(
        f"{'together':<16} " + " ".join(f"{m.split('/')[1]:>30}" for m in MODELS) + f" {'total':>8} {'vs serial':>10}"
    )
    for name, backend in rows:
        rates = await together(backend, args.tokens, args.rounds)
        baseline = baseline or rates["total"]
        cells = " ".join(f"{rates[m.split('/')[1]]:30.1f}" for m in MODELS)
        print(f"{name:<16} {cells} {rates['total']:8.1f} {rates['total'] / baseline:9.2f}x", flush=True)
    baseline = None
    print(
        f"{'uneven (3:1)':<16} "
        + " ".join(f"{m.split('/')[1]:>30}" for m in MODELS)
        + f" {'total':>8} {'vs fixed':>10}"
    )
    for name, backend in (("fixed split", fixed_split(args.threads)), ("share", backend_for("share", args.threads))):
        rates = await uneven(backend, args.tokens, args.rounds)
        baseline = baseline or rates["total"]
        cells = " ".join(f"{rates[m.split('/')[1]]:30.1f}" for m in MODELS)
        print(f"{name:<16} {cells} {rates['total']:8.1f} {rates['total'] / baseline:9.2f}x", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
