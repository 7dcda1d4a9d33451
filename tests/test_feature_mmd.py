"""`analysis.feature_mmd`: the unbiased squared MMD with a median-distance Gaussian kernel and its permutation
p-value, against a hand computation and against samples from one distribution and from shifted ones."""

import math

import numpy as np
import pytest

from gradalign.analysis.feature_mmd import PERMUTATIONS, feature_mmd, median_bandwidth, mmd2_unbiased


def test_a_hand_computed_case():
    """x = {0, 1}, y = {3, 5} on a line. Pooled distances: 1, 3, 5, 2, 4, 2; their median is 2.5 = σ.
    MMD²_u = k(0,1) + k(3,5) - (k(0,3) + k(0,5) + k(1,3) + k(1,5)) / 2, with k(a, b) = exp(-(a-b)²/(2σ²))."""
    x, y = np.array([[0.0], [1.0]]), np.array([[3.0], [5.0]])
    assert median_bandwidth(np.concatenate([x, y])) == 2.5
    k = lambda d: math.exp(-(d**2) / (2 * 2.5**2))  # noqa: E731
    expected = k(1) + k(2) - (k(3) + k(5) + k(2) + k(4)) / 2
    got = feature_mmd(x, y, permutations=10)
    assert got["mmd2"] == pytest.approx(expected, abs=1e-12)
    assert got["bandwidth"] == 2.5 and got["m"] == 2 and got["n"] == 2


def test_the_estimator_is_the_mean_over_distinct_pairs():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(7, 3))
    kernel = np.exp(-((z[:, None] - z[None]) ** 2).sum(-1) / 2)
    m = 3
    xx = np.mean([kernel[i, j] for i in range(m) for j in range(m) if i != j])
    yy = np.mean([kernel[i, j] for i in range(m, 7) for j in range(m, 7) if i != j])
    xy = np.mean([kernel[i, j] for i in range(m) for j in range(m, 7)])
    assert mmd2_unbiased(kernel, m) == pytest.approx(xx + yy - 2 * xy, abs=1e-12)


def test_one_distribution_gives_a_small_mmd_and_shifted_ones_a_large_one():
    rng = np.random.default_rng(0)
    same = feature_mmd(rng.normal(size=(150, 16)), rng.normal(size=(150, 16)))
    shifted = feature_mmd(rng.normal(size=(150, 16)), rng.normal(size=(150, 16)) + 1.0)
    assert abs(same["mmd2"]) < 0.01 and same["p_value"] > 0.05
    assert shifted["mmd2"] > 10 * max(abs(same["mmd2"]), 1e-3)
    assert shifted["p_value"] == 1 / (1 + PERMUTATIONS)  # no permutation reaches it


def test_seeded_and_refuses_bad_shapes():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(20, 4)), rng.normal(size=(25, 4)) + 0.3
    assert feature_mmd(x, y) == feature_mmd(x, y)
    with pytest.raises(ValueError, match="one width"):
        feature_mmd(x, y[:, :3])
    with pytest.raises(ValueError, match="at least 2"):
        feature_mmd(x[:1], y)
