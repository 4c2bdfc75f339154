"""Decontamination speed: the hashed n-gram index vs a naive pairwise n-gram comparison, same inputs, same hits.

    python3 bench/bench_decontaminate.py [--data ../shared/data] [--problems 2000] [--naive 200]

Problems are the real DAPO-Math-17K sample (training-style questions) plus a few planted benchmark questions;
references are every evaluation set found in --data. Prints seconds per 1000 problems for both and the ratio.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from finmbs.export.decontaminate import Decontaminator, load_eval_sets
from finmbs.ngrams import words
from finmbs.records import Problem


def naive_hits(problems: list[Problem], references: list, n: int, min_coverage: float) -> dict[str, str]:
    """For every problem, every reference: the share of the reference's n-grams in the problem (no index)."""
    ref_grams = [
        (r, grams)
        for r in references
        for t in [words(r.text)]
        if (grams := {tuple(t[i : i + n]) for i in range(len(t) - n + 1)})
    ]
    hits = {}
    for problem in problems:
        tokens = words(problem.question)
        grams = {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}
        for ref, other in ref_grams:
            if len(grams & other) >= min_coverage * len(other):
                hits[problem.id] = ref.source
                break
    return hits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--problems", type=int, default=2000)
    parser.add_argument("--naive", type=int, default=200, help="problems given to the naive baseline")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (args.data / "dapo_math_17k" / "dapo_math_17k_sample2000.jsonl").open()]
    problems = [Problem(id=f"dapo-{r['id']}", question=r["problem"], answer=r["answer"]) for r in rows]
    math500 = [json.loads(line) for line in (args.data / "math500" / "test.jsonl").open()]
    planted = [
        Problem(id=f"plant-{i}", question="Try this: " + r["problem"], answer=r["answer"])
        for i, r in enumerate(math500[:20])
        if len(words(r["problem"])) >= 13
    ]
    problems = (planted + problems)[: args.problems]

    start = time.perf_counter()
    eval_sets = load_eval_sets([args.data])
    loaded = time.perf_counter() - start
    start = time.perf_counter()
    checker = Decontaminator(eval_sets, [], n=13)
    built = time.perf_counter() - start
    start = time.perf_counter()
    index_hits = {p.id: h.source for p in problems if (h := checker.check(p))}
    indexed = time.perf_counter() - start

    sample = problems[: args.naive]
    references = [r for refs in eval_sets.values() for r in refs]
    start = time.perf_counter()
    naive = naive_hits(sample, references, 13, 0.5)
    pairwise = time.perf_counter() - start
    agree = {k for k in index_hits if k in {p.id for p in sample}} == set(naive)

    refs = sum(len(v) for v in eval_sets.values())
    print(
        f"eval references: {refs} ({', '.join(f'{k} {len(v)}' for k, v in eval_sets.items())}); "
        f"loaded in {loaded:.2f}s, index built in {built:.2f}s"
    )
    print(
        f"index : {len(problems)} problems in {indexed:.2f}s = {1000 * indexed / len(problems):.3f} s/1000 problems;"
        f" contaminated {len(index_hits)} (planted {len(planted)})"
    )
    print(
        f"naive : {len(sample)} problems in {pairwise:.2f}s = {1000 * pairwise / len(sample):.3f} s/1000 problems;"
        f" contaminated {len(naive)}; same problems as the index: {agree}"
    )
    print(f"ratio naive/index time per problem: {(pairwise / len(sample)) / (indexed / len(problems)):.1f}x")


if __name__ == "__main__":
    main()
