"""Statistics of accuracies: Wilson intervals, McNemar's exact test, a paired difference's interval.

All pure functions of counts. Formulas:

    Wilson (one proportion k/n, z = 1.96 for 95%):
        centre = (p + z²/2n) / (1 + z²/n),  half = z √(p(1-p)/n + z²/4n²) / (1 + z²/n)
    McNemar exact (paired, two-sided): with b = items only A got right, c = only B got right,
        p = min(1, 2 · P[X ≤ min(b, c)]), X ~ Binomial(b + c, 1/2); p = 1 when b + c = 0
    Paired difference of accuracies (B − A) = (c − b)/n, Wald interval with
        var = (b + c − (c − b)²/n) / n²
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for k successes in n trials; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def binom_cdf_half(k: int, n: int) -> float:
    """P[X ≤ k] for X ~ Binomial(n, 1/2), exactly (integer sums)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * binom_cdf_half(min(b, c), n))


def paired_difference_ci(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(difference, low, high) of accuracy B − A over n paired items, b/c as in `mcnemar_exact`."""
    if n <= 0:
        return 0.0, -1.0, 1.0
    diff = (c - b) / n
    var = max(0.0, (b + c) - (c - b) ** 2 / n) / (n * n)
    half = z * math.sqrt(var)
    return diff, max(-1.0, diff - half), min(1.0, diff + half)
