"""Student's t distribution and Welch's two-sample test, in pure Python (the project has no SciPy).

Welch's test of the difference of two means with unequal variances (Welch 1947):

    d = mean(A) − mean(B),   SE = sqrt(s_A²/n_A + s_B²/n_B),   t = d / SE,
    ν = SE⁴ / ((s_A²/n_A)²/(n_A − 1) + (s_B²/n_B)²/(n_B − 1))          (Welch–Satterthwaite)

The distribution function of t with ν degrees of freedom, for t ≥ 0,

    F(t; ν) = 1 − ½ I_x(ν/2, ½),   x = ν / (ν + t²),

where I_x(a, b) is the regularised incomplete beta function, evaluated by its continued fraction (modified Lentz).
Quantiles invert F by bisection. Checked against tabulated values in the tests (t₀.₉₇₅(4) = 2.7764…).
"""

from __future__ import annotations

import math

_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for x < (a + 1)/(a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for a, b > 0 and 0 ≤ x ≤ 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must lie in [0, 1]; got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b  # the symmetry I_x(a,b) = 1 − I_{1−x}(b,a)


def t_cdf(t: float, nu: float) -> float:
    """P(T ≤ t) for Student's t with `nu` > 0 degrees of freedom."""
    if not nu > 0:
        raise ValueError(f"degrees of freedom must be > 0; got {nu}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(nu / 2.0, 0.5, nu / (nu + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, nu: float) -> float:
    """The t with P(T ≤ t) = p (0 < p < 1), by bisection of `t_cdf`."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie in (0, 1); got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, nu)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, nu) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, nu) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def welch(a: dict, b: dict) -> dict:
    """Welch's test of mean(A) − mean(B) from summaries {"mean", "std", "n"} (n ≥ 2 each):
    {"diff", "se", "t", "nu"}. With no spread in either arm, t is ±inf (or 0 for equal means) and ν = n_A + n_B − 2."""
    va, vb = a["std"] ** 2 / a["n"], b["std"] ** 2 / b["n"]
    diff = a["mean"] - b["mean"]
    se = math.sqrt(va + vb)
    if se == 0.0:
        t = 0.0 if diff == 0.0 else math.copysign(math.inf, diff)
        return {"diff": diff, "se": 0.0, "t": t, "nu": float(a["n"] + b["n"] - 2)}
    denominator = (va**2 / (a["n"] - 1) if va else 0.0) + (vb**2 / (b["n"] - 1) if vb else 0.0)
    return {"diff": diff, "se": se, "t": diff / se, "nu": (va + vb) ** 2 / denominator}
