"""Saved-activation memory: a hand count, the local-vs-global ordering on ResNet-32, and sgr.mem's checks."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gradalign.analysis.activation_memory import (
    cuda_step_peak_bytes,
    measure_saved,
    saved_activation_bytes,
    step_activation_memory,
)
from gradalign.errors import ConfigError
from gradalign.experiments.sgr.memory import (
    SMOKE,
    MemoryConfig,
    activation_memory,
    memory_checks,
    memory_targets,
    memory_targets_pooled,
    paper_table5_ratios,
)
from gradalign.analysis.head_share import pooled_belilovsky_head, step_memory_with_head_share
from gradalign.models.resnet_cifar import resnet32


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def state(model: nn.Module) -> list[torch.Tensor]:
    return [*model.parameters(), *model.buffers()]


@pytest.mark.parametrize("dtype,size", [(torch.float32, 4), (torch.float64, 8)])
@pytest.mark.parametrize("input_grad", [False, True])
def test_hand_count_linear_relu_linear(dtype, size, input_grad):
    """Linear(5→7) → ReLU → Linear(7→3) on a batch of 4, output summed. Autograd saves: the input x
    (addmm's mat1, for the first weight's gradient), the ReLU's output h (for ReLU's backward; the second
    addmm saves the same h as its mat1) and the second weight transposed (mat2, for the gradient w.r.t. h).
    The first weight is saved only when x requires grad. Weights are parameters and not counted."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)).to(dtype)
    x = torch.randn(4, 5, dtype=dtype, requires_grad=input_grad)
    fn = lambda: net(x).sum()  # noqa: E731
    activations = (4 * 5 + 4 * 7) * size  # x and h
    assert saved_activation_bytes(fn, net.parameters()) == activations
    w1, w2 = 5 * 7 * size, 7 * 3 * size
    assert saved_activation_bytes(fn) == activations + w2 + (w1 if input_grad else 0)


def test_each_storage_counted_once():
    x = torch.randn(6, 10, requires_grad=True)
    # two distinct tensors of equal values are two storages: relu's output, and the detached factor mul saves
    assert saved_activation_bytes(lambda: (x.relu() * x.relu().detach()).sum()) == 2 * 6 * 10 * 4
    # relu saves its output h; mul saves h twice (self and other): one storage of 6·10 floats
    assert saved_activation_bytes(lambda: (lambda h: (h * h).sum())(x.relu())) == 6 * 10 * 4
    # a view of a saved tensor costs nothing more than its storage
    assert saved_activation_bytes(lambda: (lambda h: (h[:, :5] * h[:, 5:]).sum())(x.relu())) == 6 * 10 * 4
    # nothing saved without autograd
    with torch.no_grad():
        assert saved_activation_bytes(lambda: (x.relu() * 2).sum()) == 0


def test_conv_bn_relu_count():
    """conv (saves input; weight excluded) → BN (saves its input and per-channel mean and 1/std; running
    statistics are buffers) → ReLU (saves output)."""
    block = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU()).train()
    x = torch.randn(2, 3, 5, 5)
    expected = (2 * 3 * 25 + 2 * 4 * 25 + 4 + 4 + 2 * 4 * 25) * 4
    assert saved_activation_bytes(lambda: block(x).sum(), state(block)) == expected


def test_global_bp_is_the_whole_graph():
    torch.manual_seed(0)
    model = resnet32().train()
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([1, 2])
    direct = saved_activation_bytes(lambda: F.cross_entropy(model(x), y), state(model))
    measured = step_activation_memory(model, 1, x, y)
    assert measured["peak_bytes"] == direct == measured["per_module_bytes"][0]


@pytest.mark.parametrize("method", ["local", "sgr"])
@pytest.mark.parametrize("plain", [False, True])
def test_more_modules_less_memory_on_resnet32(method, plain):
    torch.manual_seed(0)
    model = resnet32(plain=plain)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([3, 4])
    peak = {k: step_activation_memory(model, k, x, y, method=method) for k in (1, 2, 3, 16)}
    assert [len(peak[k]["per_module_bytes"]) for k in peak] == [1, 2, 3, 16]
    assert all(p["peak_bytes"] == max(p["per_module_bytes"]) for p in peak.values())
    assert peak[16]["peak_bytes"] < peak[2]["peak_bytes"] < peak[1]["peak_bytes"]


def test_sgr_counts_the_graph_of_the_input_gradient():
    torch.manual_seed(0)
    model = resnet32()
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([3, 4])
    local = step_activation_memory(model, 16, x, y, method="local")["per_module_bytes"]
    sgr = step_activation_memory(model, 16, x, y, method="sgr")["per_module_bytes"]
    assert sgr[0] == local[0]  # the first module has no SGR term
    assert all(s > 1.5 * lo for s, lo in zip(sgr[1:], local[1:]))  # create_graph keeps a second graph


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"modules": 4}, "valid K"),
        ({"method": "global"}, "unknown method"),
        ({"head": "linear"}, "unknown local head"),
    ],
)
def test_bad_step_inputs_are_refused(kwargs, message):
    args = {"modules": 2, "method": "local", "head": "belilovsky", **kwargs}
    with pytest.raises(ConfigError, match=message):
        step_activation_memory(resnet32(), args["modules"], torch.randn(2, 3, 8, 8), None, args["head"], args["method"])


def test_unknown_network_is_refused():
    with pytest.raises(ConfigError, match="no local split"):
        step_activation_memory(nn.Sequential(nn.Linear(2, 2)), 2, torch.randn(2, 2))


def test_cuda_measure_needs_a_cuda_batch():
    with pytest.raises(ConfigError, match="CUDA"):
        cuda_step_peak_bytes(resnet32(), 2, torch.randn(2, 3, 8, 8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_memory_falls_with_more_modules():
    torch.manual_seed(0)
    model = resnet32().cuda()
    x, y = torch.randn(64, 3, 32, 32, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    peak = {k: cuda_step_peak_bytes(model, k, x, y) for k in (1, 2, 16)}
    # K = 1 and K = 2 share the stem and two of three stages, whose backward sets both peaks: their saved activations
    # differ by about 11 % (152 and 135 MiB at batch 64), but on an H100 (window of 2026-11-26) the real peaks were
    # 169.1 (K = 1), 170.1 (K = 2), 166.0 (K = 3) and 98.0 MiB (K = 16): K = 2's local head and cuDNN's workspaces
    # take back that saving, so K = 2 is held only to within 2 % of K = 1; K = 16 must save well over a third
    assert peak[16] < peak[2] <= 1.02 * peak[1], peak
    assert peak[16] < 0.6 * peak[1], peak
    saved = step_activation_memory(model, 1, x, y)["peak_bytes"]
    assert peak[1] >= 0.5 * saved, (peak, saved)  # the real peak holds at least most of the saved activations


# --- sgr.mem: its checks, targets and bad configs ---------------------------------------------------

GOOD = {
    "resnet32": {"local": {"16": 0.2, "3": 0.6, "2": 0.9}, "sgr": {"16": 0.4, "3": 0.7, "2": 0.9}},
    "vgg57": {"local": {"55": 0.2, "5": 0.5}, "sgr": {"55": 0.4, "5": 0.6}},
}


def test_memory_checks_pass_on_savings():
    checks = memory_checks(GOOD)
    assert all(c["passed"] for c in checks.values())


def test_memory_checks_fail_when_local_costs_more():
    worse = {**GOOD, "vgg57": {"local": {"55": 0.2, "5": 0.5}, "sgr": {"55": 1.2, "5": 0.6}}}
    checks = memory_checks(worse)
    assert not checks["local_learning_saves_memory"]["passed"]
    assert not checks["more_modules_less_memory"]["passed"]
    assert checks["more_modules_less_memory"]["value"] == {"resnet32": True, "vgg57": False}


def test_memory_checks_fail_when_memory_does_not_fall_with_k():
    flat = {"resnet32": {"local": {"16": 0.5, "2": 0.5}, "sgr": {"16": 0.5, "2": 0.5}}}
    checks = memory_checks(flat)
    assert checks["local_learning_saves_memory"]["passed"]
    assert not checks["more_modules_less_memory"]["passed"]


def test_memory_targets():
    targets = memory_targets({"resnet32": {"sgr": {"16": 0.25, "2": 0.8}}})
    assert targets["resnet32_sgr_k16"]["passed"] and not targets["resnet32_sgr_k2"]["passed"]
    assert set(memory_targets({"resnet32": {"sgr": {"3": 0.5}}})) == set()


def test_memory_targets_pooled():
    targets = memory_targets_pooled(
        {"2": {"resnet32": {"sgr": {"16": 0.32}}}, "4": {"resnet32": {"sgr": {"16": 0.29}}}}
    )
    assert not targets["resnet32_sgr_k16_pooled2"]["passed"] and targets["resnet32_sgr_k16_pooled4"]["passed"]
    assert memory_targets_pooled({"4": {"resnet32": {"sgr": {"2": 0.5}}}}) == {}


@pytest.mark.parametrize("method", ["local", "sgr"])
def test_head_share_keeps_the_peak_and_takes_the_heads_out(method):
    """The same steps as `step_activation_memory` (same per-module bytes); every local head has a positive
    share, the last module (the network's own classifier) none; a pooled head weighs less than the full one;
    and for layer-wise training, module minus head share is what the module alone saves (its output kept)."""
    torch.manual_seed(0)
    model = resnet32()
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    reference = step_activation_memory(model, 16, x, y, method=method)
    measured = step_memory_with_head_share(model, 16, x, y, "belilovsky", method)
    assert measured["per_module_bytes"] == reference["per_module_bytes"]
    assert measured["peak_bytes"] == reference["peak_bytes"]
    assert all(b > 0 for b in measured["head_bytes"][:-1]) and measured["head_bytes"][-1] == 0
    assert measured["peak_without_heads_bytes"] < measured["peak_bytes"]
    heads = [pooled_belilovsky_head(c, 10, 4) for c in (16,) * 6 + (32,) * 5 + (64,) * 4]
    light = step_memory_with_head_share(model, 16, x, y, "belilovsky", method, heads)
    assert all(a < b for a, b in zip(light["head_bytes"][:-1], measured["head_bytes"][:-1]))
    layerwise = step_memory_with_head_share(model, 16, x, y, "belilovsky", "local")
    assert measured["head_bytes"][0] == layerwise["head_bytes"][0]  # module 1 has no SGR term
    assert method == "local" or all(a > b for a, b in zip(measured["head_bytes"][1:-1], layerwise["head_bytes"][1:]))
    if method == "local":
        from gradalign.models.resnet_cifar import split_into_modules

        alone, inp = [], x
        for module in split_into_modules(model, 16):
            saved, out = measure_saved(lambda m=module, i=inp: m(i.detach()), state(module))
            alone.append(saved)
            inp = out.detach()
        without = [a - b for a, b in zip(measured["per_module_bytes"], measured["head_bytes"])]
        assert without[:-1] == alone[:-1]


def test_head_share_refuses_the_wrong_number_of_heads():
    with pytest.raises(ValueError, match="need 15 local heads"):
        step_memory_with_head_share(resnet32(), 16, torch.randn(2, 3, 8, 8), torch.zeros(2, dtype=torch.long),
                                    "belilovsky", "local", [pooled_belilovsky_head(16, 10, 2)])  # fmt: skip


def test_paper_table5_ratios():
    rows = {(r["network"], r["method"], r["K"]): r["ratio"] for r in paper_table5_ratios()}
    assert rows[("resnet50", "sgr", 3)] == pytest.approx(15.34 / 21.49)
    assert all(0 < r < 1 for (_, method, _), r in rows.items() if method == "sgr")  # InfoPro K = 2 on ResNet-50: 1.005


@pytest.mark.parametrize(
    "overrides",
    [
        {"batch": 1},
        {"image_size": 4},
        {"resnet_splits": (4,)},
        {"resnet_splits": ()},
        {"resnet_splits": (16, 16)},
        {"vgg_depth": 13},
        {"head": "conv"},
        {"vgg_width": 0.0},
        {"batch": True},
        {"pooled_head_factors": (1,)},
        {"pooled_head_factors": (2.5,)},
    ],
)
def test_bad_memory_config_is_refused(overrides):
    with pytest.raises(ConfigError):
        MemoryConfig(**overrides)


def test_smoke_run_passes_its_checks():
    result = activation_memory(MemoryConfig(**SMOKE), "cpu")
    assert all(c["passed"] for c in result["checks"].values()), result["checks"]
    assert set(result["targets"]) == {"resnet32_sgr_k16", "resnet32_sgr_k2"} | {
        f"resnet32_sgr_k16_pooled{f}" for f in MemoryConfig().pooled_head_factors
    }
    rows = result["metrics"]["rows"]
    assert {(r["network"], r["method"], r["K"]) for r in rows} >= {("resnet32", "sgr", 16), ("vgg57", "local", 55)}
    assert all(0 < r["ratio"] for r in rows)


def test_measure_saved_frees_the_graph_it_measured():
    """A saved output handed back by the pack hook with its grad_fn would make a cycle that is never freed:
    every measurement would leak its graph (22 GB over Table 5's networks before the fix)."""
    import gc
    import weakref

    x = torch.randn(64, requires_grad=True)
    refs = []

    def fn():
        y = torch.relu(x)  # relu saves its output
        refs.append(weakref.ref(y))
        return (y * 2).sum()

    saved, result = measure_saved(fn)
    assert saved == 64 * 4
    del result
    gc.collect()
    assert refs[0]() is None
