"""Re-grounding on the config's models (the embedded default unless --config), the new document shown as
the index's chunks (`stages.reground_document: excerpts`) or as their small-to-big windows (`windows`), side
by side: each seed, as a lone-root synthetic tree, is re-grounded on every unseen document (Kd) of the index,
each mode with its own fresh response cache. Printed per mode: re-grounding candidates, rejections by check,
re-grounded problems kept, characters of d', tokens by role, and each kept problem (question, answer and
the opening of d') to be read.

    flock /tmp/finmbs-cpu.lock finmbs ingest corpora/finance/docs --index-path /tmp/fidx
    python bench/bench_reground_document.py --index-path /tmp/fidx [--seeds corpora/finance/seeds-quickstart-more.jsonl]
        [--only qs-av-min-liquidity-floor,qs-al-undrawn-fee-amount] [--extract retrieve]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import Counter
from pathlib import Path

from finmbs.config import load_config
from finmbs.ingest import open_index
from finmbs.llm.gateway import Gateway
from finmbs.mbs.context import Context, Ledger
from finmbs.mbs.reground import excluded_documents, reground
from finmbs.records import Problem, Provenance, SyntheticTree, TreeNode
from finmbs.seeds import SeedsError, load_seeds

ROOT = Path(__file__).resolve().parents[1]


def lone_tree(seed: Problem) -> SyntheticTree:
    """The seed itself as a synthetic tree's only node (its verified answer, its note as the solution)."""
    problem = seed.model_copy(
        update={
            "id": f"{seed.id}.s0",
            "provenance": Provenance(seed_id=seed.id, method="mbs", stage="compose"),
            "meta": {**seed.meta, "teacher_solution": seed.meta.get("note", "")},
        }
    )
    return SyntheticTree(seed_id=seed.id, index=0, root=TreeNode(problem=problem, path="0", mirrors=f"{seed.id}@0"))


async def run(args: argparse.Namespace, shown: str, seeds: list[Problem], cache: str) -> None:
    config = load_config(args.config)
    stages = {"reground_document": shown, **({"extract": args.extract} if args.extract else {})}
    config = config.model_copy(
        update={
            "domain": "finance",
            "cache_path": cache,
            "index": config.index.model_copy(update={"path": args.index_path}),
            "stages": config.stages.model_copy(update=stages),
        }
    )
    gateway = Gateway.from_config(config)
    checks: Counter[str] = Counter()
    kept: list[Problem] = []
    candidates = 0
    try:
        with open_index(config.index) as index:
            excluded = excluded_documents(index, seeds, []).excluded
            ctx = Context(config=config, gateway=gateway, excluded_documents=excluded)
            for seed in seeds:
                ledger = Ledger(seed.id)
                trees = await reground(ctx, index, seed, [lone_tree(seed)], ledger)
                candidates += len(trees) + len(ledger.rejected)
                checks.update(r.data.get("check", "?") for r in ledger.rejected)
                kept += [node.problem for tree in trees for node in tree.root.walk()]
                for r in ledger.rejected:
                    print(f"  [{shown}] {seed.id} rejected ({r.data.get('check')}): {r.reason[:160]}", flush=True)
    finally:
        gateway.close()
    print(f"reground_document: {shown} (extract: {config.stages.extract})")
    print(f"  attempts (kept + rejected): {candidates}; rejected by check: {dict(checks)}; kept: {len(kept)}")
    sizes = [len(p.snippet.text) for p in kept if p.snippet]
    if sizes:
        print(f"  characters of d' (kept, mean): {sum(sizes) / len(sizes):,.0f}")
    for role, use in sorted(gateway.usage.items()):
        print(f"  tokens {role}: {use}")
    for p in kept:
        head = " ".join((p.snippet.text if p.snippet else "").split())[:300]
        print(
            f"  KEPT {p.id}: {p.question}\n    answer {p.answer}; d' ({p.snippet.doc_id if p.snippet else '-'}): {head}"
        )


async def main(args: argparse.Namespace) -> None:
    try:
        seeds = load_seeds(args.seeds)
    except (SeedsError, FileNotFoundError) as exc:
        raise SystemExit(str(exc)) from None
    if args.only:
        seeds = [s for s in seeds if s.id in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for shown in args.modes.split(","):
            await run(args, shown, seeds, str(Path(tmp) / f"{shown}.sqlite"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index-path", required=True)
    parser.add_argument("--seeds", type=Path, default=ROOT / "corpora" / "finance" / "seeds-quickstart-more.jsonl")
    parser.add_argument("--only", default="", help="comma-separated seed ids")
    parser.add_argument("--modes", default="excerpts,windows")
    parser.add_argument("--extract", default="", help="stages.extract (default: the config's)")
    parser.add_argument("--config", default=None)
    asyncio.run(main(parser.parse_args()))
