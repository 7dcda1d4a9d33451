"""Table 4 on a conv PlainNet (sgr.tab4conv): the conv blocks, the BP-free rules on them against autograd and hand
computations, the specs and keys (the MLP runs' unchanged), the scale string, the budget checks fed failing cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.sgr import bp_free_conv, validity
from gradalign.methods import bp_free as rules
from gradalign.models.bp_free_net import ConvBPFreeNet
from gradalign.models.plain_conv import PlainConvNet, conv_modules, describe, geometry

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


def _net(width=0.5, classes=10):
    torch.manual_seed(0)
    net = ConvBPFreeNet(1, 28, 4, classes, width).double()
    x = torch.randn(8, 1, 28, 28, dtype=torch.float64)
    return net, x, torch.randint(0, classes, (8,), generator=torch.Generator().manual_seed(1))


def test_conv_plainnet_geometry_heads_and_modules():
    assert [b.features for b in geometry(4, 1, 28)] == [16 * 28**2, 32 * 14**2, 32 * 7**2, 64 * 4**2]
    assert [b.stride for b in geometry(4, 3, 32)] == [1, 2, 2, 2] and geometry(4, 3, 32)[-1].size == 4
    model = PlainConvNet(4, 10, 1, 28, 1.0)
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10) and not list(model.head.parameters())
    assert len(conv_modules(model, 4)) == 4 and len(conv_modules(model, 1)) == 1
    with pytest.raises(ValueError, match="splits into 1 or 4"):
        conv_modules(model, 2)
    with pytest.raises(ValueError, match="1 to 4 blocks"):
        geometry(5, 1, 28)
    assert describe(4) == "4-block conv PlainNet, 16-32-32-64 channels"


def test_global_bp_written_as_a_rule_is_autograds_gradient_on_the_conv_net():
    net, x, y = _net()
    grads = rules.global_bp_rule(net, rules.make_feedback("global_bp", net, 10), net.forward_trace(x), y)
    F.cross_entropy(net(x), y).backward()
    for name, p in net.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-6, rtol=0), name


def test_fa_with_its_feedback_set_to_the_forward_weights_is_bp_and_otherwise_is_not():
    net, x, y = _net()
    trace = net.forward_trace(x)
    bp = rules.global_bp_rule(net, rules.make_feedback("global_bp", net, 10), trace, y)
    fb = rules.make_feedback("fa", net, 10, torch.Generator().manual_seed(0))
    assert {k: tuple(v.shape) for k, v in fb.named_buffers()} == {
        f"B{k}": tuple(net.layers[k - 1].weight.shape) for k in range(2, 6)
    }  # W's shape: 4-d for the convs, K x n_L for the output layer
    fa = rules.fa_rule(net, fb, trace, y)
    assert not torch.allclose(fa["blocks.0.weight"], bp["blocks.0.weight"])  # a failing case: B differs from W
    same = rules.Feedback("fa", {f"B{k}": net.layers[k - 1].weight.detach().clone() for k in range(2, 6)})
    fa_w = rules.fa_rule(net, same, trace, y)
    assert all(torch.allclose(fa_w[n], bp[n], atol=1e-12) for n in bp)


def test_direct_feedback_projects_onto_the_flattened_pre_activation():
    """DRTP by hand for block 2: δ₂ = (onehot(y) B₂ / N) reshaped to a₂ ⊙ 1[a₂ > 0], ∇W₂ = the conv's VJP at h₁."""
    net, x, y = _net()
    trace = net.forward_trace(x)
    for method in ("dfa", "drtp"):
        fb = rules.make_feedback(method, net, 10, torch.Generator().manual_seed(0))
        assert [tuple(fb[f"B{k}"].shape) for k in range(1, 5)] == [(10, n) for n in net.hidden]
        assert net.hidden == tuple(a[0].numel() for a in trace.pre)
    fb = rules.make_feedback("drtp", net, 10, torch.Generator().manual_seed(0))
    got = rules.drtp_rule(net, fb, trace, y)
    a2 = trace.pre[1]
    delta = (F.one_hot(y, 10).double() @ fb["B2"] / len(y)).view_as(a2) * (a2 > 0)
    h1 = trace.inputs[1].clone().requires_grad_(False)
    w = net.blocks[1].weight.detach().clone().requires_grad_(True)
    out = F.conv2d(h1, w, net.blocks[1].bias.detach(), stride=2, padding=1)
    (expected,) = torch.autograd.grad(out, w, grad_outputs=delta)
    assert torch.allclose(got["blocks.1.weight"], expected, atol=1e-10)
    assert torch.allclose(got["blocks.1.bias"], delta.sum((0, 2, 3)), atol=1e-10)


def test_pepita_modulates_the_image_and_takes_its_signal_at_each_block_output():
    net, x, y = _net()
    trace = net.forward_trace(x)
    fb = rules.make_feedback("pepita", net, 10, torch.Generator().manual_seed(0))
    assert tuple(fb["F"].shape) == (784, 10)
    got = rules.pepita_rule(net, fb, trace, y)
    x_mod = x + (rules.output_error(trace.logits, y) @ fb["F"].T).view_as(x)
    h1, h1_mod = torch.relu(net.blocks[0](x)), torch.relu(net.blocks[0](x_mod))
    w = net.blocks[0].weight.detach().clone().requires_grad_(True)
    out = F.conv2d(x_mod, w, net.blocks[0].bias.detach(), padding=1)
    (expected,) = torch.autograd.grad(out, w, grad_outputs=((h1 - h1_mod) / len(y)).detach())
    assert torch.allclose(got["blocks.0.weight"], expected, atol=1e-10)
    modulated = net.forward_trace(x_mod)  # the output layer on e′ at h′_L, flattened
    e_mod = rules.output_error(modulated.logits, y) / len(y)
    assert torch.allclose(got["out.weight"], e_mod.T @ modulated.inputs[-1], atol=1e-10)


@pytest.mark.parametrize("method", ["global_bp", "fa", "dfa", "drtp", "pepita"])
def test_table1_attributes_measured_on_the_conv_rules_match_the_declared(method):
    net, x, y = _net(0.25)
    fb = rules.make_feedback(method, net, 10, torch.Generator().manual_seed(0))
    measured = rules.measured_attributes(rules.RULES[method], net, fb, x, y, torch.Generator().manual_seed(2))
    assert rules.attribute_mismatches(rules.ATTRIBUTES[method], measured) == []


def test_specs_keys_and_refusals():
    from gradalign.training.bp_free import BPFreeRunSpec, bp_free_unit
    from gradalign.training.local import LocalRunSpec, SGRProtocol

    cfg = EXPERIMENTS["sgr.tab4conv"].resolve("cpu")
    assert cfg.network == "conv4" and cfg.local_spec("sgr", "fashion_mnist", 0).network == "conv4"
    assert cfg.baseline_spec("fa", "fashion_mnist", 0).to_dict()["network"] == "conv"
    mlp = EXPERIMENTS["sgr.tab4"].resolve("cpu")
    assert mlp.network == "mlp4" and "network" not in mlp.baseline_spec("fa", "fashion_mnist", 0).to_dict()
    assert "blocks" not in mlp.to_dict()  # sgr.tab4's config hash unchanged
    # every stored baseline run keeps its key (the spec rebuilt from the entry, the key computed again): the MLP's
    # entries, stored before `network` existed, have none and read as "mlp"
    mlp_runs = 0
    for path in sorted((ROOT / "results/runs/sgr.bpfree").glob("*.json")):
        fields = json.loads(path.read_text())["spec"]
        spec = BPFreeRunSpec(**{**fields, "protocol": SGRProtocol(**fields["protocol"])})
        assert bp_free_unit(spec).key == path.stem
        mlp_runs += spec.network == "mlp"
    assert mlp_runs >= 60
    with pytest.raises(ConfigError, match="network"):
        LocalRunSpec(network="conv5").validate()
    with pytest.raises(ConfigError, match="depth"):
        EXPERIMENTS["sgr.tab4conv"].resolve("smoke", {"depth": 5})
    with pytest.raises(ConfigError, match="blocks is not used"):
        EXPERIMENTS["sgr.tab4"].resolve("smoke", {"blocks": "conv"})
    with pytest.raises(ConfigError, match="blocks is not used"):
        EXPERIMENTS["sgr.tab4conv"].resolve("smoke", {"blocks": "mlp"})
    with pytest.raises(ConfigError, match="features"):
        EXPERIMENTS["sgr.tab4conv"].resolve("paper", {"width": 0.01})  # 16 features at the last block < 100 classes


def test_the_scale_names_the_conv_network():
    cfg = EXPERIMENTS["sgr.tab4conv"].resolve("cpu").to_dict()
    text = EXPERIMENTS["sgr.tab4conv"].scale({"id": "sgr.tab4conv", "config": cfg})
    assert "4-block conv PlainNet, 16-32-32-64 channels (our reading)" in text and "width ×" not in text


def _arm(values):
    n = len(values)
    mean = sum(values) / n
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return {"mean": mean, "std": std, "n": n, "values": list(values)}


def _record(full: dict, half: dict | None):
    cfg = EXPERIMENTS["sgr.tab4conv"].resolve("cpu").to_dict()
    metrics = {"table": {"fashion_mnist": full}}
    if half is not None:
        metrics["half"] = {"epochs": 10, "table": {"fashion_mnist": half}, "diverged": {}}
    return {"id": "sgr.tab4conv", "config": cfg, "metrics": metrics}


FULL = {"layerwise": _arm([80.0, 80.5, 79.5]), "reforward": _arm([80.0, 80.2, 79.8]), "sgr": _arm([83.0, 83.4, 82.6])}


def test_a_claim_is_decided_when_it_holds_at_both_budgets():
    half = {"layerwise": _arm([78.0, 78.5, 77.5]), "reforward": _arm([78.0, 78.2, 77.8]), "sgr": _arm([81, 81.4, 80.6])}
    record = _record(FULL, half)
    assert bp_free_conv.half_budget_checks(record)["sgr_beats_layerwise"]["passed"]
    claims = validity.tab4conv_claims(record)
    assert claims["sgr_beats_layerwise"]["passed"] and claims["sgr_beats_layerwise"]["budget"]["stable"]
    assert claims["sgr_beats_layerwise"]["budget"]["comparisons"][""]["paired"]
    assert bp_free_conv.budget_gains(record) == {
        "fashion_mnist/layerwise": 2.0,
        "fashion_mnist/reforward": 2.0,
        "fashion_mnist/sgr": 2.0,
    }


def test_a_claim_that_flips_or_moves_at_half_the_budget_is_not_decided():
    flips = {"layerwise": _arm([84.0, 84.5, 83.5]), "reforward": FULL["reforward"], "sgr": _arm([81, 81.4, 80.6])}
    claims = validity.tab4conv_claims(_record(FULL, flips))
    c = claims["sgr_beats_layerwise"]
    assert not c["passed"] and c["within_noise"] and c["budget_unstable"]
    moved = {"layerwise": _arm([80.0, 80.5, 79.5]), "reforward": FULL["reforward"], "sgr": _arm([90, 90.4, 89.6])}
    c = validity.tab4conv_claims(_record(FULL, moved))["sgr_beats_layerwise"]
    assert not c["passed"] and c["budget_unstable"]  # still "beats" at B/2, but the difference moved by 7 points


def test_an_arm_missing_at_half_the_budget_leaves_its_claims_undecided_and_the_per_run_rule_standing():
    half = {"layerwise": _arm([78.0, 78.5, 77.5]), "sgr": _arm([81, 81.4, 80.6])}  # reforward diverged at B/2
    record = _record(FULL, half)
    claims = validity.tab4conv_claims(record)
    assert claims["sgr_beats_layerwise"]["passed"]
    assert not claims["sgr_beats_reforward"]["passed"] and claims["sgr_beats_reforward"]["budget_unstable"]
    assert bp_free_conv.budget_gains(record) is None
    assert bp_free_conv.half_budget_checks(_record(FULL, None)) is None
    assert validity.tab4conv_claims(_record(FULL, None)) == validity.tab4_claims(_record(FULL, None))
