"""Harder-leaf retry rounds with a real teacher: a fresh sample (the paper) against a retry told which
variants were rejected and why (`stages.leaf_feedback`), side by side.

For each seed, the config's teachers write its verified trace and round 0's variants (as a grow
run does), then `--retries` more rounds in each mode. Each variant is put through the novelty
guard (a copy of the seed's wording, a restatement of it or of a sibling) and the question-only checks
(its own answer given, a sentence answer); what is left is what a grow run would send for
verification. Prints every variant with its fate, then per mode the variants written and the share
the guard rejected. No response cache unless `--cache` names one (a grow run's cache replays its traces
and round 0).

    python bench/bench_leaf_rounds.py --seeds corpora/math/seeds-easy.jsonl --only qs-orchard,qs-stickers --retries 3
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from pathlib import Path

from finmbs.config import load_config
from finmbs.llm import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.leaves import leaf_round
from finmbs.mbs.novelty import unworkable
from finmbs.mbs.traces import teacher_trace
from finmbs.records import Problem, TreeNode
from finmbs.seeds import SeedsError, load_seeds

ROOT = Path(__file__).resolve().parents[1]
MODES = {"fresh sample (paper)": False, "told the rejected (leaf_feedback)": True}


async def round_variants(ctx: Context, leaf: TreeNode, ledger: Ledger, r: int, tally: Counter[str]) -> None:
    """Round `r` of `leaf` as harder_leaves asks it (`leaf_round`): each variant's fate into `tally`, and
    each rejection into `ledger`, where a later round told the rejected reads it."""
    round_ = await leaf_round(ctx, leaf, ledger, r)
    for v in round_.written:
        bad = unworkable(v) if v in round_.fresh else None
        if bad:
            ledger.reject(v, "leaf", bad[1], check=bad[0])
        fate = "copy or restatement" if v not in round_.fresh else bad[0] if bad else "to verification"
        tally[fate] += 1
        tally["variants"] += 1
        print(f"  round {r}  {fate:<20} {v.question[:110]!r} -> {v.answer}", flush=True)
    if not round_.parsed:
        tally["unparsed replies"] += 1


async def main(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    config = config.model_copy(update={"cache_path": args.cache})
    try:
        seeds: list[Problem] = load_seeds(args.seeds)
    except (SeedsError, FileNotFoundError) as exc:
        raise SystemExit(str(exc)) from None
    if args.only:
        seeds = [s for s in seeds if s.id in args.only.split(",")]
    gateway = Gateway.from_config(config)
    tallies = {mode: Counter[str]() for mode in MODES}
    try:
        for seed in seeds:
            ctx = Context(config=config, gateway=gateway)
            trace, why = await teacher_trace(ctx, seed, relabel=config.stages.relabel)
            if trace is None:
                print(f"{seed.id}: no verified trace ({why}); skipped", flush=True)
                continue
            leaf = TreeNode(problem=seed, trace=trace, path="0")
            print(f"{seed.id}: {seed.question[:110]!r} -> {seed.answer}", flush=True)
            first = Ledger(seed.id)
            await round_variants(ctx, leaf, first, 0, Counter())
            for mode, feedback in MODES.items():
                print(f" {mode}", flush=True)
                told = Context(
                    config=config.model_copy(
                        update={"stages": config.stages.model_copy(update={"leaf_feedback": feedback})}
                    ),
                    gateway=gateway,
                )
                ledger = Ledger(seed.id, rejected=list(first.rejected))
                for r in range(1, args.retries + 1):
                    await round_variants(told, leaf, ledger, r, tallies[mode])
    finally:
        gateway.close()
    print(f"\n{'retry rounds':<36}{'variants':>9}{'copies':>8}{'share':>8}{'to verification':>17}")
    for mode, t in tallies.items():
        copies = t["copy or restatement"]
        share = copies / t["variants"] if t["variants"] else 0.0
        print(f"{mode:<36}{t['variants']:>9}{copies:>8}{share:>8.0%}{t['to verification']:>17}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=Path, default=ROOT / "corpora" / "math" / "seeds-easy.jsonl")
    parser.add_argument("--only", default="", help="comma-separated seed ids")
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--cache", default=None, help="a response cache to read and write (default: none)")
    parser.add_argument("--config", default=None)
    asyncio.run(main(parser.parse_args()))
