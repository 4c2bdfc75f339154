"""The unbiased pass@k estimator against hand-computed values and a brute-force count; the bootstrap CI."""

from __future__ import annotations

from itertools import combinations

import pytest

from finmbs.evaluate.passk import bootstrap_ci, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 0, 1, 0.0),
        (8, 8, 5, 1.0),
        (8, 3, 1, 3 / 8),
        (8, 1, 5, 5 / 8),  # 1 - C(7,5)/C(8,5) = 1 - 21/56
        (8, 2, 5, 50 / 56),  # 1 - C(6,5)/C(8,5) = 1 - 6/56
        (8, 3, 5, 55 / 56),  # 1 - C(5,5)/C(8,5)
        (8, 4, 5, 1.0),  # fewer than 5 wrong samples: every 5-subset holds a correct one
        (10, 2, 3, 1 - 56 / 120),  # 1 - C(8,3)/C(10,3)
        (2, 1, 2, 1.0),
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [1, 4, 8, 10])
def test_pass_at_k_equals_brute_force_subset_count(n):
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_1_is_mean_accuracy_over_samples():
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 0, 5), (8, 9, 1), (8, -1, 1), (8, 2, 0)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_bootstrap_ci_brackets_the_mean_and_is_deterministic():
    values = [1.0] * 30 + [0.0] * 70
    low, high = bootstrap_ci(values)
    assert low < 0.3 < high
    assert 0.18 < low < 0.25 and 0.35 < high < 0.42  # normal approx: 0.3 +- 1.96*0.046
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)
    assert bootstrap_ci([]) == (0.0, 0.0)
