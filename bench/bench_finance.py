"""Finance `grow` with re-grounding, in the scripted finance world, on the shipped demo seeds.

The scripted finance world (finmbs/testing/finance_world.py) plays every role on a real local
OpenAI-compatible server; re-grounding runs against a real Qdrant Edge index of real credit
agreements (`agreements_index`, from ../shared/data). Two worlds, side by side in one process:

- clean: the teacher copies passages faithfully and uses only passage figures (a passage without
  whole-number figures makes it invent some, which only the judge can see);
- adversarial: it also misquotes every passage of one agreement, plants a seed-passage figure into
  the re-grounded roots on another, and invents a figure on a third.

Printed per world: re-grounding candidates and the fraction rejected by each check (extraction and
verbatim proof per extraction: one per (seed, retrieved document), counted as the run makes them, so
fewer than seeds x Kd when a seed has no tree or fewer unseen documents; reply, mechanical
leakage/grounding check and judge per node);
judge LLM calls per qualified problem (every judge request that reached the server: answerability
and the equivalence judge; identical prompts are gateway cache hits and cost nothing); answerability
judgments per qualified problem (one per node that passed the mechanical check, cached or not), and
the judgments a judge-only screen would need (every node) against the mechanical check first.

    python bench/bench_finance.py [--seeds 15] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

from finmbs.mbs import reground as reground_stage
from finmbs.records import Problem
from finmbs.runs import read_jsonl
from finmbs.runs.grow import run_grow
from finmbs.testing.finance_world import DUPLICATE, FinanceWorld, agreements_index
from finmbs.testing.server import ScriptedOpenAIServer
from finmbs.testing.world import Agent, world_config

ROOT = Path(__file__).resolve().parents[1]
AGENTS = {
    "weak-teacher": Agent(capacity=2),
    "strong-teacher": Agent(),
    "s1": Agent(capacity=2, partial=0.5),
    "s2": Agent(capacity=1, boost=2, partial=0.875),
    "target": Agent(capacity=6, partial=0.5),
}
STAGES = {"Nt": 2, "N": 8, "N_leaf": 2, "L": 100, "D": 1, "Kd": 4}
WORLDS = {
    "clean": {},
    "adversarial": {"misquote": {"host_hotels"}, "plant": {DUPLICATE[1]}, "invent": {"commercial_metals"}},
}


def shadow(i: int) -> str:
    """A 3-operation arithmetic shadow per seed (distinct numbers, same shape as the engine tests')."""
    return f"({i + 2} + {i + 3}) * ({i + 4} + 1)"


async def one_world(name: str, seeds: list[Problem], index_settings, work: Path) -> dict:
    with ScriptedOpenAIServer() as server:
        server.handler = FinanceWorld(
            agents=dict(AGENTS), seeds={s.question: (s.answer, shadow(i)) for i, s in enumerate(seeds)}, **WORLDS[name]
        )
        config = world_config(
            server.base_url,
            ["weak-teacher", "strong-teacher"],
            ["s1", "s2"],
            "target",
            str(work / f"{name}.sqlite"),
            **STAGES,
        )
        config = config.model_copy(update={"domain": "finance", "index": index_settings, "seed_concurrency": 4})
        out = work / name
        # every extraction of d' and e' from one retrieved document (one (seed, document) pair), counted as it runs
        with mock.patch.object(reground_stage, "new_ground", wraps=reground_stage.new_ground) as extraction:
            metrics = await run_grow(config, seeds, out)
    rejected = [r for r in read_jsonl(out / "rejected.jsonl") if r["stage"] == "reground"]
    checks = Counter(r["data"]["check"] for r in rejected)
    attempts = extraction.await_count
    nodes = metrics.descendants + checks["reply"] + checks["leakage"] + checks["judge"]
    answerability = nodes - checks["reply"] - checks["leakage"]
    judge_calls = metrics.usage["judge"].calls if "judge" in metrics.usage else 0
    per = lambda x: x / metrics.qualified if metrics.qualified else float("nan")  # noqa: E731
    return {
        "world": name,
        "seeds": len(seeds),
        "extractions": attempts,
        "rejected_extract": checks["extract"] / max(attempts, 1),
        "rejected_verbatim": checks["verbatim"] / max(attempts, 1),
        "grounded_nodes": nodes,
        "rejected_reply": checks["reply"] / max(nodes, 1),
        "rejected_leakage": checks["leakage"] / max(nodes, 1),
        "rejected_judge": checks["judge"] / max(nodes, 1),
        "calibrated": metrics.descendants,
        "qualified": metrics.qualified,
        "seed_conversion": metrics.seed_conversion,
        "judge_llm_calls": judge_calls,
        "judge_llm_calls_per_qualified": per(judge_calls),
        "answerability_judgments_per_qualified": per(answerability),
        "judge_only_judgments_per_qualified": per(nodes - checks["reply"]),
        "leakage_reasons": Counter(r["reason"] for r in rejected if r["data"]["check"] == "leakage").most_common(3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=15)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    seeds = [
        Problem.model_validate_json(line)
        for line in (ROOT / "corpora" / "finance" / "seeds.jsonl").read_text().splitlines()
    ][: args.seeds]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        index_settings = agreements_index(work / "index", args.data)
        rows = [asyncio.run(one_world(name, seeds, index_settings, work)) for name in WORLDS]
    for row in rows:
        print(json.dumps(row))
    keys = [k for k in rows[0] if k not in ("world", "leakage_reasons")]
    print("\n| metric | " + " | ".join(r["world"] for r in rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for key in keys:
        cells = [f"{r[key]:.3f}" if isinstance(r[key], float) else str(r[key]) for r in rows]
        print(f"| {key} | " + " | ".join(cells) + " |")
    for row in rows:
        ratio = row["judge_only_judgments_per_qualified"] / row["answerability_judgments_per_qualified"]
        print(f"{row['world']}: a judge-only screen would need {ratio:.2f}x the answerability judgments")


if __name__ == "__main__":
    main()
