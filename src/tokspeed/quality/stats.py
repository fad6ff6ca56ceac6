"""Statistics of accuracies: Wilson intervals, McNemar's exact test, a paired difference's interval.

All pure functions of counts; the Wilson interval and the exact binomial test are scipy.stats'
(`binomtest`). Formulas:

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
    """The Wilson score interval for k successes in n trials (scipy.stats.binomtest); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=_confidence(z), method="wilson")
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the two discordant counts (binomial test of b in b + c at ½)."""
    if b + c == 0:
        return 1.0
    from scipy import stats

    return min(1.0, float(stats.binomtest(min(b, c), b + c, 0.5).pvalue))


def _confidence(z: float) -> float:
    return math.erf(z / math.sqrt(2.0))


def paired_difference_ci(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(difference, low, high) of accuracy B − A over n paired items, b/c as in `mcnemar_exact`."""
    if n <= 0:
        return 0.0, -1.0, 1.0
    diff = (c - b) / n
    var = max(0.0, (b + c) - (c - b) ** 2 / n) / (n * n)
    half = z * math.sqrt(var)
    return diff, max(-1.0, diff - half), min(1.0, diff + half)
