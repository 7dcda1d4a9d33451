"""BP-free rules of SGR's baselines (`gradalign.methods.bp_free`, Yang et al. 2024 Tables 1 and 4): each rule
against a hand computation, the feedback matrices as fixed buffers, each step lowering a training loss, and
Table 1's "weight transport free" and "BP-free" measured on the rules and checked against the declarations."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from gradalign.methods import bp_free as bf
from gradalign.models.bp_free_net import BPFreeNet, he_uniform_, parameter_count

DT = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module", autouse=True)
def _warm_imports():
    """torch imports torch.fx / torch._dynamo lazily on the first autograd.grad and optimizer (~2 s, once per
    process): done here so that each test's time is its own."""
    x = torch.ones(2, requires_grad=True)
    torch.autograd.grad(x * 2, x, grad_outputs=torch.ones(2))
    torch.optim.SGD([x], lr=0.1)


def tiny(hidden=(4, 3), bias=True, seed=0, d=5, classes=3, n=6, activation="relu"):
    """A float64 net d → hidden → classes and a batch of n."""
    torch.manual_seed(seed)
    net = BPFreeNet(d, hidden, classes, bias=bias, activation=activation).to(DT)
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(n, d, generator=g, dtype=DT)
    y = torch.arange(n) % classes
    return net, x, y


def backprop(net, x, y) -> dict:
    loss = F.cross_entropy(net(x), y)
    names, params = zip(*net.named_parameters())
    return dict(zip(names, torch.autograd.grad(loss, params)))


def close(a: dict, b: dict, names=None, tol=1e-12) -> bool:
    return all((a[k] - b[k]).abs().max() <= tol for k in names or b)


def onehot(y, classes=3):
    return F.one_hot(y, classes).to(DT)


def feedback(method, net, seed=1):
    return bf.make_feedback(method, net, net.classes, torch.Generator().manual_seed(seed))


# --- the network -------------------------------------------------------------------------------------------


def test_forward_trace_keeps_every_layer_without_a_graph():
    net, x, y = tiny()
    t = net.forward_trace(x)
    assert len(t.inputs) == 3 and len(t.pre) == 2
    assert torch.equal(t.logits, net(x).detach()) and not t.logits.requires_grad
    assert all(torch.equal(h, F.relu(a)) for h, a in zip(t.inputs[1:], t.pre))


def test_parameter_count_follows_the_layer_list():
    for bias in (True, False):
        net, _, _ = tiny(bias=bias)
        assert parameter_count(5, (4, 3), 3, bias) == sum(p.numel() for p in net.parameters())
    assert parameter_count(3072, [1024], 10, bias=False) == 3072 * 1024 + 1024 * 10 == 3_155_968


def test_he_uniform_is_pepitas_seeded_initialisation():
    nets = [he_uniform_(tiny()[0], torch.Generator().manual_seed(4)) for _ in range(2)]
    for a, b in zip(*(n.layers for n in nets)):
        bound = math.sqrt(6 / a.weight.shape[1])
        assert torch.equal(a.weight, b.weight) and 0.5 * bound < a.weight.abs().max() <= bound
        assert not a.bias.any()


# --- each rule against a hand computation ------------------------------------------------------------------


def test_fa_with_b_equal_to_w_is_backprop():
    net, x, y = tiny()
    fb = bf.Feedback("fa", {"B2": net.blocks[1].weight.detach().clone(), "B3": net.out.weight.detach().clone()})
    assert close(bf.fa_rule(net, fb, net.forward_trace(x), y), backprop(net, x, y))


def test_global_bp_rule_is_backprop():
    net, x, y = tiny(hidden=(4, 4, 3))
    assert close(bf.global_bp_rule(net, feedback("global_bp", net), net.forward_trace(x), y), backprop(net, x, y))


def test_dfa_on_one_hidden_layer_with_b_equal_to_w_out_is_backprop():
    net, x, y = tiny(hidden=(4,))
    fb = bf.Feedback("dfa", {"B1": net.out.weight.detach().clone()})
    assert close(bf.dfa_rule(net, fb, net.forward_trace(x), y), backprop(net, x, y))


@pytest.mark.parametrize("method", ["dfa", "drtp"])
def test_direct_rules_hidden_updates_follow_the_formula(method):
    """δ_k = (s B_k / N) ⊙ 1[a_k > 0] with s = e (DFA) or onehot(y) (DRTP); ∂W_k = δ_kᵀ h_{k−1}, ∂b_k = Σ_n δ_k."""
    net, x, y = tiny()
    fb = feedback(method, net)
    (w1, b1), (w2, b2), (w3, b3) = [(m.weight.detach(), m.bias.detach()) for m in net.layers]
    a1 = x @ w1.T + b1
    a2 = F.relu(a1) @ w2.T + b2
    e = torch.softmax(F.relu(a2) @ w3.T + b3, 1) - onehot(y)
    s = e if method == "dfa" else onehot(y)
    d1 = (s @ fb["B1"] / 6) * (a1 > 0)
    d2 = (s @ fb["B2"] / 6) * (a2 > 0)
    want = {"blocks.0.weight": d1.T @ x, "blocks.0.bias": d1.sum(0), "blocks.1.weight": d2.T @ F.relu(a1)}
    want["blocks.1.bias"] = d2.sum(0)
    assert close(bf.RULES[method](net, fb, net.forward_trace(x), y), want)
    assert d1.abs().max() > 0 and d2.abs().max() > 0  # the check is not vacuous


@pytest.mark.parametrize("method", ["fa", "dfa", "drtp"])
def test_output_layer_gets_its_true_gradient(method):
    net, x, y = tiny()
    got = bf.RULES[method](net, feedback(method, net), net.forward_trace(x), y)
    true = backprop(net, x, y)
    assert close(got, true, ["out.weight", "out.bias"])
    assert not close(got, true, ["blocks.0.weight"], tol=1e-6)  # random feedback: the hidden layers differ


def pepita_by_hand(weights, fmat, x, y):
    """Two forward passes written out; returns (h1, h2, e) and the code's ΔW (W ← W + η ΔW / N)."""

    def forward(inp):
        h1 = F.relu(inp @ weights[0].T)
        h2 = F.relu(h1 @ weights[1].T)
        return h1, h2, torch.softmax(h2 @ weights[2].T, 1) - onehot(y)

    h1, h2, e = forward(x)
    xm = x + e @ fmat.T
    h1m, h2m, em = forward(xm)
    return [-(h1 - h1m).T @ xm, -(h2 - h2m).T @ h1m, -em.T @ h2m]


def test_pepita_matches_two_forward_passes_by_hand():
    net, x, y = tiny(bias=False)
    fb = feedback("pepita", net)
    weights = [m.weight.detach() for m in net.layers]
    delta = pepita_by_hand(weights, fb["F"], x, y)
    got = bf.pepita_rule(net, fb, net.forward_trace(x), y)
    want = {name: -d / 6 for name, d in zip(["blocks.0.weight", "blocks.1.weight", "out.weight"], delta)}
    assert close(got, want) and all(d.abs().max() > 0 for d in delta)


def test_pepita_sign_torch_sgd_momentum_applies_the_papers_update():
    """.grad = −ΔW/N: torch's SGD momentum gives the code's v ← μv + ηΔW/N, W ← W + v, step after step."""
    net, x, y = tiny(bias=False)
    fb = feedback("pepita", net)
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    weights = [m.weight.detach().clone() for m in net.layers]
    velocity = [torch.zeros_like(w) for w in weights]
    for _ in range(2):
        delta = pepita_by_hand(weights, fb["F"], x, y)
        velocity = [0.9 * v + 0.5 * d / 6 for v, d in zip(velocity, delta)]
        weights = [w + v for w, v in zip(weights, velocity)]
        bf.pepita_step(net, fb, opt, x, y)
    assert all((m.weight - w).abs().max() < 1e-12 for m, w in zip(net.layers, weights))


# --- feedback matrices -------------------------------------------------------------------------------------

SHAPES = {
    "fa": {"B2": (3, 4), "B3": (3, 3)},
    "dfa": {"B1": (3, 4), "B2": (3, 3)},
    "drtp": {"B1": (3, 4), "B2": (3, 3)},
    "pepita": {"F": (5, 3)},
}


@pytest.mark.parametrize("method", list(bf.BP_FREE_METHODS))
def test_feedback_is_fixed_buffers_within_their_bounds(method):
    net, x, y = tiny(bias=method != "pepita")
    fb = feedback(method, net)
    assert list(fb.parameters()) == [] and set(fb.state_dict()) == set(SHAPES[method])
    for name, b in fb.named_buffers():
        assert tuple(b.shape) == SHAPES[method][name] and b.dtype == DT
        bound = 0.05 * math.sqrt(6 / 5) if name == "F" else math.sqrt(6 / b.shape[1])
        assert b.abs().max() <= bound and b.abs().max() > 0.5 * bound
    before = {k: v.clone() for k, v in fb.state_dict().items()}
    bf.BP_FREE_METHODS[method](net, fb, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), x, y)
    assert all(torch.equal(before[k], v) for k, v in fb.state_dict().items())


def test_same_seed_same_feedback():
    net, _, _ = tiny()
    for method in bf.BP_FREE_METHODS:
        a, b, c = feedback(method, net, 7), feedback(method, net, 7), feedback(method, net, 8)
        assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
        assert not all(torch.equal(v, c.state_dict()[k]) for k, v in a.state_dict().items())


# --- the steps ---------------------------------------------------------------------------------------------


TRAINING = {"fa": ("relu", 0.05), "dfa": ("relu", 0.05), "drtp": ("tanh", 0.05), "pepita": ("relu", 0.2)}
"""Activation and learning rate per method (SGD momentum 0.9). DRTP with tanh as in Frenkel et al. (2021): its
update never vanishes (no error term), so with ReLU its activations grow without bound on a fixed batch."""


@pytest.mark.parametrize("method", list(bf.BP_FREE_METHODS))
def test_each_step_lowers_the_training_loss(method):
    activation, lr = TRAINING[method]
    net, x, y = tiny(hidden=(16, 16), bias=method != "pepita", d=8, n=12, activation=activation)
    fb = feedback(method, net)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    first = bf.BP_FREE_METHODS[method](net, fb, opt, x, y)
    assert set(first) == {"loss", "acc"} and not first["loss"].requires_grad and first["loss"].dim() == 0
    for _ in range(49):
        last = bf.BP_FREE_METHODS[method](net, fb, opt, x, y)
    assert last["loss"] < 0.7 * first["loss"], (float(first["loss"]), float(last["loss"]))


def test_step_writes_the_rules_gradients():
    net, x, y = tiny()
    fb = feedback("dfa", net)
    want = bf.dfa_rule(net, fb, net.forward_trace(x), y)
    bf.dfa_step(net, fb, torch.optim.SGD(net.parameters(), lr=0.0), x, y)
    assert close({k: p.grad for k, p in net.named_parameters()}, want, tol=0.0)


# --- Table 1 -----------------------------------------------------------------------------------------------


def test_table1_as_declared():
    rows = bf.attributes_table()
    assert [r["method"] for r in rows] == ["Global BP", "FA", "DFA", "PEPITA", "DRTP", "Ours"]
    cells = [(r["weight transport free"], r["update unlocking"], r["BP-free"]) for r in rows]
    assert cells == [
        ("no", "no", "no"),
        ("yes", "no", "no"),
        ("yes", "partially", "yes"),
        ("yes", "partially", "yes"),
        ("yes", "yes", "yes"),
        ("yes", "yes", "yes"),
    ]
    assert all(r["why"] for r in rows)


def measure(rule, method="fa", fb=None):
    net, x, y = tiny(hidden=(6, 5, 4), d=6, n=8)
    fb = fb if fb is not None else feedback(method, net)
    return bf.measured_attributes(rule, net, fb, x, y, torch.Generator().manual_seed(3))


@pytest.mark.parametrize("method", list(bf.RULES))
def test_measured_attributes_agree_with_table1(method):
    measured = measure(bf.RULES[method], method)
    assert bf.attribute_mismatches(bf.ATTRIBUTES[method], measured) == []


FLIP = {"yes": "no", "no": "yes"}


@pytest.mark.parametrize("method", list(bf.RULES))
@pytest.mark.parametrize("attribute", bf.MEASURED)
def test_a_wrong_declaration_is_caught(method, attribute):
    declared = bf.ATTRIBUTES[method]
    wrong = bf.Attributes(**{**declared.__dict__, attribute: FLIP[getattr(declared, attribute)]})
    assert bf.attribute_mismatches(wrong, measure(bf.RULES[method], method)) == [attribute]


def test_a_rule_that_transports_weights_is_measured_as_such():
    """DFA with B_k = W_{L+1} W_L ⋯ W_{k+1} (the linearised backward path) reads the forward weights above k."""

    def transported_dfa(net, fb, trace, y):
        mats, prod = {}, net.out.weight.detach()
        for k in range(len(net.blocks), 0, -1):
            mats[f"B{k}"] = prod
            prod = prod @ net.blocks[k - 1].weight.detach()
        return bf.dfa_rule(net, bf.Feedback("dfa", mats), trace, y)

    measured = measure(transported_dfa, fb=bf.Feedback("dfa", {}))
    assert measured == {"weight_transport_free": "no", "bp_free": "no"}
    assert bf.attribute_mismatches(bf.ATTRIBUTES["dfa"], measured) == ["weight_transport_free", "bp_free"]


# --- bad input ---------------------------------------------------------------------------------------------


def test_bad_input_is_a_one_line_value_error():
    net, x, y = tiny()
    shallow, _, _ = tiny(hidden=(4,))
    cases = [
        (lambda: bf.make_feedback("backprop", net, 3), "unknown BP-free method 'backprop'"),
        (lambda: bf.make_feedback("fa", net, 10), "classes (10)"),
        (lambda: bf.fa_rule(net, feedback("dfa", net), net.forward_trace(x), y), "made for 'dfa', not 'fa'"),
        (lambda: bf.chains_errors(bf.fa_rule, shallow, feedback("fa", shallow), x, y), "at least 2 hidden"),
        (lambda: bf.Attributes("maybe", "no", "no"), "weight_transport_free must be one of"),
        (lambda: BPFreeNet(5, (4,), 3, activation="gelu"), "unknown activation"),
    ]
    for call, fragment in cases:
        with pytest.raises(ValueError) as err:
            call()
        assert fragment in str(err.value) and "\n" not in str(err.value)
