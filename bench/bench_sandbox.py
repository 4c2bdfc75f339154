"""What the program sandbox's OS layer costs: wall time per program with the namespaces and the privilege
drop (the default) against the same programs without them (`confined=False`), interleaved in one run.

    python bench/bench_sandbox.py [--programs 40]

Prints seconds per program for each side and their ratio, and the layers that held."""

from __future__ import annotations

import argparse
import statistics
import time

from finmbs.verify.program import run_program, sandbox_layers

PROGRAMS = (
    "answer = 1470 // 25",
    "from fractions import Fraction\nanswer = Fraction(3, 8) * 40",
    "import math\nrate = 0.0525\nanswer = round(1_000_000 * rate * 90 / 360, 2)",
    "from datetime import date\nanswer = (date(2024, 9, 30) - date(2024, 6, 30)).days",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=40, help="programs per side")
    args = parser.parse_args()
    print("layers:", sandbox_layers())
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.programs):
        source = PROGRAMS[i % len(PROGRAMS)]
        for confined in (True, False) if i % 2 else (False, True):  # alternate the order
            start = time.perf_counter()
            result = run_program(source, confined=confined)
            times[confined].append(time.perf_counter() - start)
            assert result.ok, result
    with_layer, without = statistics.median(times[True]), statistics.median(times[False])
    print(f"programs per side: {args.programs}")
    print(f"median s/program, OS layer on:  {with_layer:.3f}")
    print(f"median s/program, OS layer off: {without:.3f}")
    print(f"ratio on/off: {with_layer / without:.2f}x")


if __name__ == "__main__":
    main()
