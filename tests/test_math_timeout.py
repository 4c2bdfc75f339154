"""The math reward under a hard time limit: a pathological answer scores 0 within the limit, from any
thread, while ordinary answers in other threads keep being scored (math-verify runs in worker processes)."""

from __future__ import annotations

import threading
import time

import pytest

from finmbs import reward
from finmbs.verify import math as vmath

TOWER = r"\boxed{9^{9^{9^{9}}}}"
LIMIT_S = 3.0


@pytest.fixture
def short_limit(monkeypatch):
    monkeypatch.setattr(vmath, "MATH_TIMEOUT_S", LIMIT_S, raising=False)
    vmath.warm_up(2)  # worker start-up (importing sympy) is not part of any check's limit


def in_thread(func, *args):
    """Run `func` in a daemon thread; (thread, result holder, finish time holder)."""
    out: dict = {}

    def run():
        out["value"] = func(*args)
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_power_tower_scores_zero_within_the_limit_from_a_worker_thread(short_limit):
    before = vmath.math_timeouts()
    start = time.monotonic()
    thread, out = in_thread(reward.compute_score, "finmbs/math", f"So the answer is {TOWER}", "1")
    thread.join(LIMIT_S + 15)
    assert not thread.is_alive(), "the reward hung past its hard limit"
    assert out["value"]["score"] == 0.0
    assert out["at"] - start < LIMIT_S + 5
    assert vmath.math_timeouts() == before + 1


def test_ordinary_answer_in_another_thread_scores_while_a_slow_one_runs(short_limit):
    start = time.monotonic()
    slow, slow_out = in_thread(vmath.math_equal, TOWER, "2")
    time.sleep(0.3)  # the tower is now being checked
    fast, fast_out = in_thread(reward.compute_score, "finmbs/math", r"The answer is \boxed{\frac{1}{2}}", "0.5")
    fast.join(LIMIT_S + 15)
    slow.join(LIMIT_S + 15)
    assert not fast.is_alive() and not slow.is_alive()
    assert fast_out["value"]["score"] == 1.0
    assert fast_out["at"] - start < LIMIT_S  # scored before the slow check's limit ran out
    assert slow_out["value"] is False


def test_worker_killed_on_timeout_is_replaced_and_verdicts_stay_right(short_limit):
    assert vmath.math_equal(TOWER, "3") is False
    assert vmath.math_equal(r"\frac{2}{4}", "0.5") is True
    assert vmath.math_equal("x^2 - 1", "(x-1)(x+1)") is True
    assert vmath.math_equal("3", "4") is False
