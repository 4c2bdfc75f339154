"""Decontamination speed: the hashed n-gram index vs a naive pairwise n-gram comparison, same inputs, same hits.

    python3 bench/bench_decontaminate.py [--data ../shared/data] [--problems 2000] [--naive 200]

Problems are the real DAPO-Math-17K sample (training-style questions) plus a few planted benchmark questions;
references are every evaluation set found in --data. Both sides are timed like for like: the build (the
index's hash table; the naive side's n-gram sets of the references) and the queries, separately. Prints the
query time per 1000 problems of both, and the ratio of the totals (build + queries) over the --naive problems
the naive side is given (the index answers the same problems again for that ratio).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from finmbs.export.decontaminate import Decontaminator, load_eval_sets
from finmbs.ngrams import words
from finmbs.records import Problem


def naive_grams(references: list, n: int) -> list[tuple]:
    """The naive side's build: every reference with the set of its word n-grams (no index)."""
    return [
        (r, grams)
        for r in references
        for t in [words(r.text)]
        if (grams := {tuple(t[i : i + n]) for i in range(len(t) - n + 1)})
    ]


def naive_hits(problems: list[Problem], ref_grams: list[tuple], n: int, min_coverage: float) -> dict[str, str]:
    """For every problem, every reference: the share of the reference's n-grams in the problem."""
    hits = {}
    for problem in problems:
        tokens = words(problem.question)
        grams = {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}
        for ref, other in ref_grams:
            if len(grams & other) >= min_coverage * len(other):
                hits[problem.id] = ref.source
                break
    return hits


def timed(work):
    """`work()`'s result and its wall time in seconds."""
    start = time.perf_counter()
    result = work()
    return result, time.perf_counter() - start


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

    eval_sets, loaded = timed(lambda: load_eval_sets([args.data]))
    references = [r for refs in eval_sets.values() for r in refs]
    checker, built = timed(lambda: Decontaminator(eval_sets, [], n=13))
    index_hits, indexed = timed(lambda: {p.id: h.source for p in problems if (h := checker.check(p))})

    sample = problems[: args.naive]
    ref_grams, naive_built = timed(lambda: naive_grams(references, 13))
    naive, pairwise = timed(lambda: naive_hits(sample, ref_grams, 13, 0.5))
    _, sample_indexed = timed(lambda: [checker.check(p) for p in sample])
    agree = {k for k in index_hits if k in {p.id for p in sample}} == set(naive)

    print(
        f"eval references: {len(references)} ({', '.join(f'{k} {len(v)}' for k, v in eval_sets.items())}); "
        f"loaded in {loaded:.2f}s (not counted on either side)"
    )
    print(
        f"index : built in {built:.2f}s; {len(problems)} problems queried in {indexed:.2f}s = "
        f"{1000 * indexed / len(problems):.3f} s/1000 problems; contaminated {len(index_hits)} (planted {len(planted)})"
    )
    print(
        f"naive : built in {naive_built:.2f}s; {len(sample)} problems queried in {pairwise:.2f}s = "
        f"{1000 * pairwise / len(sample):.3f} s/1000 problems; contaminated {len(naive)}; same problems as the index: {agree}"
    )
    print(f"ratio naive/index, queries only, per problem: {(pairwise / len(sample)) / (indexed / len(problems)):.1f}x")
    print(
        f"ratio naive/index, build + queries of the same {len(sample)} problems: "
        f"{naive_built + pairwise:.2f}s / {built + sample_indexed:.2f}s = {(naive_built + pairwise) / (built + sample_indexed):.1f}x"
    )


if __name__ == "__main__":
    main()
