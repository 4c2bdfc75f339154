"""A math-verify worker process: one JSON request per stdin line, one JSON verdict per stdout line.

Started and killed by `finmbs.verify.math` (never by hand). Checks run in this process's main
thread, so math-verify's own `signal.alarm` limits work here; the parent's hard limit (killing this
process) covers work those cannot interrupt. The worker dies with its parent (Linux PDEATHSIG) and
when its stdin closes.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import os
import signal
import sys


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent exits, even mid-computation."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _verdict(predicted: str, ground_truth: str, limit_s: float) -> bool | None:
    """math-verify's verdict; None when it has none: an answer it cannot parse, its own timeout, or a
    failure inside it (a caller may then ask a judge, `verify.math_judge`, or count it not equal)."""
    from math_verify import parse, verify

    seconds = max(1, math.ceil(limit_s))
    try:
        gold = parse(ground_truth, parsing_timeout=seconds)
        pred = parse(predicted, parsing_timeout=seconds)
        if gold and pred and verify(gold, pred, timeout_seconds=seconds):
            return True
        # parse() falls back to the raw string when it extracts no expression: such a side was never parsed
        parsed = all(any(not isinstance(x, str) for x in side) for side in (gold, pred))
        return False if parsed else None
    except Exception:  # math-verify's own timeout, MemoryError-like failures: no verdict
        return None


def main() -> None:
    _die_with_parent()
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # stray prints from sympy/math-verify must not corrupt the protocol
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    import math_verify  # noqa: F401  (pay the import before saying ready)

    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        replies.write(json.dumps({"equal": _verdict(request["pred"], request["gold"], request["limit"])}) + "\n")


if __name__ == "__main__":
    main()
