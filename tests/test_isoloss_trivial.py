"""Table 1's trivial rows (raw pixels, the untrained network) through the runs' probe, and the precondition that the
self-supervised arms beat them (issue 47, item 2)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.isoloss.deep_siamese import TITLES, pretraining_data, trivial
from gradalign.experiments.isoloss.trivial_rows import ROWS, data_statistics, trivial_rows
from gradalign.experiments.isoloss.validity import ABOVE_TRIVIAL, HOLDS_UP, above_trivial, tab1
from gradalign.experiments.verdict import derive_verdict, reason


@pytest.fixture
def tiny(one_thread):
    """The smoke preset at 2 seeds and 256 training images: the runs' data loader, their settings."""
    return EXPERIMENTS["isoloss.tab1"].resolve("smoke", {"seeds": 2, "train_subset": 256, "test_subset": 256})


def test_trivial_rows_go_through_the_runs_probe_on_the_runs_images(tiny):
    rows = trivial(tiny, "fashion_mnist", tiny.epochs[0])
    assert list(rows) == list(ROWS)
    assert all(len(values) == tiny.seeds for values in rows.values())
    assert all(10 < v <= 100 for values in rows.values() for v in values)  # 10 classes: above chance
    assert rows["raw_pixels"][0] == rows["raw_pixels"][1]  # no seed in raw pixels
    assert rows["random_init"][0] != rows["random_init"][1]  # each seed's own initialisation
    assert rows == trivial(tiny, "fashion_mnist", tiny.epochs[0])  # deterministic


def test_the_random_network_is_the_one_the_runs_start_from(tiny):
    """`trivial_rows` probes `SiameseRun`'s backbone: the same seeded initialisation as every arm of that seed."""
    from gradalign.models.siamese import SiameseNet

    s = tiny.settings("iso", False, 1, 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s.seed)
        net = SiameseNet(1, s.width, s.projector_hidden, s.projector_dim)
    from gradalign.data.augment import SimCLRAugment
    from gradalign.training.siamese import SiameseRun

    images, labels, tests, test_labels = pretraining_data(tiny, "fashion_mnist")
    images = images[:, None] if images.dim() == 3 else images
    run = SiameseRun(
        s, images, labels, tests, test_labels, 10, SimCLRAugment((0.5,), (0.3,)), (0.5,), (0.3,), torch.device("cpu")
    )
    for mine, theirs in zip(run.net.state_dict().values(), net.state_dict().values()):
        assert torch.equal(mine, theirs)


def test_data_statistics_are_the_cumulative_average_over_full_batches():
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3))
    weights = [p.clone() for p in backbone.parameters()]
    images = torch.randint(0, 256, (10, 1, 4, 4), dtype=torch.uint8)
    data_statistics(backbone, images, (0.5,), (0.25,), batch_size=4)  # two full batches; the last 2 images left out
    with torch.no_grad():
        out = [backbone[0]((images[i : i + 4].float() / 255 - 0.5) / 0.25) for i in (0, 4)]
    expected_mean = torch.stack([o.mean((0, 2, 3)) for o in out]).mean(0)
    expected_var = torch.stack([o.var((0, 2, 3), unbiased=True) for o in out]).mean(0)
    norm = backbone[1]
    assert torch.allclose(norm.running_mean, expected_mean, atol=1e-6)
    assert torch.allclose(norm.running_var, expected_var, atol=1e-5)
    assert not backbone.training
    assert all(torch.equal(a, b) for a, b in zip(weights, backbone.parameters()))


def test_trivial_rows_refuse_mismatched_images():
    from gradalign.errors import ConfigError

    s = EXPERIMENTS["isoloss.tab1"].resolve("smoke").settings("L", True, 1, 0)
    x = torch.zeros(8, 1, 28, 28, dtype=torch.uint8)
    with pytest.raises(ConfigError):
        trivial_rows(
            x,
            torch.zeros(8, dtype=torch.long),
            torch.zeros(8, 1, 32, 32, dtype=torch.uint8),
            torch.zeros(8, dtype=torch.long),
            [s],
        )


# --- the precondition, on fabricated metrics ----------------------------------------------------------------------


def _metrics(arms: dict[str, float] | None = None, rows: dict[str, list[float]] | None = None) -> dict:
    """Four arms at three seeds (mean ± 0.5) and the trivial rows of Fashion-MNIST."""
    means = {"L/ema": 80.0, "L/no_ema": 76.0, "iso/ema": 81.0, "iso/no_ema": 80.0, **(arms or {})}
    metrics = {f"fashion_mnist/{k}": {"probe": [m - 0.5, m, m + 0.5]} for k, m in means.items()}
    trivial_rows_ = {"raw_pixels": [72.0] * 3, "random_init": [70.0, 71.0, 72.5], "random_init_data_bn": [64, 62, 63]}
    metrics["trivial"] = {"fashion_mnist": {**trivial_rows_, **(rows or {})}}
    return metrics


def test_arms_above_every_trivial_row_meet_the_precondition():
    out = above_trivial(["fashion_mnist"], _metrics())
    assert out["passed"] is True and out["claim"] == ABOVE_TRIVIAL
    assert len(out["value"]) == len(TITLES) - 1  # every arm but L without EMA
    assert all(v["decision"] == "beats" and v["b"] == 72.0 for v in out["value"].values())  # raw pixels: best by mean
    assert all(" vs raw pixels" in key for key in out["value"])


def test_an_arm_at_the_random_networks_level_leaves_it_unmet_and_the_element_inconclusive():
    """An arm within noise of the best row fails the precondition as surely as one below it; the verdict names why."""
    rows = {"random_init": [74.0, 75.0, 76.0]}  # the best row now
    for arm in ({"iso/no_ema": 75.5}, {"iso/no_ema": 60.0}):
        out = above_trivial(["fashion_mnist"], _metrics(arm, rows))
        assert out["passed"] is False
        assert all("random VGG11, BN at its initial statistics" in key for key in out["value"])
    checks = {"claim": {"passed": True, "value": 1, "rule": "r", "claim": "c"}}
    verdict = derive_verdict(checks, "reduced", {"above_trivial": out}, evidence="empirical")
    assert verdict["status"] == "inconclusive" and verdict["unmet"] == ["above_trivial"]
    assert reason(verdict, {"above_trivial": out}) == f"precondition not met: {ABOVE_TRIVIAL}"


def test_arms_below_raw_pixels_leave_it_unmet():
    out = above_trivial(["fashion_mnist"], _metrics({"L/ema": 76.0}, rows={"raw_pixels": [78.0] * 3}))
    assert out["passed"] is False
    assert {v["decision"] for v in out["value"].values()} == {"loses", "beats"}  # L with EMA loses to 78


def test_l_without_ema_at_the_trivial_rows_is_the_claimed_effect_not_a_failed_test():
    """Claims 3 and 4 say L without the EMA target loses accuracy: its collapse leaves the precondition met, while
    the same collapse of an arm the claims say holds up leaves it unmet (the failing case)."""
    assert above_trivial(["fashion_mnist"], _metrics({"L/no_ema": 10.0}))["passed"] is True
    assert not any("L without EMA" in key for key in above_trivial(["fashion_mnist"], _metrics())["value"])
    for arm in HOLDS_UP:
        assert above_trivial(["fashion_mnist"], _metrics({arm: 10.0}))["passed"] is False


def test_a_record_without_trivial_rows_has_not_measured_it():
    metrics = _metrics()
    del metrics["trivial"]
    out = above_trivial(["fashion_mnist"], metrics)
    assert out["passed"] is False and out["value"] == "not recorded"


def test_the_precondition_is_one_of_table_1s():
    record = {
        "config": {"datasets": ["fashion_mnist"], "epochs": [16]},
        "metrics": {k: {**v, "participation_ratio": [2.0] * 3} if "/" in k else v for k, v in _metrics().items()},
        "curves": {},
    }
    assert tab1(record)["above_trivial"]["passed"] is True
