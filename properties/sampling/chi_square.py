"""Chi-square tests, NumPy-free: goodness of fit against a distribution, and homogeneity of two samples.

Tokens expected fewer than :data:`MIN_EXPECTED` times share one bin, the approximation's usual floor.
"""

from __future__ import annotations

import math

FALSE_ALARM = 1e-9  # every test here fails a right sampler with probability below this
MIN_EXPECTED = 5.0  # the chi-square approximation's usual floor per bin; rarer tokens share one bin


def upper_gamma_log(a: float, x: float) -> float:
    """``log Q(a, x)``, the regularised upper incomplete gamma function: a series below ``a + 1``, a continued
    fraction (modified Lentz) above, both to float64 precision."""
    if x <= 0:
        return 0.0
    front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-17:
            n += 1
            term *= x / n
            total += term
        return math.log1p(-min(1.0, total * math.exp(front)))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return front + math.log(h)


def chi_square(observed: list[int], expected: list[float]) -> tuple[float, int, float]:
    """``(statistic, degrees of freedom, log p-value)`` with tokens expected fewer than :data:`MIN_EXPECTED` times
    pooled into one bin (smallest first, until the pool reaches the floor)."""
    order = sorted(range(len(expected)), key=expected.__getitem__)
    pool_o, pool_e, bins = 0, 0.0, []
    for i in order:
        if pool_e < MIN_EXPECTED and expected[i] < MIN_EXPECTED or 0 < pool_e < MIN_EXPECTED:
            pool_o, pool_e = pool_o + observed[i], pool_e + expected[i]
        else:
            bins.append((observed[i], expected[i]))
    if pool_e > 0:
        bins.append((pool_o, pool_e))
    stat = sum((o - e) ** 2 / e for o, e in bins)
    df = len(bins) - 1
    return stat, df, upper_gamma_log(df / 2, stat / 2) if df > 0 else 0.0


def homogeneity(a: list[int], b: list[int]) -> tuple[float, int, float]:
    """``(statistic, degrees of freedom, log p-value)`` of the test that two samples' counts over the same tokens
    come from one distribution (a 2 x n contingency table), tokens pooled as in :func:`chi_square` by what the
    smaller sample expects of them."""
    na, nb = sum(a), sum(b)
    if not na or not nb:
        return 0.0, 0, 0.0
    share = na / (na + nb)
    low = min(share, 1 - share)
    order = sorted(range(len(a)), key=lambda i: a[i] + b[i])
    pool, bins = (0, 0), []
    for i in order:
        pooled, mine = low * sum(pool), low * (a[i] + b[i])
        if pooled < MIN_EXPECTED and mine < MIN_EXPECTED or 0 < pooled < MIN_EXPECTED:
            pool = (pool[0] + a[i], pool[1] + b[i])
        else:
            bins.append((a[i], b[i]))
    if sum(pool):
        bins.append(pool)
    stat = sum((x - (x + y) * share) ** 2 / ((x + y) * share) for x, y in bins)
    stat += sum((y - (x + y) * (1 - share)) ** 2 / ((x + y) * (1 - share)) for x, y in bins)
    df = len(bins) - 1
    return stat, df, upper_gamma_log(df / 2, stat / 2) if df > 0 else 0.0
