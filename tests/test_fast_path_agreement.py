"""The fast path (bf16 autocast + channels-last) at smoke, on the CPU (and on CUDA in a GPU window): runs of the
same seeds agree with fp32 within seed noise (`agree_within_noise`, below), and the check catches runs that do not
agree.

The runs: the LGA benchmark's small CNN (width 8) trained with Adam on 2,000 Fashion-MNIST images for 100 steps of
64, test error on 1,000 test images (BatchNorm on the batch's statistics); each seed the same in both paths but
for the path.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gradalign.benchmarks.fast_path import measure_fast_path
from gradalign.experiments.rules import compare, summary
from gradalign.data.image_sets import load_image_set
from gradalign.models.small_cnn import SmallCNN
from gradalign.training.fast import FastPath, autocast, prepare_model


def agree_within_noise(fp32: list[float], fast: list[float], quantity: str) -> dict:
    """Whether fast-path runs agree with fp32 runs of the same seeds within seed noise: each at least as good as
    the other (`rules.compare`), that is |mean difference| within 2 standard errors, with at least 3 seeds each."""
    a, b = summary(fast), summary(fp32)
    both = [
        compare(x, y, relation="at_least", higher_is_better=False, quantity=quantity, names=names, claim="agree")
        for x, y, names in ((a, b, ("bf16", "fp32")), (b, a, ("fp32", "bf16")))
    ]
    return {"passed": all(c["passed"] for c in both), "value": both[0]["value"]}


SEEDS = (0, 1, 2)
STEPS = 100  # two thirds of the 150 steps this test first ran: bf16 is emulated on CPUs without native bf16 (67 s)
FAST = FastPath(bf16=True, channels_last=True)


@pytest.fixture(scope="module")
def data():
    (x, y), (xt, yt) = (load_image_set("fashion_mnist", split) for split in ("train", "test"))
    return x[:2000].float() / 255, y[:2000], xt[:1000].float() / 255, yt[:1000]


def _errors(data, fast: FastPath, lr: float = 3e-3, device: str = "cpu") -> list[float]:
    x, y, xt, yt = (t.to(device) for t in data)
    out = []
    for seed in SEEDS:
        torch.manual_seed(seed)
        model = prepare_model(SmallCNN(10, 1, 8).to(device), fast)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed)
        for _ in range(STEPS):
            i = torch.randint(0, len(x), (64,), generator=generator).to(device)
            with autocast(fast, device):
                loss = F.cross_entropy(model(x[i]), y[i])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        with torch.no_grad():  # batch statistics: the small CNN's BatchNorm averages slowly (momentum 0.01)
            out.append(100.0 * (model(xt).argmax(1) != yt).float().mean().item())
    return out


@pytest.fixture(scope="module")
def fp32(data):
    return _errors(data, FastPath())


def test_bf16_runs_agree_with_fp32_within_seed_noise(data, fp32):
    fast = _errors(data, FAST)
    assert fast != fp32  # the fast path did change the computation
    assert max(fp32) < 40  # the runs learned (chance: 90 %)
    result = agree_within_noise(fp32, fast, "test error (%)")
    assert result["passed"], result


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_on_cuda_agrees_with_fp32_on_cuda_within_seed_noise(data):
    """The GPU windows' fast path: bf16 autocast + channels-last on CUDA against fp32 on CUDA, same seeds."""
    fp32, fast = (_errors(data, path, device="cuda") for path in (FastPath(), FAST))
    assert max(fp32) < 40  # the runs learned (chance: 90 %)
    result = agree_within_noise(fp32, fast, "test error (%)")
    assert result["passed"], result


def test_agreement_check_catches_runs_that_differ(data, fp32):
    slow = _errors(data, FastPath(), lr=1e-5)  # runs that barely learn (in fp32: bf16 is emulated on many CPUs)
    assert not agree_within_noise(fp32, slow, "test error (%)")["passed"]


def test_benchmark_reports_a_ratio_and_the_rule_per_network():
    m = measure_fast_path("cpu", ("small_cnn_w16",), steps=1, warmup=1, repeats=1, scale=0.05)
    row = m["by_network"]["small_cnn_w16"]
    assert row["fp32_over_bf16"] > 0 and row["pays"] == (row["fp32_over_bf16"] >= m["threshold"])
    assert m["small_cnn_w16_fp32_over_bf16"] == pytest.approx(row["fp32_over_bf16"], rel=1e-2)
