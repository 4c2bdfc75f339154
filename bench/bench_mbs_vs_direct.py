"""MBS against direct seed synthesis at matched construction tokens (appendix C, table 7 and table 8), on
the embedded default models, with the default (finmbs) profile and with the paper profile.

For each profile, on the same seeds, the same models and one response cache:
1. MBS (`finmbs grow`);
2. direct synthesis oversampled to each seed's MBS tokens (`--method direct --match-budget` the MBS run):
   the tokens counted on both sides are those of every model call before re-grounding, quality control
   and calibration (`finmbs.mbs.direct.budget_tokens`), so like is compared with like.
Printed per run: seeds in / with a verified trace, descendants (calibrated synthetic roots), root
candidates (with the roots the novelty guard or quality control rejected), Goldilocks, qualified, seed
conversion, matched-budget tokens and construction tokens (every role but the target), tokens per
qualified problem; then the MBS / direct ratios of qualified problems and of seed conversion, in the
same process. The qualified problems of every run are written to OUT/RUN/qualified.jsonl to be read.

    flock /tmp/finmbs-cpu.lock python bench/bench_mbs_vs_direct.py --out /tmp/bench-mbs-direct \\
        [--seeds corpora/math/seeds-hard.jsonl corpora/math/seeds-more.jsonl] [--limit 11] \\
        [--profiles finmbs paper finmbs-prose finmbs-no-ops] [--mbs-only finmbs-prose] [--set stages.N=4 ...]

finmbs-prose is the default profile with decomposition from prose (`stages.decompose_from_program` and
`stages.slice_asks` off): what the program slices add. finmbs-no-ops is the default profile without the
engine's program operators, composition and program roots: what issue 59's lever adds. Each row also counts the roots per seed, the
too-easy seeds' roots, effective decompositions out of attempts (and those cut from the program), and the
children each form of the leak check removed (answer / question / worked solution); MBS rows also count
the children kept in the trees that one of those forms would have removed, and the effective
decompositions that had such a child (what the check does where it is off: the paper profile).

The default seeds: the six of seeds-hard.jsonl (the 0.5B target 0/4) and the five of seeds-more.jsonl
(1/4): eleven seeds the 0.5B mostly fails; whether the 1.5B teacher solves each is measured by the run
(seeds with a verified trace).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from finmbs.config import load_config
from finmbs.mbs.direct import with_budgets
from finmbs.records import Problem, RunMetrics
from finmbs.runs.budgets import construction_budgets
from finmbs.runs.grow import run_grow
from finmbs.seeds import load_seeds

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SEEDS = [ROOT / "corpora" / "math" / "seeds-hard.jsonl", ROOT / "corpora" / "math" / "seeds-more.jsonl"]


def row(name: str, m: RunMetrics, budget_tokens: int, wall: float) -> dict:
    per_q = budget_tokens / m.qualified if m.qualified else None
    return {
        "run": name,
        "seeds_in": m.seeds_in,
        "seeds_with_trace": m.seeds_with_trace,
        "descendants": m.descendants,
        "root_candidates": m.root_candidates,
        "goldilocks": m.goldilocks,
        "qualified": m.qualified,
        "qualified_rate": round(m.qualified_rate, 3),
        "seeds_converted": m.seeds_converted,
        "seed_conversion": round(m.seed_conversion, 3),
        "matched_tokens": budget_tokens,
        "construction_tokens": m.construction_tokens,
        "matched_tokens_per_qualified": per_q and round(per_q),
        "novelty_rejected": m.novelty_rejected,
        "roots_per_seed": round(m.descendants / m.seeds_in, 2) if m.seeds_in else None,
        "too_easy_roots": m.too_easy_roots,
        "too_easy_qualified": m.too_easy_qualified,
        "decompositions_effective": m.decompositions_effective,
        "decompositions_attempted": m.decompositions_attempted,
        "from_program": m.decompositions_from_program,
        "from_program_effective": m.from_program_effective,
        "prose_fallbacks": m.prose_fallbacks,
        "leaks_answer_question_solution": [m.leaks_by_answer, m.leaks_by_question, m.leaks_by_solution],
        "wall_s": round(wall, 1),
    }


def kept_leaks(run: Path) -> dict:
    """The children kept in the run's decompositions that reveal their parent's answer, per form of the
    leak check (`finmbs.mbs.novelty.revealing`, each child's verified trace as the worked solution its
    students read), and the effective decompositions with such a child (an accepted attempt, as the run's
    metrics count them): what the check removes where it is off (the paper profile); zero where it is on."""
    from finmbs.mbs.context import decomposition_attempts
    from finmbs.mbs.novelty import LEAK_FORMS, revealing
    from finmbs.runs.load import load_run

    forms = dict.fromkeys(LEAK_FORMS, 0)
    effective_with_leak = 0
    for tree in load_run(run).trees.values():
        for node in tree.decomposition.root.walk() if tree.decomposition else ():
            leaks = [
                found
                for child in node.children
                if (found := revealing(child.problem, node.problem, shown=child.trace.text if child.trace else ""))
            ]
            for form, _ in leaks:
                forms[form] += 1
            effective = any(d.outcome == "accepted" for d in decomposition_attempts(node))
            effective_with_leak += bool(leaks) and effective
    return {"kept_children_leaking": [forms[f] for f in LEAK_FORMS], "effective_with_leak": effective_with_leak}


def matched_tokens(run: Path) -> int:
    return sum(construction_budgets(run).values())


# finmbs-prose: the default profile with decomposition from prose, as the paper decomposes (the slices off)
PROSE = ["stages.decompose_from_program=false", "stages.slice_asks=false"]
# finmbs-no-ops: the default profile without the engine's program operators (issue 59): leaves hardened by
# the prompt operators alone, parents composed by the teacher alone, seeds entering only on prose traces
NO_OPS = ["stages.program_operators=false", "stages.engine_compose=false", "stages.program_roots=false"]
OWN = {"finmbs-prose": PROSE, "finmbs-no-ops": NO_OPS}


async def one_profile(profile: str, seeds: list[Problem], out: Path, overrides: list[str], direct: bool) -> list[dict]:
    own = OWN.get(profile, [])
    config = load_config(
        None, [*own, *overrides, f"cache_path={out / 'cache.sqlite'}"], profile="paper" if profile == "paper" else None
    )
    rows = []
    mbs_dir, direct_dir = out / f"{profile}-mbs", out / f"{profile}-direct"
    start = time.monotonic()
    mbs = await run_grow(config, seeds, mbs_dir, method="mbs")
    rows.append(row(f"{profile} MBS", mbs, matched_tokens(mbs_dir), time.monotonic() - start) | kept_leaks(mbs_dir))
    print(json.dumps(rows[-1]), flush=True)  # as each run ends: a run cut short by a time limit still reports
    if not direct:
        return rows
    start = time.monotonic()
    direct = await run_grow(config, with_budgets(seeds, construction_budgets(mbs_dir)), direct_dir, method="direct")
    rows.append(row(f"{profile} direct (matched)", direct, matched_tokens_direct(direct_dir), time.monotonic() - start))
    print(json.dumps(rows[-1]), flush=True)
    return rows


def matched_tokens_direct(run: Path) -> int:
    """The direct run's tokens as its budget counts them, from each tree file's per-stage usage."""
    from finmbs.mbs.direct import budget_tokens
    from finmbs.runs.load import load_run

    return sum(budget_tokens(tree.stages) for tree in load_run(run).trees.values())


PROFILES = ["finmbs", "paper", "finmbs-prose", "finmbs-no-ops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=Path, default=DEFAULT_SEEDS)
    parser.add_argument("--limit", type=int, default=None, help="the first N seeds only")
    parser.add_argument("--profiles", nargs="+", default=["finmbs", "paper"], choices=PROFILES)
    parser.add_argument(
        "--mbs-only", nargs="*", default=[], choices=PROFILES, help="profiles run without the direct baseline"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    seeds = [s for path in args.seeds for s in load_seeds(path)][: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for profile in args.profiles:
        rows += asyncio.run(one_profile(profile, seeds, args.out, args.overrides, direct=profile not in args.mbs_only))
    for profile in args.profiles:
        if profile in args.mbs_only:
            continue
        mbs, direct = (r for r in rows if r["run"].split()[0] == profile)
        ratio = {
            "profile": profile,
            "qualified MBS/direct": round(mbs["qualified"] / direct["qualified"], 2) if direct["qualified"] else None,
            "seed conversion MBS/direct": (
                round(mbs["seed_conversion"] / direct["seed_conversion"], 2) if direct["seed_conversion"] else None
            ),
            "matched tokens direct/MBS": round(direct["matched_tokens"] / mbs["matched_tokens"], 2)
            if mbs["matched_tokens"]
            else None,
        }
        print(json.dumps(ratio), flush=True)
    (args.out / "bench.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
