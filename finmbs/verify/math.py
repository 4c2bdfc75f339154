"""Math answer verification through math-verify (strings, numbers, symbolic equivalence)."""

from __future__ import annotations

import logging
import threading
from functools import lru_cache

from finmbs.verify.extract import extract_final_answer


logging.getLogger("math_verify").setLevel(logging.ERROR)

# CPython 3.11 keeps the ast module's recursion bookkeeping per interpreter, not per thread: two
# threads building ASTs at once can corrupt it ("AST constructor recursion depth mismatch") and
# break every later ast.parse in the process. In-process AST users (math-verify's sympy parsing
# here, the scripted test worlds' handlers) hold this lock.
AST_LOCK = threading.RLock()


def _wrap(expr: str) -> str:
    expr = expr.strip()
    return expr if "$" in expr or "\\boxed" in expr else f"${expr}$"


@lru_cache(maxsize=65536)
def math_equal(predicted: str, ground_truth: str) -> bool:
    """True when the two answers are mathematically equivalent."""
    from math_verify import parse, verify

    if not predicted or not ground_truth:
        return False
    if predicted.strip() == ground_truth.strip():
        return True
    try:
        with AST_LOCK:
            gold = parse(_wrap(ground_truth), parsing_timeout=None)
            pred = parse(_wrap(predicted), parsing_timeout=None)
            return bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception:  # math-verify raises on unparsable input: not equal
        return False


def score_math(solution: str, ground_truth: str) -> tuple[str | None, float]:
    """(extracted answer, 0/1 reward) for a full solution text."""
    answer = extract_final_answer(solution)
    return answer, float(answer is not None and math_equal(answer, ground_truth))
