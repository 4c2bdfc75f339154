"""Re-execute every kept problem's program, apart from the run that verified it (issue 36: "every
qualified problem's program re-executes to its answer").

    python bench/bench_reexec.py RUN [RUN ...] [--file qualified.jsonl] [--concurrency 4]

For each run folder (or a problems JSONL given directly), every problem's meta.program runs again in
the sandbox (finmbs/verify/program.py) with its passage and its children's functions, and its result
is compared with the stated answer by the domain comparer alone (math-verify, the finance comparer; no
model call). Prints per run: problems, re-executed, agree, mismatch, undecided (finance the comparer
cannot decide without the judge), failed (no longer runs), no program, and the wall time; then every
problem that did not agree. Exit status 1 when any problem mismatched or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

from finmbs.mbs.programs import reexecute_all
from finmbs.seeds import load_seeds

OUTCOMES = ("agree", "mismatch", "undecided", "failed", "no_program")


def problems_file(path: Path, name: str) -> Path:
    return path / name if path.is_dir() else path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (or problem JSONL files)")
    parser.add_argument("--file", default="qualified.jsonl", help="the problems file inside a run folder")
    parser.add_argument("--concurrency", type=int, default=4, help="sandboxes at once")
    args = parser.parse_args(argv)
    bad = 0
    print(
        f"{'run':40} {'problems':>8} {'re-executed':>11} " + " ".join(f"{o:>10}" for o in OUTCOMES) + f" {'wall s':>7}"
    )
    for run in args.runs:
        path = problems_file(run, args.file)
        problems = load_seeds(path)
        started = time.monotonic()
        results = asyncio.run(reexecute_all(problems, args.concurrency))
        wall = time.monotonic() - started
        counts = Counter(r.outcome for r in results)
        ran = len(results) - counts["no_program"]
        print(
            f"{str(run)[-40:]:40} {len(results):>8} {ran:>11} "
            + " ".join(f"{counts[o]:>10}" for o in OUTCOMES)
            + f" {wall:>7.1f}"
        )
        for r in results:
            if r.outcome not in ("agree", "no_program"):
                print(f"  {r.outcome}: {r.id}: answer {r.answer!r}, program {r.program_answer!r} {r.detail}".rstrip())
        bad += counts["mismatch"] + counts["failed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
