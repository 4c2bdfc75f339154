"""How well a judge model tells well-posed math problems from ill-posed ones (quality control, quality.py).

    python bench/quality_judge.py [--config configs/default.yaml] [--set roles.judge.model=...] [--data FILE]

Each record of the labeled set (default: bench/data/well_posed.jsonl, 16 original problems: 8 pairs of one
ill-posed problem, whose solution starts from a quantity the question never states, and its well-posed
twin) is judged exactly as the engine judges a candidate (`quality.judge_well_posed`, the run config's
judge, temperature 0, through the gateway and its cache). Printed: each verdict, then accuracy, how many
ill-posed problems were caught and how many well-posed ones were wrongly rejected, and the judge's
tokens and seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from finmbs.config import load_config
from finmbs.llm import Gateway
from finmbs.mbs.context import Context
from finmbs.mbs.quality import judge_well_posed
from finmbs.records import Problem, Trace, TreeNode

ROOT = Path(__file__).resolve().parents[1]


def nodes(path: Path) -> list[tuple[bool, TreeNode]]:
    labeled = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        problem = Problem(id=row["id"], question=row["question"], answer=row["answer"])
        trace = Trace(text=row["solution"], answer=row["answer"], model="label", verified=True)
        labeled.append((row["well_posed"], TreeNode(problem=problem, trace=trace, path="0")))
    return labeled


async def main(args: argparse.Namespace) -> None:
    config = load_config(args.config, args.set or [])
    gateway = Gateway.from_config(config)
    ctx = Context(config=config, gateway=gateway)
    labeled = nodes(args.data)
    start = time.monotonic()
    verdicts = [await judge_well_posed(ctx, node) for _, node in labeled]  # one at a time: per-call seconds
    seconds = time.monotonic() - start
    rows = []
    for (label, node), verdict in zip(labeled, verdicts):
        said = None if verdict is None else verdict.well_posed
        rows.append((label, said))
        mark = "ok " if said == label else "ERR"
        reason = verdict.reason.replace("\n", " ")[:150] if verdict else "(unparseable)"
        print(f"{mark} {node.problem.id:26} label={'well' if label else 'ill ':4} judge={said!s:5} {reason}")
    ill = [s for label, s in rows if not label]
    well = [s for label, s in rows if label]
    usage = gateway.role_usage("judge")
    print(
        f"\njudge {config.roles.judge.model}: accuracy {sum(said == label for label, said in rows)}/{len(rows)}; "
        f"ill-posed caught {sum(s is False for s in ill)}/{len(ill)}; "
        f"well-posed wrongly rejected {sum(s is False for s in well)}/{len(well)}; "
        f"unparseable {sum(s is None for _, s in rows)}"
    )
    print(
        f"{usage.calls} calls ({usage.cache_hits} from cache), {usage.prompt_tokens} prompt + "
        f"{usage.completion_tokens} completion tokens, {seconds:.0f} s"
    )
    gateway.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    parser.add_argument("--set", action="append", help="KEY=VALUE override, as `finmbs grow --set`")
    parser.add_argument("--data", type=Path, default=ROOT / "bench" / "data" / "well_posed.jsonl")
    asyncio.run(main(parser.parse_args()))
