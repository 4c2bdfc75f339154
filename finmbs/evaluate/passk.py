"""pass@k: the unbiased estimator from n samples (Chen et al. 2021) and a bootstrap CI over questions."""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c correct) is correct: 1 - C(n-c,k)/C(n,k)."""
    if not 0 <= c <= n:
        raise ValueError(f"correct count c={c} must lie in 0..n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n, but n={n} samples were drawn")
    return 1.0 - comb(n - c, k) / comb(n, k)


def bootstrap_ci(
    values: Sequence[float], *, level: float = 0.95, iterations: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-question values (questions resampled)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return 0.0, 0.0
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(iterations, data.size))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
