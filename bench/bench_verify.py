"""How often the deterministic finance comparer decides without an LLM call, and how accurately;
and what the math reward's hard time limit costs on ordinary answers.

    python bench/bench_verify.py [--data ../shared/data] [--math-only]

Two sets: the hand-written comparer table (tests/test_finance_compare.py) and FinanceBench answer
pairs: each gold answer against reformatted variants of itself (should be equal), perturbed
variants (a changed figure or a flipped yes/no: should differ), and another question's answer
(should differ). Prints, per set, the fraction decided (equal/different, no judge needed), the
undecided rows (left to the judge: neither right nor wrong here, so in no accuracy), the accuracy of
the decided rows, the wrong "equal" count (the worst error), and the time per comparison. In the
hand-written table a row labelled undecided that the comparer decides counts as a wrong decision.

Math: ordinary answer pairs checked by `math_equal` (math-verify in a worker process under a hard
limit) side by side with the baseline, math-verify called in this process with no limit (the old
path), printing the time per check of each and their ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

from finmbs.verify.finance import compare, polarity

ROOT = Path(__file__).resolve().parents[1]
_SINGLE = re.compile(r"^(?P<cur>\$)?\s*(?P<num>-?[\d,]*\.?\d+)\s*(?P<pct>%)?$")


def hand_written_cases() -> list[tuple[str, str, str | None, str]]:
    spec = importlib.util.spec_from_file_location("cases", ROOT / "tests" / "test_finance_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


def _fmt(value: Decimal, cur: str, pct: str) -> str:
    return f"{cur}{value:,}{pct}"


def positives(gold: str) -> list[str]:
    """Reformatted variants that mean the same as `gold`."""
    variants = [gold.strip() + ".", gold.upper()]
    if m := _SINGLE.match(gold.strip()):
        value, cur, pct = Decimal(m["num"].replace(",", "")), m["cur"] or "", m["pct"] or ""
        variants.append(_fmt(value, cur, pct))  # thousands separators
        if pct:
            variants += [f"{value} percent", f"{value / 100}", f"{value * 100} bps"]
        elif cur:
            variants += [f"USD {value}", f"{value}"]
        else:
            variants.append(f"{value}0" if "." in m["num"] else f"{value}.0")
    if found := polarity(gold):
        variants.append(found[0].capitalize())
    return variants


def perturbed(gold: str) -> list[str]:
    """Variants that must not equal `gold`: a changed figure, a flipped yes/no."""
    variants = []
    if m := _SINGLE.match(gold.strip()):
        value, cur, pct = Decimal(m["num"].replace(",", "")), m["cur"] or "", m["pct"] or ""
        exponent = value.as_tuple().exponent
        step = Decimal(1).scaleb(exponent if isinstance(exponent, int) else 0)
        variants += [_fmt(value + 3 * step, cur, pct), _fmt((value * Decimal("1.1")).quantize(step) + step, cur, pct)]
    if found := polarity(gold):
        variants.append("No" if found[0] == "yes" else "Yes")
    return variants


def financebench_pairs(path: Path) -> list[tuple[str, str, str | None, str, str]]:
    """(predicted, gold, question, truth, kind) pairs built deterministically from the answers."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    pairs = []
    for i, row in enumerate(rows):
        gold, question = row["answer"], row["question"]
        pairs += [(p, gold, question, "equal", "reformatted") for p in positives(gold)]
        pairs += [(p, gold, question, "different", "perturbed") for p in perturbed(gold)]
        other = rows[(i + 1) % len(rows)]["answer"]
        if other.strip().lower() != gold.strip().lower():
            pairs.append((other, gold, question, "different", "other answer"))
    return pairs


def measure(name: str, cases: list[tuple[str, str, str | None, str, str]]) -> None:
    start = time.perf_counter()
    results = [(compare(p, g, q).verdict, truth, kind) for p, g, q, truth, kind in cases]
    per_call_us = (time.perf_counter() - start) / len(cases) * 1e6
    print(f"\n{name}: {len(cases)} comparisons, {per_call_us:.0f} us each")
    print(f"{'kind':<16}{'n':>6}{'decided':>10}{'undecided':>11}{'accuracy':>10}{'wrong equal':>13}")
    for kind in sorted({k for *_, k in results}) + ["all"]:
        rows = [r for r in results if kind in ("all", r[2])]
        decided = [r for r in rows if r[0] != "undecided"]
        correct = sum(r[0] == r[1] for r in decided)
        wrong_equal = sum(r[0] == "equal" and r[1] != "equal" for r in decided)
        accuracy = f"{correct / len(decided):.1%}" if decided else "-"
        undecided = len(rows) - len(decided)
        print(
            f"{kind:<16}{len(rows):>6}{len(decided) / len(rows):>10.1%}{undecided:>11}{accuracy:>10}{wrong_equal:>13}"
        )
    print("verdicts:", dict(Counter(r[0] for r in results)))


def math_pairs() -> list[tuple[str, str]]:
    """Ordinary (predicted, gold) pairs as rewards see them: fractions, decimals, LaTeX, algebra, misses."""
    pairs = []
    for i in range(1, 41):
        pairs += [
            (rf"\frac{{{i}}}{{{2 * i}}}", "0.5"),
            (f"{i}.0", str(i)),
            (f"{i + 1}", str(i)),
            (rf"{i}\sqrt{{2}}", rf"\sqrt{{{2 * i * i}}}"),
            (f"x^2 + {2 * i}x + {i * i}", f"(x + {i})^2"),
        ]
    return pairs


def baseline_math_equal(predicted: str, gold: str) -> bool:
    """The old in-process path: math-verify with its time limits off."""
    from math_verify import parse, verify

    from finmbs.verify.math import _wrap

    try:
        g, p = parse(_wrap(gold), parsing_timeout=None), parse(_wrap(predicted), parsing_timeout=None)
        return bool(g and p and verify(g, p, timeout_seconds=None))
    except Exception:
        return False


def measure_math() -> None:
    from finmbs.verify.math import MATH_TIMEOUT_S, _verified, math_equal, warm_up

    pairs = math_pairs()
    warm_up(1)
    baseline_math_equal("1", "2")
    math_equal("3", "4")  # both sides pay math-verify's lazy imports before timing
    start = time.perf_counter()
    old = [baseline_math_equal(p, g) for p, g in pairs]
    old_ms = (time.perf_counter() - start) / len(pairs) * 1e3
    _verified.cache_clear()
    start = time.perf_counter()
    new = [math_equal(p, g) for p, g in pairs]
    new_ms = (time.perf_counter() - start) / len(pairs) * 1e3
    print(f"\nmath-verify on {len(pairs)} ordinary pairs (limit {MATH_TIMEOUT_S:g} s):")
    print(f"{'baseline (in process, no limit)':<40}{old_ms:>8.2f} ms/check")
    print(f"{'math_equal (worker process, limit)':<40}{new_ms:>8.2f} ms/check   ratio {new_ms / old_ms:.2f}x")
    print(f"same verdicts: {old == new} ({sum(new)} equal)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--math-only", action="store_true", help="only the math reward's timing")
    args = parser.parse_args()
    measure_math()
    if args.math_only:
        return
    table = [(p, g, q, truth, truth) for p, g, q, truth in hand_written_cases()]
    measure("hand-written table (truth = the table's label; accuracy over the decided rows only)", table)
    measure(
        "FinanceBench answer pairs", financebench_pairs(args.data / "financebench" / "financebench_open_source.jsonl")
    )


if __name__ == "__main__":
    main()
