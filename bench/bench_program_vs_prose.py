"""Does the default teacher compute more reliably as a program than in prose? GSM8K pass@1, both ways, one run.

    python bench/bench_program_vs_prose.py [--limit 100] [--data ../shared/data] [--config configs/default.yaml]
                                           [--cache /tmp/finmbs-pvp/cache.sqlite] [--samples FILE]

The configured teacher (roles.teachers[0]; the default is the embedded Qwen2.5-Coder-1.5B) answers the
first `--limit` GSM8K test questions two ways, through the gateway, in the same run:
- prose: the engine's solve prompt (prompts/solve.txt), the final answer extracted as every stage
  extracts it (`finmbs.verify.extract_final_answer`) and checked by `math_equal`;
- program: prompts/program_solve.txt asks for a Python program binding `answer`; the program is
  executed in a sandbox with a time limit and its `answer` checked by `math_equal`.
Both at the teacher's configured temperature and max_tokens, n=1 (the embedded backend seeds sample i
of a request by i, so a rerun draws the same samples; the response cache returns them as well).

The sandbox is `finmbs.verify.program.run_program` when it exists (the programs layer, issue 36);
before it lands, a minimal runner here: a separate `python -I` process, a wall-clock limit, memory and
CPU-time limits, and the value of `answer` read back as JSON.

Prints pass@1 each way, both right / only prose / only program / neither, why programs failed
(no code block, error, no `answer`, timeout), tokens and seconds. Skips with a message when the
GSM8K data (../shared/data/gsm8k) is absent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from finmbs.config import load_config
from finmbs.evaluate.benchmarks import load_benchmark
from finmbs.evaluate.loaders import load_items
from finmbs.llm import Gateway
from finmbs.resources import render_prompt
from finmbs.verify.extract import extract_final_answer
from finmbs.verify.math import math_equal
from finmbs.verify.program import program_in

ROOT = Path(__file__).resolve().parents[1]
PROGRAM_TIMEOUT_S = 10.0

# The minimal runner's child: execute the program with no input, print `answer` as JSON on the last line.
_CHILD = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[1]), int(sys.argv[1])))
source = sys.stdin.read()
scope = {"__name__": "__program__"}
sys.stdout = open("/dev/null", "w")
exec(compile(source, "<program>", "exec"), scope)
sys.stdout = sys.__stdout__
if "answer" not in scope:
    raise SystemExit("no variable `answer`")
value = scope["answer"]
print(json.dumps(value if isinstance(value, (int, float, str, bool)) or value is None else str(value)))
"""


@dataclass
class Run:
    ok: bool
    value: object = None
    error: str = ""


def minimal_run(source: str, timeout_s: float = PROGRAM_TIMEOUT_S) -> Run:
    """Execute `source` in a fresh isolated interpreter under time and memory limits; its `answer`."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD, str(math.ceil(timeout_s))],
            input=source,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd="/tmp",
        )
    except subprocess.TimeoutExpired:
        return Run(False, error="timeout")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
        return Run(False, error=last[:200])
    try:
        return Run(True, value=json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        return Run(False, error="unreadable output")


def sandbox():
    """The programs layer's sandbox when it has landed, else the minimal runner; and its name."""
    try:
        from finmbs.verify.program import run_program  # issue 36's sandbox
    except ImportError:
        return minimal_run, "minimal subprocess runner (bench/bench_program_vs_prose.py)"

    def run(source: str) -> Run:
        result = run_program(source, timeout_s=PROGRAM_TIMEOUT_S)
        value = result.answer if result.answer is not None else result.value
        return Run(bool(result.ok), value=value, error=str(result.error or ""))

    probe = run("answer = 6 * 7")
    if not probe.ok:  # installed code whose worker cannot start here (a missing dependency): say so, use ours
        return minimal_run, f"minimal subprocess runner (finmbs.verify.program failed a probe: {probe.error})"
    return run, "finmbs.verify.program.run_program"


def as_answer(value: object) -> str | None:
    """A program's `answer` as text for `math_equal`: integral floats lose their '.0'."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return str(int(round(value))) if abs(value - round(value)) < 1e-9 else repr(round(value, 6))
    return str(value).strip().replace(",", "").lstrip("$") or None


def error_kind(error: str) -> str:
    if "timeout" in error.lower() or "time limit" in error.lower():
        return "timeout"
    if "answer" in error and "no " in error:
        return "no `answer`"
    return error.split(":")[0][:40] or "error"


async def main(args: argparse.Namespace) -> int:
    data = args.data
    if not (data / "gsm8k").is_dir():
        print(
            f"skipped: GSM8K data not found at {data / 'gsm8k'} (../shared/data is absent); "
            "pass --data DIR holding gsm8k/test.jsonl"
        )
        return 0
    items, _ = load_items(load_benchmark("gsm8k"), data / "gsm8k")
    items = items[: args.limit]
    config = load_config(args.config, args.set or [])
    teacher = config.roles.teachers[0]
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    gateway = Gateway(cache_path=str(args.cache), budget=config.budget, embedded=config.embedded)
    run, runner = sandbox()
    print(
        f"teacher {teacher.name} ({teacher.model}), temperature {teacher.temperature}, max_tokens "
        f"{teacher.max_tokens}, n=1, {len(items)} GSM8K test questions; sandbox: {runner}; cache {args.cache}"
    )

    async def ask(text: str) -> tuple[str, int, bool]:
        [sample] = await gateway.generate(teacher, role="teacher", messages=[{"role": "user", "content": text}], n=1)
        return sample.text, sample.completion_tokens, sample.cached

    start = time.monotonic()
    prose = [ask(render_prompt("solve", document="", question=item.question)) for item in items]
    program = [ask(render_prompt("program_solve", document="", question=item.question)) for item in items]
    replies = await asyncio.gather(*prose, *program)
    seconds = time.monotonic() - start
    prose_replies, program_replies = replies[: len(items)], replies[len(items) :]

    rows, failures = [], Counter()
    for item, (p_text, _, _), (g_text, _, _) in zip(items, prose_replies, program_replies):
        p_answer = extract_final_answer(p_text)
        p_ok = bool(p_answer) and math_equal(p_answer, item.answer)
        source = program_in(g_text)
        if source is None:
            result, g_answer = Run(False, error="no code block"), None
        else:
            result = await asyncio.to_thread(run, source)
            g_answer = as_answer(result.value) if result.ok else None
        if source is None:
            failures["no code block"] += 1
        elif not result.ok:
            failures[error_kind(result.error)] += 1
        elif g_answer is None:
            failures["`answer` not a number"] += 1
        g_ok = bool(g_answer) and math_equal(g_answer, item.answer)
        rows.append(
            {
                "id": item.id,
                "gold": item.answer,
                "prose": p_answer,
                "prose_ok": p_ok,
                "program": g_answer,
                "program_ok": g_ok,
                "program_error": result.error,
                "prose_text": p_text,
                "program_text": g_text,
            }
        )
    if args.samples:
        args.samples.write_text("".join(json.dumps(r) + "\n" for r in rows))

    n = len(rows)
    both = sum(r["prose_ok"] and r["program_ok"] for r in rows)
    only_prose = sum(r["prose_ok"] and not r["program_ok"] for r in rows)
    only_program = sum(r["program_ok"] and not r["prose_ok"] for r in rows)
    neither = n - both - only_prose - only_program
    print(f"\n{'mode':<10}{'pass@1':>10}{'right':>8}{'tokens out':>12}")
    for mode, key, replies in (("prose", "prose_ok", prose_replies), ("program", "program_ok", program_replies)):
        right = sum(r[key] for r in rows)
        print(f"{mode:<10}{right / n:>10.1%}{right:>8}{sum(tokens for _, tokens, _ in replies):>12}")
    print(f"\nboth right {both}, only prose {only_prose}, only program {only_program}, neither {neither} (of {n})")
    print("program failures (did not run or gave no number):", dict(failures) or "none")
    usage = gateway.role_usage("teacher")
    print(
        f"{usage.calls} model calls, {usage.cache_hits} answered from cache, {gateway.total_tokens} tokens "
        f"(prompt + completion), {seconds:.0f} s"
    )
    gateway.close()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml")
    parser.add_argument("--set", action="append", help="KEY=VALUE override, as `finmbs grow --set`")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--limit", type=int, default=100, help="the first N GSM8K test questions (default 100)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path("/tmp/finmbs-pvp/cache.sqlite"),
        help="response cache (a fresh path measures fresh samples)",
    )
    parser.add_argument("--samples", type=Path, help="write every question's two replies and verdicts here (JSONL)")
    sys.exit(asyncio.run(main(parser.parse_args())))
