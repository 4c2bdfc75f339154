"""Structured-output parse failures with and without constrained decoding, on the default teacher.

The teacher is asked for decompositions (prompts/decompose.txt) of the shipped quickstart seeds
with a reference solution, `--samples` times each, once with the JSON schema sent as
`response_format` (a llama.cpp grammar for the embedded model) and once without (the
parse-and-repair baseline). Prints first-attempt parse failures per mode side by side.

    python bench/bench_structured.py --seeds 2 --samples 3
"""

from __future__ import annotations

import argparse
import asyncio
import time

from finmbs.config import load_config
from finmbs.llm import Gateway, parse_structured
from finmbs.llm.structured import schema_format
from finmbs.mbs.decompose import Decomposition
from finmbs.resources import render_prompt, resource_dir
from finmbs.seeds import load_seeds

SOLUTION = "Work through the problem step by step; the final answer is {answer}."


async def failures(
    gateway: Gateway, endpoint, prompts: list[str], samples: int, constrained: bool
) -> tuple[int, int, float]:
    """(unparseable replies, replies, seconds) for every prompt x sample."""
    fmt = schema_format(Decomposition) if constrained else None
    began, bad, total = time.perf_counter(), 0, 0
    for text in prompts:
        replies = await gateway.generate(
            endpoint, role="teacher", messages=[{"role": "user", "content": text}], n=samples, response_format=fmt
        )
        for reply in replies:
            parsed, _ = parse_structured(reply.text, Decomposition)
            bad += parsed is None
            total += 1
    return bad, total, time.perf_counter() - began


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    config = load_config()
    teacher = config.roles.teachers[0]
    seeds = load_seeds(resource_dir("corpora") / "math" / "seeds.jsonl")[: args.seeds]
    prompts = [
        render_prompt(
            "decompose",
            K=config.stages.K,
            document="",
            question=s.question,
            solution=SOLUTION.format(answer=s.answer),
            answer=s.answer,
            failed="",
        )
        for s in seeds
    ]
    gateway = Gateway(cache_path=None, embedded=config.embedded)
    print(f"teacher {teacher.model}, {len(prompts)} decomposition prompts x {args.samples} samples")
    for name, constrained in (("parse and repair (no constraint)", False), ("json_schema constrained", True)):
        bad, total, seconds = await failures(gateway, teacher, prompts, args.samples, constrained)
        print(f"{name:<34} unparseable {bad}/{total}  ({seconds:.0f} s)", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
