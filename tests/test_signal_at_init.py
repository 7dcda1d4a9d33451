"""The signal of a Table 7 VGG at initialisation (`analysis.signal_at_init`): the closed form on 1×1 maps, the
fan-in init keeping it on large maps, BatchNorm restoring it, and the 28- against 32-pixel geometry of VGG-57."""

from __future__ import annotations

import pytest

from gradalign.analysis.signal_at_init import ONE_BY_ONE_GAIN, signal_at_init


@pytest.mark.parametrize("seed", [0, 1])
def test_a_conv_unit_on_a_1x1_map_keeps_a_third_of_the_rms_and_one_on_a_large_map(seed):
    """Fan-in He init, no BN: a zero-padded 3×3 conv on a 1×1 map sums its centre tap alone, E[y²] = (2/9) E[x²],
    and the ReLU halves it: an RMS gain of 1/3 (Fashion-MNIST's last stage of VGG-37); on 28- and 14-pixel maps the
    init keeps the RMS (the gain stays near 1)."""
    out = signal_at_init(37, 28, 0.25, seed=seed)
    assert out["units_by_map"] == {28: 7, 14: 7, 7: 7, 3: 7, 1: 7}
    assert out["gain_by_map"][1] == pytest.approx(ONE_BY_ONE_GAIN, abs=0.03)
    assert all(0.9 < out["gain_by_map"][size] < 1.2 for size in (28, 14))


def test_batch_norm_keeps_the_signal_on_1x1_maps_too():
    out = signal_at_init(37, 28, 0.25, batch_norm=True)
    assert out["gain_by_map"][1] > 0.9 and out["final_rms"] > 0.3


def test_vgg57s_signal_and_gradient_at_init_are_orders_of_magnitude_smaller_at_28_pixels_than_at_32():
    """The page's contrast: Fashion-MNIST's 28-pixel images end VGG-57 on 1×1 maps, CIFAR's 32-pixel ones on 2×2."""
    fashion, cifar = signal_at_init(57, 28, 0.125), signal_at_init(57, 32, 0.125)
    assert set(cifar["units_by_map"]) == {32, 16, 8, 4, 2} and 1 in fashion["units_by_map"]
    assert fashion["final_rms"] < 1e-3 * cifar["final_rms"]
    assert fashion["grad_ratio"]["median"] < 1e-3 * cifar["grad_ratio"]["median"]


def test_bad_sizes_are_refused_before_any_compute():
    with pytest.raises(ValueError, match="image_size must be a positive integer"):
        signal_at_init(57, 0, 0.125)
