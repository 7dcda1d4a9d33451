"""The pooled local head (`sgr.poolhead`): the head's shapes and what it saves, the study's config, and its one check
fed a case where it must fail."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.experiments.sgr.pooled_head import pooled_head_checks
from gradalign.models.local_heads import belilovsky_head, local_head, pooled_belilovsky_head


@pytest.mark.parametrize("size", [28, 14, 7, 3, 1])
def test_the_pooled_head_reads_every_map_size_of_a_local_network(size):
    head = local_head("belilovsky_pool4", 8, 10)
    assert head(torch.randn(2, 8, size, size)).shape == (2, 10)


def test_the_pooled_head_is_the_papers_head_after_the_pool():
    """Same parameters as Belilovsky et al.'s head; its convolution sees the 4x4 average of the map."""
    torch.manual_seed(0)
    pooled = pooled_belilovsky_head(8, 10)
    paper = belilovsky_head(8, 10)
    shifted = {f"{int(k.split('.')[0]) + 1}.{k.split('.', 1)[1]}": v for k, v in paper.state_dict().items()}
    pooled.load_state_dict(shifted)
    pooled.eval(), paper.eval()
    x = torch.randn(3, 8, 28, 28)
    with torch.no_grad():
        expected = paper(torch.nn.functional.avg_pool2d(x, 4, ceil_mode=True))
        assert torch.allclose(pooled(x), expected, atol=1e-6)
    assert sum(p.numel() for p in pooled.parameters()) == sum(p.numel() for p in paper.parameters())


def test_a_pool_factor_below_two_is_refused():
    with pytest.raises(ConfigError, match="pool factor"):
        pooled_belilovsky_head(8, 10, 1)


def test_the_study_reads_table_3s_runs_for_the_papers_head():
    """The paper-head arm has Table 3's run keys (it trains none of them again); the pooled arm differs by its head
    alone."""
    from gradalign.experiments.units import units_of

    study = get("sgr.poolhead").resolve("cpu", {})
    table3 = get("sgr.tab3").resolve("cpu", {})
    keys = {u.key for u in units_of("sgr.poolhead", study)}
    table3_sgr = {u.key for u in units_of("sgr.tab3", table3) if u.label.startswith("SGR K=16 resnet32")}
    assert table3_sgr < keys and len(keys) == 6
    spec = study.spec("resnet32", "sgr", 16, "fashion_mnist", 0)
    assert spec.method.head == "belilovsky_pool4"
    paper = study.paper_head().spec("resnet32", "sgr", 16, "fashion_mnist", 0)
    assert replace(spec, method=replace(spec.method, head=None)) == paper


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"head": "belilovsky"}, "must differ"),
        ({"head": "mlp"}, "head must be one of"),
        ({"methods": ["layerwise"]}, ""),
    ],
)
def test_bad_study_settings_are_refused_before_any_compute(overrides, message):
    with pytest.raises(ConfigError, match=message):
        get("sgr.poolhead").resolve("smoke", overrides)


def _table(pooled: list[float], paper: list[float]) -> dict:
    def arm(values):
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        return {"mean": mean, "std": std, "n": len(values), "values": values}

    return {"fashion_mnist": {"resnet32": {"pooled_head": arm(pooled), "paper_head": arm(paper)}}}


def test_the_pooled_head_keeps_accuracy_on_a_tie_and_not_on_a_clear_loss():
    tie = pooled_head_checks(_table([80.1, 80.6, 79.9], [80.3, 80.0, 80.5]), 16)["pooled_head_keeps_accuracy"]
    assert tie["passed"] and tie["value"]["tie"]
    loss = pooled_head_checks(_table([75.1, 75.4, 74.9], [80.3, 80.0, 80.5]), 16)["pooled_head_keeps_accuracy"]
    assert not loss["passed"] and loss["value"]["decision"] == "loses"
    few = pooled_head_checks(_table([80.1, 80.6], [80.3, 80.0]), 16)["pooled_head_keeps_accuracy"]
    assert not few["passed"] and few["within_noise"]


def test_before_the_record_the_page_reads_only_committed_runs(tmp_path, monkeypatch):
    """An empty results store: every arm at both budgets has 0 of 3 runs committed and no comparison is drawn."""
    from gradalign.experiments.sgr.pooled_head import committed_comparison

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path))
    out = committed_comparison(get("sgr.poolhead").resolve("cpu", {}))
    assert set(out) == {"60 epochs", "30 epochs"}
    for part in out.values():
        assert part["comparison"] is None
        assert all(arm == {"committed": 0, "of": 3} for arm in part["arms"].values())
