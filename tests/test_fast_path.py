"""The fast path (`training.fast`) in the SSL run, and the command time box (`timebox`).

On CPU: bf16 autocast runs there too, so every method's step is run under it and compared with the fp32
reference; channels-last alone must agree with it to float tolerance; a switch that is on must be seen to act.
The CUDA tests (no host synchronisation inside a step, the whole fast path) run where a GPU is present.
Tiny synthetic data (tests/test_ssl_training.py's) and a width-4 SmallCNN, one thread."""

import copy
import math
import warnings

import pytest
import torch

from gradalign.training import timebox
from gradalign.cli import main
from gradalign.errors import ConfigError
from gradalign.methods.consistency import vat_perturbation
from gradalign.training.fast import ON_CUDA, REFERENCE, FastPath, prepare_model
from gradalign.training.protocols import oliver_settings
from gradalign.training.ssl import METHODS, SSLRun, train_ssl
from tests.test_ssl_training import assert_identical, make_data, make_model, params, protocol

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning"),
    pytest.mark.usefixtures("one_thread"),
]

CL, BF16 = FastPath(channels_last=True), FastPath(bf16=True, channels_last=True)


def trained(method: str, fast: FastPath, steps: int = 4) -> tuple[list[torch.Tensor], dict]:
    model = make_model()
    out = train_ssl(model, method, oliver_settings(method), protocol(steps, eval_every=2), make_data(), 0, fast=fast)
    return params(model), out


def max_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_trains_under_bf16_close_to_fp32_but_not_equal(method):
    reference, ref_out = trained(method, REFERENCE)
    fast, fast_out = trained(method, BF16)
    assert all(math.isfinite(v) for v in fast_out["history"]["train_loss"])
    difference = max_difference(reference, fast)
    assert 0 < difference < 0.05, difference  # bf16 acted, and stayed close over 4 steps
    assert all(p.dtype == torch.float32 for p in fast)  # weights stay float32


@pytest.mark.parametrize("method", [m for m in METHODS if "vat" not in m])
def test_channels_last_alone_agrees_with_the_reference(method):
    """fp32 in another memory order: the same numbers up to summation order (VAT's normalised direction of a
    1e-6 perturbation amplifies those; its methods are left out)."""
    reference, _ = trained(method, REFERENCE)
    nhwc, _ = trained(method, CL)
    assert max_difference(reference, nhwc) < 1e-4


def test_the_switches_act_on_the_model_and_the_step():
    def last_conv(model):  # several input channels: NCHW and NHWC differ
        return [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)][-1].weight

    assert not last_conv(make_model()).is_contiguous(memory_format=torch.channels_last)
    assert last_conv(prepare_model(make_model(), CL)).is_contiguous(memory_format=torch.channels_last)
    seen = []
    for fast in (REFERENCE, BF16):
        run = SSLRun("supervised", make_model(), oliver_settings("supervised"), protocol(), make_data(), 0, fast=fast)
        hook = run.model.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
        run.step(1)
        hook.remove()
    assert seen == [torch.float32, torch.bfloat16]


def test_compile_is_refused_for_steps_with_torch_func_before_compute():
    model = make_model()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ConfigError, match="torch.func"):
        train_ssl(model, "lga", oliver_settings("lga"), protocol(), make_data(), 0, fast=FastPath(compile=True))
    assert_identical(before, model.state_dict())


def test_compiled_supervised_run_matches_the_eager_one():
    """torch.compile on CPU (inductor, C++): the same training to float tolerance; keys of the state unchanged."""
    reference, _ = trained("supervised", REFERENCE)
    compiled, out = trained("supervised", FastPath(compile=True))
    assert max_difference(reference, compiled) < 1e-4
    assert math.isfinite(out["test_error"])


def test_vat_power_iteration_ignores_an_enclosing_autocast():
    """r_adv under a bf16 autocast equals r_adv without one, bit for bit: the iteration runs in float32."""
    model, x = make_model().eval(), make_data().x_unlabeled[:8]
    clean = model(x).detach()

    def r(autocast: bool):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return vat_perturbation(model, x, clean, eps=6.0, generator=torch.Generator().manual_seed(0))

    assert torch.equal(r(False), r(True))


def test_a_unit_key_names_the_fast_path_only_when_it_is_on():
    from gradalign.experiments.lga.ssl_runs import SSLBenchConfig, run_unit

    plain = run_unit(SSLBenchConfig(), "fashion_mnist", "cifar", "lga", 250, 0, "cpu")
    assert "fast" not in plain.spec
    bf16 = run_unit(SSLBenchConfig(fast=FastPath(bf16=True)), "fashion_mnist", "cifar", "lga", 250, 0, "cpu")
    assert bf16.spec["fast"] == {"bf16": True, "channels_last": False, "compile": False}
    assert {k: v for k, v in bf16.spec.items() if k != "fast"} == plain.spec


def test_the_cpu_and_gpu_presets_set_the_fast_path_in_their_config():
    from gradalign.experiments import get

    assert get("lga.fig7").resolve("gpu").fast == ON_CUDA
    assert get("lga.fig7").resolve("cpu").fast == ON_CUDA  # the bench measured 2.6x for this network
    assert get("lga.fig7").resolve("smoke").fast == REFERENCE


# ---- the time box ------------------------------------------------------------------------------------


@pytest.mark.parametrize("minutes", [0, -1.0, math.nan, math.inf, True, "5"])
def test_a_bad_time_limit_is_refused(minutes):
    with pytest.raises(ConfigError, match="time limit"):
        with timebox.time_box(minutes):
            pass


def test_a_boxed_run_stops_checkpointed_and_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """A box that closes within the first evaluation window: the run stops at the first step past the deadline
    (an SSL run resumes between evaluations), keeps its checkpoint, and the same call outside the box finishes
    bit-identical to a run never stopped."""
    settings, data, prot = oliver_settings("pseudo_label"), make_data(), protocol(12, eval_every=3)
    whole = make_model()
    expected = train_ssl(whole, "pseudo_label", settings, prot, data, 0)
    checkpoint = tmp_path / "run.pt"
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr("gradalign.training.ssl.seconds_left", lambda: 1e-9)  # the box nearly spent as it begins
        with pytest.raises(timebox.TimeBoxSpent, match="stopped after step 1 of 12, checkpointed"):
            train_ssl(make_model(), "pseudo_label", settings, prot, data, 0, checkpoint=checkpoint)
        assert checkpoint.exists()
        patch.setattr(timebox, "seconds_left", lambda: -1.0)  # spent: the next run does not begin
        with pytest.raises(timebox.TimeBoxSpent, match="before Pseudo-Label"):
            train_ssl(make_model(), "pseudo_label", settings, prot, data, 0, checkpoint=checkpoint)
    resumed_model = make_model()
    resumed = train_ssl(resumed_model, "pseudo_label", settings, prot, data, 0, checkpoint=checkpoint)
    assert_identical(params(whole), params(resumed_model))
    assert resumed["history"] == expected["history"] and resumed["test_error"] == expected["test_error"]
    assert not checkpoint.exists()


def test_a_spent_box_stops_the_command_with_status_3(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(timebox, "seconds_left", lambda: -1.0)  # spent before the first run begins
    status = main(["run", "lga.fig7", "--preset", "smoke", "--time-limit", "8", "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert status == 3 and err.startswith("gradalign: stopped:") and "run the same command again" in err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.json"))


@pytest.mark.parametrize("value", ["0", "nan", "-3", "soon"])
def test_a_bad_time_limit_on_the_command_line_is_one_line_before_compute(value, tmp_path, capsys):
    status = main(["run", "lga.fig7", "--preset", "smoke", "--time-limit", value, "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("gradalign: error:") and err.count("\n") == 1
    assert not any(tmp_path.rglob("*.json"))


# ---- on a GPU ----------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
@pytest.mark.parametrize("method", list(METHODS))
def test_no_host_synchronisation_inside_a_cuda_step(method):
    data = make_data()
    data = type(data)(**{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in vars(data).items()})
    run = SSLRun(method, make_model().cuda(), oliver_settings(method), protocol(), data, 0, fast=ON_CUDA)
    run.step(1)  # first call: allocations and autotuning
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        run.step(2)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_isoloss_table1_stops_in_the_box_and_resumes_to_the_uninterrupted_record(tmp_path, monkeypatch):
    """The Siamese runs of isoloss.tab1 honour the box too: a box that closes in the first epoch stops the first
    run after it, checkpointed; outside the box the experiment finishes with the numbers of a run never stopped."""
    from gradalign.experiments import EXPERIMENTS

    exp = EXPERIMENTS["isoloss.tab1"]
    cfg = exp.resolve("smoke", {"epochs": [2], "train_subset": 256, "siamese.probe_iterations": 20})  # seconds
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "whole"))
    whole = exp.run(cfg, "cpu")
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "boxed"))
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr(timebox, "seconds_left", lambda: 1e-9)  # nearly spent: one epoch, then stop
        with pytest.raises(timebox.TimeBoxSpent, match="stopped after epoch 1 of 2, checkpointed"):
            exp.run(cfg, "cpu")
    assert list((tmp_path / "boxed").rglob("*.pt"))
    resumed = exp.run(cfg, "cpu")

    def numbers(result):  # what training computed; timings (step seconds, DirectPred's cost) differ between runs
        return {
            k: v for k, v in result["metrics"].items() if k not in ("step_seconds", "directpred_cost", "train_seconds")
        }

    assert numbers(resumed) == numbers(whole) and resumed["curves"] == whole["curves"]
    assert resumed["checks"] == whole["checks"]


@cuda
@pytest.mark.parametrize("method", ["pseudo_label", "mean_teacher"])
def test_a_run_checkpointed_on_cuda_resumes_there(tmp_path, monkeypatch, method):
    """The first GPU windows failed every resume: checkpoints load to the GPU, where torch takes random states (the
    loop's, the run's augmentation generator's and the batch streams') only as CPU byte tensors. A boxed run on CUDA
    stops checkpointed, and the same call resumes from the checkpoint (a checkpoint it could not use warns and starts
    over: an error here) and finishes with the whole history."""
    from gradalign.training.checkpoint import CheckpointWarning

    data = make_data()
    data = type(data)(**{k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in vars(data).items()})
    settings, prot, checkpoint = oliver_settings(method), protocol(12, eval_every=3), tmp_path / "run.pt"
    whole = train_ssl(make_model().cuda(), method, settings, prot, data, 0)
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr("gradalign.training.ssl.seconds_left", lambda: 1e-9)
        with pytest.raises(timebox.TimeBoxSpent, match="stopped after step 1 of 12, checkpointed"):
            train_ssl(make_model().cuda(), method, settings, prot, data, 0, checkpoint=checkpoint)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CheckpointWarning)
        resumed = train_ssl(make_model().cuda(), method, settings, prot, data, 0, checkpoint=checkpoint)
    assert len(resumed["history"]["step"]) == len(whole["history"]["step"]) and not checkpoint.exists()


def test_bf16_on_a_cpu_without_native_bf16_is_named_slow(monkeypatch):
    from gradalign.compute import bf16_speed
    from gradalign.training.fast import FastPath

    on = FastPath(bf16=True)
    monkeypatch.setattr(bf16_speed, "native_bf16_cpu", lambda: False)
    assert "emulates it" in bf16_speed.slow_bf16(on, "cpu")
    assert bf16_speed.slow_bf16(FastPath(channels_last=True), "cpu") is None  # no bf16 asked
    assert bf16_speed.slow_bf16(on, "meta") is None  # not a CPU
    monkeypatch.setattr(bf16_speed, "native_bf16_cpu", lambda: True)  # the failing case: native bf16 is not slow
    assert bf16_speed.slow_bf16(on, "cpu") is None
