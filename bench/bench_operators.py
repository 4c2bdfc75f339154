"""The engine's program operators against problems no one here wrote: GSM8K test questions.

    python bench/bench_operators.py [--want 40] [--scan 80] [--skip 0] [--data ../shared/data] [--config configs/default.yaml]
                                    [--cache /tmp/finmbs-ops/cache.sqlite] [--samples 4] [--out variants.jsonl]
                                    [--concurrency 4]

For the first `--want` GSM8K test questions (of the first `--scan`) whose program the configured teacher
writes correctly (`labels.program_to_answer`, as a leaf gets its program; `--skip` the first N test questions,
to go on from an earlier run's questions with a new cache), the engine applies its operators
exactly as leaf hardening does (`engine_leaves.engine_leaves`: the givens drawn again, then backward, one
added step, two added steps, each worded, slot-checked and round-tripped). Then the weakest student (the
target in the default config) and the strongest student answer the originals and the variants that passed,
`--samples` each at the students' configured budget. Prints, per operator: built, passed the checks, and
each model's accuracy on the originals those variants came from against the variants; writes every variant
(question, answer, program, round trip, prose tally) to `--out` for reading by hand. The published drops
to compare with: MetaMath FOBAR (backward), GSM-Symbolic P1/P2 (one and two added steps).
Skips with a message when the GSM8K data (../shared/data/gsm8k) is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from finmbs.config import load_config
from finmbs.evaluate.benchmarks import load_benchmark
from finmbs.evaluate.loaders import load_items
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.engine_leaves import engine_leaves
from finmbs.mbs.labels import program_to_answer
from finmbs.mbs.solve import student_accuracy
from finmbs.records import Problem, TreeNode

ROOT = Path(__file__).resolve().parents[1]


async def one(ctx: Context, problem: Problem) -> tuple[Problem | None, list[Problem], list[dict]]:
    """(the problem with its verified program or None, the variants that passed, every rejection row)."""
    written, why = await program_to_answer(ctx, problem)
    if why:
        return None, [], []
    leaf, ledger = TreeNode(problem=written, path="0"), Ledger(problem.id)
    kept = await engine_leaves(ctx, leaf, ledger)
    rows = [
        {"operator": r.problem.meta.get("operator"), "check": r.data.get("check"), "reason": r.reason}
        for r in ledger.rejected
    ]
    return written, [n.problem for n in kept], rows


async def main(args: argparse.Namespace) -> int:
    data = Path(args.data)
    if not (data / "gsm8k").is_dir():
        print(f"skipped: no GSM8K data at {data / 'gsm8k'}")
        return 0
    items, _ = load_items(load_benchmark("gsm8k"), data / "gsm8k")
    config = load_config(args.config, args.set or [])
    config.stages.N = args.samples
    gateway = Gateway(cache_path=str(args.cache), budget=config.budget, embedded=config.embedded)
    ctx = Context(config=config, gateway=gateway)
    weak, strong = config.roles.students[-1], config.roles.students[0]
    start = time.monotonic()
    sources: list[Problem] = []
    variants: list[Problem] = []
    refused: dict[str, list[str]] = defaultdict(list)
    scanned = 0
    pending = list(items[args.skip : args.skip + args.scan])
    while pending and len(sources) < args.want:
        # questions in groups of --concurrency: their requests to one embedded model decode in the same steps
        group, pending = pending[: args.concurrency], pending[args.concurrency :]
        scanned += len(group)
        problems = [Problem(id=i.id, question=i.question, answer=i.answer, domain="math") for i in group]
        for problem, (written, kept, rows) in zip(problems, await asyncio.gather(*(one(ctx, p) for p in problems))):
            if written is None or len(sources) >= args.want:
                continue
            sources.append(written)
            variants.extend(kept)
            for row in rows:
                refused[str(row["operator"]).split(":")[0]].append(f"{row['check']}: {row['reason'][:100]}")
            print(f"[{time.monotonic() - start:6.0f}s] {problem.id}: {len(kept)} variants kept", file=sys.stderr)

    async def accuracy(student, problem: Problem) -> float:
        return await student_accuracy(ctx, student, problem)

    by_id = {p.id: p for p in sources}
    acc: dict[tuple[str, str], float] = {}
    out = Path(args.out)

    def write() -> None:
        """Every variant to --out: before the students answer (to be read if the run is stopped), then again
        with their accuracies."""
        with out.open("w", encoding="utf-8") as f:
            for v in variants:
                row = {
                    "id": v.id,
                    "source": v.provenance.parent_ids[0],
                    "source_question": by_id[v.provenance.parent_ids[0]].question,
                    "operator": v.meta.get("operator"),
                    "question": v.question,
                    "answer": v.answer,
                    "program": v.meta.get("program"),
                    "round_trip": v.meta.get("round_trip"),
                    "prose_traces": v.meta.get("prose_traces"),
                    "worded_by": v.meta.get("worded_by"),
                    **{f"acc_{s.name}": acc.get((s.name, v.id)) for s in (weak, strong)},
                }
                f.write(json.dumps(row) + "\n")

    write()
    for student in (weak, strong):
        everything = [*sources, *variants]
        for k in range(0, len(everything), args.concurrency):
            batch = everything[k : k + args.concurrency]
            for problem, value in zip(batch, await asyncio.gather(*(accuracy(student, p) for p in batch))):
                acc[(student.name, problem.id)] = value
    write()
    print(
        f"GSM8K test: scanned {scanned} (after the first {args.skip}), the teacher's program correct for {len(sources)}; "
        f"{time.monotonic() - start:.0f} s; variants written to {out}"
    )
    print(
        f"{'operator':<12} {'built':>5} {'passed':>6}  "
        + "  ".join(f"{s.name + ' orig -> var':>28}" for s in (weak, strong))
    )
    for op in ("backward", "added_step", "two_steps"):
        mine = [v for v in variants if str(v.meta.get("operator")).split(":")[0] == op]
        built = len(mine) + sum(not r.startswith("operator") for r in refused[op])
        cells = []
        for s in (weak, strong):
            if mine:
                orig = sum(acc[(s.name, v.provenance.parent_ids[0])] for v in mine) / len(mine)
                var = sum(acc[(s.name, v.id)] for v in mine) / len(mine)
                cells.append(f"{orig:>13.3f} -> {var:<11.3f}")
            else:
                cells.append(f"{'-':>28}")
        print(f"{op:<12} {built:>5} {len(mine):>6}  " + "  ".join(cells))
        reasons = defaultdict(int)
        for r in refused[op]:
            reasons[r.split(":")[0]] += 1
        print(f"{'':<12} rejected by check: {dict(reasons)}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--want", type=int, default=40)
    p.add_argument("--scan", type=int, default=80)
    p.add_argument("--skip", type=int, default=0, help="start after the first N test questions")
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    p.add_argument("--set", action="append")
    p.add_argument("--cache", default="/tmp/finmbs-ops/cache.sqlite")
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=4, help="questions worked at once")
    p.add_argument("--out", default="/tmp/finmbs-ops/variants.jsonl")
    return p.parse_args(argv)


if __name__ == "__main__":
    ns = parse_args()
    Path(ns.cache).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    raise SystemExit(asyncio.run(main(ns)))
