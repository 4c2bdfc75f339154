"""Label accuracy of `finmbs verify`, programs on vs off, side by side in one run.

    python bench/bench_labels.py [--labels bench/data/labels.jsonl] [--limit N] [--work DIR]
                                 [--modes programs,no-programs] [--set KEY=VALUE ...]

The labeled set (bench/data/labels.jsonl, bench/data/make_labels.py: math word problems and finance
problems on passages of the shipped agreements, half of them with a subtly wrong stated answer, each
wrong row carrying `meta.right_answer` and `meta.flaw`) goes through the CLI exactly as a user runs it,
once per mode:

    finmbs verify LABELS --out WORK/MODE/verified.jsonl [--no-programs] --set cache_path=WORK/MODE/cache.sqlite

Each mode gets a FRESH response cache of its own (WORK/MODE/cache.sqlite in a new WORK folder), so its
tokens and wall time are what that mode costs from nothing, and neither mode reuses the other's samples.
`--work DIR`: a mode that already ran in DIR is read back, not run again, so the modes can run as
separate jobs (`--modes programs --work DIR`, then `--modes no-programs --work DIR`) and a last call
with `--work DIR` prints them side by side.

Per mode and domain it prints: wrong labels accepted as stated (goal 0), wrong labels relabeled to the
right answer (fixed), wrong labels relabeled to another wrong answer, wrong labels rejected, right
labels kept (goal >= 80%), right labels relabeled away, right labels rejected with their reasons, and
the mode's tokens and wall time; then every problem whose outcome differs between the modes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from finmbs.seeds import load_seeds
from finmbs.verify.finance import compare
from finmbs.verify.math import math_equal

ROOT = Path(__file__).resolve().parents[1]
MODES = {"programs": ["--programs"], "no-programs": ["--no-programs"]}


@dataclass
class Outcome:
    """One problem's verdict as `finmbs verify` wrote it."""

    status: str  # verified | relabeled | rejected
    answer: str | None  # the answer it keeps (the relabeled one when relabeled)
    reason: str = ""


def outcome(row: dict[str, Any]) -> Outcome:
    """Read one OUT row of `finmbs verify` (finmbs/mbs/labels.py `LabelCheck`: `outcome` verified | relabeled |
    rejected, `answer` the label it keeps, `reason`, `check` the rejecting check, `program_answer`)."""
    reason = str(row.get("reason") or "")
    if row.get("check"):
        reason = f"[{row['check']}] {reason}"
    if row.get("program_answer") is not None or row.get("program_error"):
        reason += f" (program: {row.get('program_answer') or row.get('program_error')})"
    answer = row.get("answer")
    return Outcome(
        status=str(row.get("outcome") or "").lower(), answer=None if answer is None else str(answer), reason=reason
    )


def same(domain: str, a: str | None, b: str | None, question: str) -> bool:
    """Whether two answers mean the same (the domain's deterministic comparer; finance undecided = not same)."""
    if a is None or b is None:
        return False
    if domain == "math":
        return math_equal(a, b)
    return compare(a, b, question=question).verdict == "equal"


@dataclass
class Tally:
    counts: Counter = field(default_factory=Counter)
    reasons: list[str] = field(default_factory=list)


def score(problems, rows: dict[str, dict]) -> tuple[dict[str, Tally], dict[str, str]]:
    """Per domain: how each labeled problem fared; and each problem's one-word result."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    results: dict[str, str] = {}
    for p in problems:
        tally = tallies[p.domain]
        label = p.meta["label"]
        tally.counts[label] += 1
        row = rows.get(p.id)
        if row is None:
            result = "missing"
        else:
            got = outcome(row)
            right = p.answer if label == "right" else p.meta["right_answer"]
            if got.status == "rejected":
                result = "rejected"
                tally.reasons.append(f"{p.id} ({label}): {got.reason[:110]}")
            elif got.status in ("verified", "relabeled") and same(p.domain, got.answer, right, p.question):
                result = (
                    "kept"
                    if label == "right" and got.status == "verified"
                    else "fixed"
                    if label == "wrong"
                    else "kept (relabeled to same)"
                )
            elif got.status in ("verified", "relabeled"):
                result = "accepted wrong" if label == "wrong" and got.status == "verified" else "relabeled wrong"
            else:
                result = f"unknown status {got.status!r}"
        tally.counts[f"{label}: {result}"] += 1
        results[p.id] = f"{label}: {result}"
    return tallies, results


def run_mode(
    mode: str, labels: Path, work: Path, overrides: list[str], timeout_s: int
) -> tuple[dict, dict, float, str]:
    """Run `finmbs verify` for one mode; its rows by id, its summary, wall seconds and output tail."""
    folder = work / mode
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "verified.jsonl"
    done_file = folder / "bench.json"
    if done_file.is_file() and out.is_file():  # this mode already ran in this work folder: read it back
        return read_mode(out) + (json.loads(done_file.read_text())["seconds"], "")
    command = [
        sys.executable,
        "-c",
        "from finmbs.cli import app; app()",
        "verify",
        str(labels),
        "--out",
        str(out),
        *MODES[mode],
        "--set",
        f"cache_path={folder / 'cache.sqlite'}",
    ]
    for override in overrides:
        command += ["--set", override]
    start = time.monotonic()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=folder,
        env=dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(ROOT))),
    )
    seconds = time.monotonic() - start
    tail = (done.stdout + done.stderr)[-1500:]
    if done.returncode != 0 or not out.is_file():
        raise SystemExit(f"finmbs verify ({mode}) failed with exit {done.returncode}: {' '.join(command)}\n{tail}")
    done_file.write_text(json.dumps({"seconds": round(seconds, 1), "command": command}))
    return read_mode(out) + (seconds, tail)


def read_mode(out: Path) -> tuple[dict, dict]:
    """A mode's verdict rows by id and its summary."""
    rows = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows[str(row["id"])] = row
    summary_path = out.with_suffix(".summary.json")
    return rows, json.loads(summary_path.read_text()) if summary_path.is_file() else {}


def tokens_of(summary: dict) -> str:
    """Total tokens (prompt + completion) from the verify summary, '?' when it does not say."""
    return f"{summary['tokens']:,}" if isinstance(summary.get("tokens"), int) else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=Path, default=ROOT / "bench" / "data" / "labels.jsonl")
    parser.add_argument("--limit", type=int, help="the first N problems of each domain (a small first run)")
    parser.add_argument("--work", type=Path, help="run folder (default: a new /tmp/finmbs-labels-* folder)")
    parser.add_argument("--modes", default="programs,no-programs", help="comma-separated: programs, no-programs")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE config override for every mode")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per mode")
    args = parser.parse_args()
    problems = load_seeds(args.labels)
    work = args.work or Path(tempfile.mkdtemp(prefix="finmbs-labels-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.limit:
        kept, seen = [], Counter()
        for p in problems:
            seen[p.domain] += 1
            if seen[p.domain] <= args.limit:
                kept.append(p)
        problems = kept
    # what `finmbs verify` reads: the problems without their labels (meta.label, right_answer, flaw)
    labels = work / "problems.jsonl"
    labels.write_text(
        "".join(p.model_copy(update={"meta": {}}).model_dump_json(exclude_none=True) + "\n" for p in problems),
        encoding="utf-8",
    )
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; choose from {sorted(MODES)}")
    print(
        f"{len(problems)} labeled problems ({dict(Counter((p.domain, p.meta['label']) for p in problems))}); "
        f"work folder {work}; a fresh response cache per mode"
    )

    results: dict[str, dict[str, str]] = {}
    print(
        f"\n{'mode':<12}{'domain':<9}{'wrong accepted':>15}{'wrong fixed':>12}{'wrong relab.':>13}"
        f"{'wrong rej.':>11}{'right kept':>15}{'right relab.':>13}{'right rej.':>11}{'tokens':>12}{'wall s':>8}"
    )
    for mode in modes:
        rows, summary, seconds, _ = run_mode(mode, labels, work, args.set, args.timeout)
        tallies, results[mode] = score(problems, rows)
        for domain in sorted(tallies):
            c = tallies[domain].counts
            kept = c["right: kept"] + c["right: kept (relabeled to same)"]
            right_share = f"{kept}/{c['right']} ({kept / c['right']:.0%})" if c["right"] else "-"
            print(
                f"{mode:<12}{domain:<9}{c['wrong: accepted wrong']:>15}{c['wrong: fixed']:>12}"
                f"{c['wrong: relabeled wrong']:>13}{c['wrong: rejected']:>11}{right_share:>15}"
                f"{c['right: relabeled wrong']:>13}{c['right: rejected']:>11}{tokens_of(summary):>12}{seconds:>8.0f}"
            )
        for domain in sorted(tallies):
            for reason in tallies[domain].reasons:
                print(f"    {mode} rejected {reason}")
        missing = [pid for pid, r in results[mode].items() if r.endswith("missing") or "unknown" in r]
        if missing:
            print(f"    {mode}: {len(missing)} problem(s) missing or unreadable in the output: {missing[:8]}")
    if len(modes) == 2:
        a, b = modes
        differ = [(pid, results[a][pid], results[b][pid]) for pid in results[a] if results[a][pid] != results[b][pid]]
        print(f"\n{len(differ)} problem(s) fare differently ({a} vs {b}):")
        for pid, ra, rb in differ:
            print(f"  {pid:34} {ra:32} {rb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
