"""Math answer verification through math-verify, every check under a hard time limit.

math-verify's own time limits use `signal.alarm`, which works only in a process's main thread, and
big-integer or symbolic work (`\\boxed{9^{9^{9^{9}}}}`) holds the interpreter lock, so no thread-based
timeout can end it. Each check therefore runs in a small pool of persistent worker processes
(`finmbs.verify.math_worker`): the caller waits at most `MATH_TIMEOUT_S` for the answer, and a
worker that overruns is killed and replaced. A timed-out check scores "not equal" and is counted
(`math_timeouts()`); other threads' checks run on other workers meanwhile.

    FINMBS_MATH_TIMEOUT_S   the hard limit per check, seconds (default 10)
    FINMBS_MATH_WORKERS     worker processes per process (default min(4, CPUs))
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from functools import lru_cache

from finmbs.errors import FinmbsError
from finmbs.verify.extract import extract_final_answer

log = logging.getLogger("finmbs.verify.math")
logging.getLogger("math_verify").setLevel(logging.ERROR)

MATH_TIMEOUT_S = float(os.environ.get("FINMBS_MATH_TIMEOUT_S", "10"))
MATH_WORKERS = int(os.environ.get("FINMBS_MATH_WORKERS", "0")) or min(4, os.cpu_count() or 1)
WORKER_START_S = 120.0  # importing sympy on a loaded machine; not part of a check's limit

# CPython 3.11 keeps the ast module's recursion bookkeeping per interpreter, not per thread: two
# threads building ASTs at once can corrupt it. math-verify now parses in its own worker processes;
# in-process AST users (the scripted test worlds' handlers) still serialize on this lock.
AST_LOCK = threading.RLock()


class MathCheckTimeout(FinmbsError):
    """A math-verify check ran past its hard time limit (its worker was killed)."""


class _Worker:
    """One worker process speaking JSON lines over its stdin/stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "finmbs.verify.math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        self._buffer = b""
        if self._read_line(WORKER_START_S) != {"ready": True}:
            self.kill()
            raise RuntimeError("math-verify worker did not start")

    def _read_line(self, limit_s: float) -> dict | None:
        """The next JSON line from the worker, or None when `limit_s` passes first or it died."""
        deadline = time.monotonic() + limit_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def check(self, predicted: str, ground_truth: str, limit_s: float) -> dict | None:
        """The worker's reply ({"equal": true, false or null: no verdict}), or None when it overran `limit_s`
        or died."""
        request = json.dumps({"pred": predicted, "gold": ground_truth, "limit": limit_s}) + "\n"
        try:
            self.proc.stdin.write(request.encode("utf-8"))
            self.proc.stdin.flush()
        except OSError:
            return None
        return self._read_line(limit_s)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            pipe.close()


class _Pool:
    """Up to `size` workers, each lent to one check at a time; broken ones are replaced lazily."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self._idle: list[_Worker] = []
        self._live = 0
        self._cond = threading.Condition()

    def acquire(self) -> _Worker:
        with self._cond:
            while not self._idle and self._live >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._live += 1
        try:
            return _Worker()
        except BaseException:
            self.release(None)
            raise

    def release(self, worker: _Worker | None) -> None:
        """Give a healthy worker back; None for one that was killed or never started."""
        with self._cond:
            if worker is None:
                self._live -= 1
            else:
                self._idle.append(worker)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._live -= len(idle)
        for worker in idle:
            worker.kill()


_pool: _Pool | None = None
_pool_lock = threading.Lock()
_timeouts = 0


def _get_pool() -> _Pool:
    """This process's pool (a forked child starts its own: the parent's pipes are not its to use)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool(MATH_WORKERS)
        return _pool


@atexit.register
def _close_pool() -> None:
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


def warm_up(workers: int = 1) -> None:
    """Start up to `workers` worker processes now (importing sympy takes seconds), not at the first check."""
    pool = _get_pool()
    started = [pool.acquire() for _ in range(min(workers, pool.size))]
    for worker in started:
        pool.release(worker)


def math_timeouts() -> int:
    """How many checks in this process ran past their hard limit (and scored not equal)."""
    return _timeouts


def _wrap(expr: str) -> str:
    expr = expr.strip()
    return expr if "$" in expr or "\\boxed" in expr else f"${expr}$"


@lru_cache(maxsize=65536)
def _verified(predicted: str, ground_truth: str, limit_s: float) -> bool | None:
    """math-verify's verdict from a worker (None: it has none); MathCheckTimeout (not cached) when it overruns."""
    pool = _get_pool()
    worker = pool.acquire()
    reply = None
    try:
        reply = worker.check(_wrap(predicted), _wrap(ground_truth), limit_s)
    finally:
        if reply is None:
            worker.kill()
        pool.release(None if reply is None else worker)
    if reply is None:
        raise MathCheckTimeout(f"math-verify took over {limit_s:g} s")
    return None if reply["equal"] is None else bool(reply["equal"])


def math_verdict(predicted: str, ground_truth: str, timeout_s: float | None = None) -> bool | None:
    """math-verify's verdict: True / False, or None when it has none (an answer it cannot parse, past the
    time limit); only then may a judge decide (`verify.math_judge`)."""
    global _timeouts
    if not predicted or not ground_truth:
        return False
    if predicted.strip() == ground_truth.strip():
        return True
    limit_s = MATH_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        return _verified(predicted, ground_truth, limit_s)
    except MathCheckTimeout:
        with _pool_lock:
            _timeouts += 1
        log.warning("math check timed out after %g s (no verdict): %.80r vs %.80r", limit_s, predicted, ground_truth)
        return None


def math_equal(predicted: str, ground_truth: str, timeout_s: float | None = None) -> bool:
    """True when the two answers are mathematically equivalent; False when not, when math-verify has no
    verdict, or past the time limit."""
    return math_verdict(predicted, ground_truth, timeout_s) is True


def score_math(solution: str, ground_truth: str) -> tuple[str | None, float]:
    """(extracted answer, 0/1 reward) for a full solution text."""
    answer = extract_final_answer(solution)
    return answer, float(answer is not None and math_equal(answer, ground_truth))
