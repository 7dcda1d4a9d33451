"""The discrepancy between two samples of features: the squared maximum mean discrepancy (Gretton et al. 2012) with a
Gaussian kernel, and its permutation p-value. The meta-gradient part measures with it the second half of Figure 3's
claim (Zhang et al. 2020, §4.3): the labeled and unlabeled images' features drawn to one distribution.

For samples x_1..x_m and y_1..y_n and the kernel k(a, b) = exp(-||a - b||² / (2 σ²)), the unbiased estimator is

    MMD²_u = 1/(m(m-1)) Σ_{i≠j} k(x_i, x_j) + 1/(n(n-1)) Σ_{i≠j} k(y_i, y_j) - 2/(mn) Σ_{i,j} k(x_i, y_j),

which is 0 in expectation when both samples come from one distribution (it can then be slightly negative) and
positive when they do not. σ is the median of the distances ||a - b|| between distinct points of the pooled sample
(the median heuristic; our choice), computed once, so that every permutation uses the same kernel. The p-value is
(1 + #{permutations with MMD²_u >= the observed}) / (1 + permutations), over `PERMUTATIONS` random relabellings of the
pooled sample into sets of sizes m and n, drawn by a numpy generator seeded with `SEED` (our choices).
"""

from __future__ import annotations

import numpy as np

PERMUTATIONS = 200  # our choice: p-values down to 1/201
SEED = 0  # our choice: the permutations' generator


def median_bandwidth(z: np.ndarray) -> float:
    """σ: the median distance between distinct points of `z` (n × d); 1 when every distance is 0."""
    d = np.sqrt(_squared_distances(z))
    upper = d[np.triu_indices(len(z), k=1)]
    sigma = float(np.median(upper)) if len(upper) else 0.0
    return sigma if sigma > 0 else 1.0


def mmd2_unbiased(kernel: np.ndarray, m: int) -> float:
    """MMD²_u from the pooled kernel matrix (the first `m` rows and columns are x, the rest y)."""
    n = len(kernel) - m
    if m < 2 or n < 2:
        raise ValueError(f"each sample needs at least 2 points; got {m} and {n}")
    kxx, kyy, kxy = kernel[:m, :m], kernel[m:, m:], kernel[:m, m:]
    xx = (kxx.sum() - np.trace(kxx)) / (m * (m - 1))
    yy = (kyy.sum() - np.trace(kyy)) / (n * (n - 1))
    return float(xx + yy - 2 * kxy.mean())


def feature_mmd(x: np.ndarray, y: np.ndarray, permutations: int = PERMUTATIONS, seed: int = SEED) -> dict:
    """{"mmd2", "p_value", "bandwidth", "permutations", "seed", "m", "n"} for samples `x` (m × d) and `y` (n × d):
    MMD²_u at the median-distance Gaussian kernel and its permutation p-value (the module's text)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must be (points, features) of one width; got {x.shape} and {y.shape}")
    z = np.concatenate([x, y])
    sigma = median_bandwidth(z)
    kernel = np.exp(-_squared_distances(z) / (2 * sigma**2))
    m = len(x)
    observed = mmd2_unbiased(kernel, m)
    rng = np.random.default_rng(seed)
    at_least = 0
    for _ in range(permutations):
        p = rng.permutation(len(z))
        at_least += mmd2_unbiased(kernel[np.ix_(p, p)], m) >= observed
    return {
        "mmd2": observed,
        "p_value": (1 + at_least) / (1 + permutations),
        "bandwidth": sigma,
        "permutations": permutations,
        "seed": seed,
        "m": m,
        "n": len(y),
    }


def _squared_distances(z: np.ndarray) -> np.ndarray:
    sq = (z * z).sum(1)
    return np.maximum(sq[:, None] + sq[None, :] - 2 * z @ z.T, 0.0)
