"""The semi-supervised training loop of LGA's benchmark (`training.ssl`): Oliver et al.'s settings,
each method's update against a hand computation, BatchNorm statistics, the Mean Teacher EMA, LGA + VAT,
bit-identical checkpoint/resume; plus the index streams, pool subsets and the shells trial.

Tiny synthetic data only (random 1×12×12 images, 10 classes) and a width-4 SmallCNN, on one thread."""

import copy
import dataclasses
import io
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradalign.config import settings_fields
from gradalign.data.shells import make_shells
from gradalign.data.ssl_augment import SSLAugment
from gradalign.data.ssl_data import SSLData, subset
from gradalign.errors import ConfigError
from gradalign.methods.supervised import SupervisedSettings
from gradalign.models.mlp import relu_mlp
from gradalign.models.small_cnn import SmallCNN
from gradalign.training import ssl
from gradalign.training.checkpoint import CheckpointWarning, load_checkpoint
from gradalign.training.protocols import OliverProtocol, oliver_settings
from gradalign.training.schedules import sigmoid_rampup
from gradalign.training.shells import ShellsTrialSettings, shells_trial
from gradalign.training.ssl import METHODS, SSLRun, train_ssl
from gradalign.training.streams import IndexStream

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch's JVP rules

K = 10
B_L, B_U = 8, 8


@pytest.fixture(autouse=True)
def _deterministic_threads():
    """Overrides conftest's fixture of the same name: one thread (another job holds the other core)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_data(
    translate: int = 2, n_labeled: int = 16, n_unlabeled: int = 32, n_val: int = 20, n_test: int = 20, seed: int = 0
) -> SSLData:
    g = torch.Generator().manual_seed(seed)

    def x(n):
        return torch.randn(n, 1, 12, 12, generator=g)

    def y(n):
        return torch.randint(0, K, (n,), generator=g)

    x_l, y_l = x(n_labeled), y(n_labeled)
    x_u = torch.cat([x_l, x(n_unlabeled - n_labeled)])  # the pool includes the labeled images
    return SSLData(x_l, y_l, x_u, x(n_val), y(n_val), x(n_test), y(n_test), SSLAugment(translate=translate), K)


def make_model(seed: int = 0) -> SmallCNN:
    torch.manual_seed(seed)
    return SmallCNN(num_classes=K, in_channels=1, width=4)


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def protocol(steps: int = 10, **kw) -> OliverProtocol:
    return OliverProtocol(steps=steps, batch_labeled=B_L, batch_unlabeled=B_U, **kw)


def next_batches(run: SSLRun):
    """The batches `run.step` will draw next (copies of its index streams), without moving them."""
    d = run.data
    i_l, i_u = copy.deepcopy(run.labeled).next(), copy.deepcopy(run.unlabeled).next()
    return d.x_labeled[i_l], d.y_labeled[i_l], d.x_unlabeled[i_u], i_u


def assert_identical(a, b, where: str = "") -> None:
    """Nested dicts/lists of tensors and plain values, equal bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


# ---- 1. Oliver et al.'s settings (PROTOCOLS.md, section LGA) ---------------------------------------------


def expected_settings(method: str, family: str) -> dict:
    """Every field of the method's settings, dotted: Oliver et al.'s tuned values, VAT's eps per family."""
    eps = 6.0 if family == "cifar" else 1.0
    vat = {"lr": 3e-3, "weight": 0.3, "eps": eps, "xi": 1e-6, "entmin": 0.0}
    lga = {"lr": 1e-3, "alpha_w": 1e-3, "eps_norm": 1e-3}  # Figure 1's α_θ = α_w = ε_norm = 1e-3
    lga |= {"labeled_weight": 1.0, "grad_ema_decay": 0.9, "norm_ema_decay": 0.999}  # T(i) and the EMA decays: ours
    return {
        "supervised": {"lr": 3e-3},
        "pseudo_label": {"lr": 3e-4, "weight": 1.0, "threshold": 0.95},
        "pi_model": {"lr": 3e-4, "weight": 20.0},
        "mean_teacher": {"lr": 4e-4, "weight": 8.0, "ema": 0.95},
        "vat": vat,
        "vat_entmin": {**vat, "entmin": 0.1},
        # LGA alone: the nested VAT at weight 0 (its eps at its default, unused)
        "lga": {**lga, **{f"vat.{k}": v for k, v in {**vat, "weight": 0.0, "eps": 6.0}.items()}},
        "lga_vat": {**lga, **{f"vat.{k}": v for k, v in vat.items()}},
    }[method]


@pytest.mark.parametrize("family", ["cifar", "svhn"])
@pytest.mark.parametrize("method", METHODS)
def test_oliver_settings_match_protocols(method, family):
    s = oliver_settings(method, family)
    assert type(s) is METHODS[method].settings
    expected = expected_settings(method, family)
    assert set(expected) == set(settings_fields(type(s))), "a field of the settings is not checked"
    for name, value in expected.items():
        got = s
        for part in name.split("."):
            got = getattr(got, part)
        assert got == pytest.approx(value, rel=1e-12), (method, family, name)


def test_oliver_settings_overrides_and_errors():
    s = oliver_settings("lga_vat", "cifar")
    zero = oliver_settings("lga_vat", "cifar", vat=dataclasses.replace(s.vat, weight=0.0))
    assert zero.vat.weight == 0.0 and zero.vat.eps == 6.0 and zero.lr == s.lr
    assert oliver_settings("vat", "svhn", lr=1e-2).lr == 1e-2
    assert oliver_settings("vat", "svhn", lr=1e-2).eps == 1.0
    with pytest.raises(ConfigError):
        oliver_settings("fixmatch", "cifar")
    with pytest.raises(ConfigError):
        oliver_settings("vat", "imagenet")
    with pytest.raises(ConfigError):
        oliver_settings("vat", "cifar", lr=-1e-3)
    with pytest.raises(ConfigError):
        oliver_settings("mean_teacher", "cifar", ema=1.0)
    with pytest.raises(ConfigError, match="unknown method"):
        ssl.method("bogus")
    data = make_data()
    with pytest.raises(ConfigError, match="unknown method"):
        SSLRun("bogus", make_model(), SupervisedSettings(), protocol(), data, seed=0)
    with pytest.raises(ConfigError, match="MeanTeacherSettings"):  # another method's settings
        SSLRun("mean_teacher", make_model(), SupervisedSettings(), protocol(), data, seed=0)
    assert ssl.TITLES == {name: m.title for name, m in METHODS.items()}


def test_oliver_settings_unknown_override_is_a_config_error():
    with pytest.raises(ConfigError, match="weight"):
        oliver_settings("supervised", "cifar", weight=1.0)  # not a field of SupervisedSettings


# ---- 2. every method trains ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains(method):
    data = make_data(translate=2)
    model = make_model()
    before = params(model)
    out = train_ssl(model, method, oliver_settings(method, "cifar"), protocol(6, eval_every=3), data, seed=0)
    assert out["method"] == method and out["steps"] == 6
    assert math.isfinite(out["test_error"]) and 0 <= out["test_error"] <= 100
    assert math.isfinite(out["test_loss"]) and out["test_loss"] > 0
    assert math.isfinite(out["final_test_loss"])
    h = out["history"]
    assert h["step"] == [3, 6]
    assert len(h["val_error"]) == len(h["val_loss"]) == len(h["train_loss"]) == 2
    assert all(math.isfinite(v) for v in h["train_loss"] + h["val_loss"])
    assert out["best_step"] in (3, 6)
    assert out["best_val_error"] == min(h["val_error"])
    after = params(model)
    for name, b, a in zip([n for n, _ in model.named_parameters()], before, after):
        assert not torch.equal(a, b), f"{method}: parameter {name} did not move"


def test_lga_runs_record_their_diagnostics_and_the_summary_reads_them():
    """LGA's imputed labels (distance from the start, accuracy on the pool) at each evaluation, and the mean cosine
    of its gradients; other methods record none; the benchmark summary averages them over seeds."""
    from gradalign.experiments.lga.ssl_runs import _lga_diagnostics

    base = make_data(translate=2)
    data = dataclasses.replace(base, y_unlabeled=torch.randint(0, K, (len(base.x_unlabeled),)))
    runs = [
        train_ssl(make_model(seed), "lga", oliver_settings("lga", "cifar"), protocol(6, eval_every=3), data, seed)
        for seed in (0, 1)
    ]
    h = runs[0]["history"]
    assert len(h["imputed_moved"]) == len(h["imputed_accuracy"]) == len(h["alignment"]) == 2
    assert 0 < h["imputed_moved"][-1] <= 0.9 and 0 <= h["imputed_accuracy"][-1] <= 1
    assert -1 <= h["alignment"][-1] <= 1
    assert len(h["eps_dominated"]) == 2 and 0 <= h["eps_dominated"][-1] <= 1  # ε_norm > sqrt(EMA(v⁴)), at the step
    summary = _lga_diagnostics(runs)
    assert summary["eps_dominated"] == pytest.approx(sum(r["history"]["eps_dominated"][-1] for r in runs) / 2)
    assert summary["imputed_moved"] == pytest.approx(sum(r["history"]["imputed_moved"][-1] for r in runs) / 2)
    assert summary["alignment"] == pytest.approx(sum(sum(r["history"]["alignment"]) / 2 for r in runs) / 2)
    plain = train_ssl(make_model(), "supervised", oliver_settings("supervised", "cifar"), protocol(3), data, 0)
    assert "imputed_moved" not in plain["history"] and _lga_diagnostics([plain]) == {}


# ---- 3. Supervised: one step against a hand-written Adam step --------------------------------------------


def test_supervised_step_matches_manual_adam():
    data = make_data(translate=0)
    model = make_model()
    ref = copy.deepcopy(model)
    run = SSLRun("supervised", model, oliver_settings("supervised"), protocol(), data, seed=0)
    x_l, y_l, x_u, i_u = next_batches(run)
    out = run.step(1)

    optimizer = torch.optim.Adam(ref.parameters(), lr=3e-3, betas=(0.9, 0.999), eps=1e-8)
    loss = F.cross_entropy(ref(x_l), y_l, reduction="sum") / (B_L + B_U)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    assert float(out["loss_labeled"]) == pytest.approx(loss.item(), rel=1e-6)
    assert float(out["loss"]) == pytest.approx(loss.item(), rel=1e-6)
    assert float(out["loss_unlabeled"]) == 0.0
    for p, q in zip(model.parameters(), ref.parameters()):
        # Adam's step is nearly scale-free, so the gradients check the 1/(B_l + B_u) normalisation
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-6)
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, rtol=0, atol=1e-7, msg=name)


# ---- 4. Pseudo-Label's unlabeled loss by hand ---------------------------------------------------------


def test_pseudo_label_unlabeled_loss_by_hand():
    data = make_data(translate=0)
    model = make_model()
    ref = copy.deepcopy(model).train()
    sched = protocol(rampup_fraction=0.4)
    probe = SSLRun("pseudo_label", copy.deepcopy(model), oliver_settings("pseudo_label"), sched, data, seed=0)
    x_l, y_l, x_u, i_u = next_batches(probe)
    logits = ref(torch.cat([x_l, x_u]))  # BN batch statistics of the concatenated batch
    logits_u = logits[B_L:]
    confidence, target = logits_u.detach().softmax(-1).max(-1)
    threshold = float(confidence.median())  # some rows pass, some do not
    passing = confidence >= threshold
    assert 0 < int(passing.sum()) < B_U
    expected_u = F.cross_entropy(logits_u[passing], target[passing], reduction="sum") / (B_L + B_U)
    expected_l = F.cross_entropy(logits[:B_L], y_l, reduction="sum") / (B_L + B_U)
    ramp = sigmoid_rampup(1, sched.rampup_steps)
    assert 0 < ramp < 1 and ramp == sched.ramp(1)
    expected = expected_l + 1.0 * ramp * expected_u
    expected.backward()

    settings = oliver_settings("pseudo_label", "cifar", threshold=threshold)
    out = SSLRun("pseudo_label", model, settings, sched, data, seed=0).step(1)
    assert float(out["loss_unlabeled"]) == pytest.approx(expected_u.item(), rel=1e-5)
    assert float(out["loss_labeled"]) == pytest.approx(expected_l.item(), rel=1e-5)
    assert float(out["loss"]) == pytest.approx(expected.item(), rel=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):  # the pseudo-labels are constants
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-7)


# ---- 5. only the first clean pass moves BatchNorm running statistics --------------------------------------


@pytest.mark.parametrize("method", ["pseudo_label", "pi_model", "mean_teacher", "vat", "vat_entmin"])
def test_only_first_clean_pass_updates_bn_statistics(method):
    data = make_data(translate=0)
    model = make_model()
    ref = copy.deepcopy(model).train()
    run = SSLRun(method, model, oliver_settings(method, "cifar"), protocol(), data, seed=0)
    x_l, y_l, x_u, i_u = next_batches(run)
    with torch.no_grad():
        ref(torch.cat([x_l, x_u]))
    run.step(1)
    buffers = dict(model.named_buffers())
    assert any(name.endswith("running_mean") for name in buffers)
    for name, expected in ref.named_buffers():
        torch.testing.assert_close(buffers[name], expected, rtol=0, atol=1e-7, msg=f"{method}: {name}")
    if method == "mean_teacher":  # AveragedModel (use_buffers=False) copies the student's statistics
        for name, b in run.extra.module.named_buffers():
            assert torch.equal(b, buffers[name]), f"teacher {name}"


# ---- 6. Mean Teacher: the teacher is the EMA of the student's trajectory -------------------------------


def test_mean_teacher_is_ema_of_student():
    data = make_data(translate=2)
    model = make_model()
    run = SSLRun("mean_teacher", model, oliver_settings("mean_teacher", "cifar"), protocol(), data, seed=0)
    decay = 0.95
    ema = None
    for step in range(1, 5):
        run.step(step)
        student = params(model)
        # AveragedModel's first update copies the student; later ones average
        ema = student if ema is None else [decay * e + (1 - decay) * s for e, s in zip(ema, student)]
    teacher = params(run.extra.module)
    assert len(teacher) == len(ema)
    for t, e, s in zip(teacher, ema, student):
        torch.testing.assert_close(t, e, rtol=0, atol=1e-6)
    assert any(not torch.allclose(t, s, atol=1e-6) for t, s in zip(teacher, student))  # it lags


def test_ema_teacher_equals_torchs_averaged_model_bit_for_bit():
    """`EMATeacher` (no host-to-device copy of its counter, for CUDA) against torch's `AveragedModel` with the EMA
    function: parameters, batch-norm buffers and the state dict's keys, over updates of a changing student."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    from gradalign.methods.mean_teacher import EMATeacher

    torch.manual_seed(0)
    student = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten())
    ours, theirs = EMATeacher(student, 0.95), AveragedModel(student, multi_avg_fn=get_ema_multi_avg_fn(0.95))
    for _ in range(5):
        with torch.no_grad():
            for p in student.parameters():
                p.add_(torch.randn_like(p))
        student(torch.randn(8, 1, 6, 6))  # training mode: the batch-norm statistics move
        ours.update_parameters(student)
        theirs.update_parameters(student)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for key, value in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key
    assert ours.n_averaged.device.type == "cpu" and int(ours.n_averaged) == 5


# ---- 7. LGA + VAT with a zero VAT weight is LGA ----------------------------------------------------------


def _one_lga_step(name, settings, data, seed=0):
    model = make_model()
    run = SSLRun(name, model, settings, protocol(rampup_fraction=0.0), data, seed=seed)
    out = run.step(1)
    return model, run, out


def test_lga_vat_with_zero_weight_equals_lga():
    data = make_data(translate=0)  # identity augmentation: only the VAT direction draws from the generator
    lga_vat = oliver_settings("lga_vat", "cifar")
    m_lga, r_lga, o_lga = _one_lga_step("lga", oliver_settings("lga", "cifar"), data)
    m_zero, r_zero, o_zero = _one_lga_step(
        "lga_vat", oliver_settings("lga_vat", "cifar", vat=dataclasses.replace(lga_vat.vat, weight=0.0)), data
    )
    for (name, a), b in zip(m_lga.state_dict().items(), m_zero.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(r_lga.extra.w, r_zero.extra.w)
    assert r_lga.extra.w.abs().sum() > 0  # w moved
    assert torch.equal(o_lga["loss_unlabeled"], o_zero["loss_unlabeled"])

    # and the VAT gradient does reach θ when its weight is not 0 (w moves from the same gradients)
    m_vat, r_vat, _ = _one_lga_step("lga_vat", lga_vat, data)
    assert any(not torch.equal(a, b) for a, b in zip(params(m_lga), params(m_vat)))
    assert torch.equal(r_lga.extra.w, r_vat.extra.w)


# ---- 8. checkpoint and resume ----------------------------------------------------------------------------


class Interrupted(Exception):
    pass


def _run(method, data, monkeypatch, path=None, interrupt_at=None, **overrides):
    """train_ssl for 8 steps (evaluations every 2, checkpoints every 4); (model, result, the SSLRun it built)."""
    model = make_model(seed=3)
    sched = protocol(8, eval_every=2, checkpoint_every=4)
    runs = []
    init, step = SSLRun.__init__, SSLRun.step

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        runs.append(self)

    def interrupted_step(self, t):
        if t == interrupt_at:
            raise Interrupted(f"step {t}")
        return step(self, t)

    with monkeypatch.context() as patch:
        patch.setattr(SSLRun, "__init__", recording_init)
        patch.setattr(SSLRun, "step", interrupted_step)
        settings = oliver_settings(method, "cifar", **overrides)
        if interrupt_at is not None:
            with pytest.raises(Interrupted):
                train_ssl(model, method, settings, sched, data, seed=5, checkpoint=path)
            return None, None, runs[0]
        out = train_ssl(model, method, settings, sched, data, seed=5, checkpoint=path)
    return model, out, runs[0]


def _saved_step(path) -> int:
    header = json.loads(path.read_bytes().partition(b"\n")[0])
    return load_checkpoint(path, header["fingerprint"])["loop"]["step"]


@pytest.mark.parametrize("method", METHODS)
def test_resume_is_bit_identical(method, tmp_path, monkeypatch):
    # 16 unlabeled images, batches of 8: the rows of w are revisited every 2 steps, so w feeds back into θ
    data = make_data(translate=2, n_labeled=16, n_unlabeled=16)
    reference, ref_out, ref_run = _run(method, data, monkeypatch)
    path = tmp_path / "run.pt"
    _run(method, data, monkeypatch, path, interrupt_at=6)
    assert path.exists()
    assert _saved_step(path) == 4
    resumed, out, run = _run(method, data, monkeypatch, path)
    assert not path.exists()  # removed once the run is complete
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), f"{method}: {name} differs after resuming"
    # everything a run holds: model, optimizer moments, augmentation generator, index streams, the
    # method's own state (Mean Teacher's teacher, LGA's w and EMAs)
    assert_identical(run.state_dict(), ref_run.state_dict(), method)
    if method in ("mean_teacher", "lga", "lga_vat"):
        assert run.extra is not None and run.state_dict()["extra"]
    if method in ("lga", "lga_vat"):
        assert run.extra.step == ref_run.extra.step == 8
    assert out["history"] == ref_out["history"]
    assert out["history"]["step"] == [2, 4, 6, 8]
    for key in ("best_step", "best_val_error", "test_error", "test_loss", "final_test_error", "final_test_loss"):
        assert out[key] == ref_out[key], key
    assert out["train_seconds"] > 0


def test_checkpoint_of_another_run_is_set_aside_and_the_run_starts_fresh(tmp_path, monkeypatch):
    data = make_data(translate=2)
    path = tmp_path / "run.pt"
    _run("lga", data, monkeypatch, path, interrupt_at=6)
    before = path.read_bytes()
    with pytest.warns(CheckpointWarning, match="belongs to another run"):
        _run("lga", data, monkeypatch, path, lr=2e-3)
    (aside,) = tmp_path.glob("run.pt.other-*")
    assert aside.read_bytes() == before  # kept for the run it belongs to


# ---- 8b. the benchmark times the trainer's own steps ------------------------------------------------------


def test_lga_cost_benchmark_times_the_trainers_pseudo_label_and_lga_steps(monkeypatch):
    """`benchmarks.lga_step` times `SSLRun.step` of the methods the tables train with, not a copy of them.
    SSLRun looks its method up in METHODS, so a counting step function put there must be called."""
    from gradalign.benchmarks.lga_step import measure_lga_cost

    calls = {"pseudo_label": 0, "lga": 0}

    def counting(name):
        original = METHODS[name].step

        def step(run, ramp, *batch):
            assert isinstance(run, SSLRun) and run.name == name
            calls[name] += 1
            return original(run, ramp, *batch)

        return step

    for name in calls:
        monkeypatch.setitem(METHODS, name, dataclasses.replace(METHODS[name], step=counting(name)))
    result = measure_lga_cost("cpu", width=4, batch_size=8, n_unlabeled=100, image=8, warmup=1, repeats=1)
    assert calls["pseudo_label"] >= 2 and calls["lga"] >= 2  # warm-up and timed rounds
    assert result["median_ms"]["pl"] > 0 and result["median_ms"]["lga"] > 0


# ---- 9. too few labeled images ---------------------------------------------------------------------------


def test_too_few_images_raise_before_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the run was built before the check")

    monkeypatch.setattr(SSLRun, "__init__", forbidden)
    for data in (make_data(n_labeled=B_L - 1, n_unlabeled=32), make_data(n_labeled=4, n_unlabeled=B_U - 1)):
        model = make_model()
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(ConfigError):
            train_ssl(model, "supervised", oliver_settings("supervised"), protocol(4), data, seed=0)
        for name, t in model.state_dict().items():
            assert torch.equal(t, before[name])


# ---- 10. index streams -----------------------------------------------------------------------------------


def _draw(stream, k):
    return torch.cat([stream.next() for _ in range(k)])


def test_index_stream_passes_determinism_and_state():
    n, batch = 10, 3
    drawn = _draw(IndexStream(n, batch, seed=4), 10)  # 30 indices = three full passes
    for p in range(3):
        assert sorted(drawn[p * n : (p + 1) * n].tolist()) == list(range(n))
    assert torch.equal(drawn, _draw(IndexStream(n, batch, seed=4), 10))
    assert not torch.equal(drawn, _draw(IndexStream(n, batch, seed=5), 10))
    assert not torch.equal(drawn[:n], drawn[n : 2 * n])  # reshuffled every pass

    a = IndexStream(n, batch, seed=4)
    _draw(a, 4)  # mid-pass (position 2 of the second pass)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = IndexStream(n, batch, seed=99)
    b.load_state_dict(torch.load(buffer, weights_only=False))
    assert torch.equal(_draw(a, 7), _draw(b, 7))


def test_index_stream_round_trip_continues_the_sequence():
    n, batch = 10, 3
    full = _draw(IndexStream(n, batch, seed=4), 9)
    a = IndexStream(n, batch, seed=4)
    first = _draw(a, 4)
    b = IndexStream(n, batch, seed=123)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert torch.equal(torch.cat([first, _draw(b, 5)]), full)


# ---- 11. unlabeled pool subsets --------------------------------------------------------------------------


def test_subset_keeps_and_is_deterministic():
    indices = torch.arange(0, 200, 2)  # 100 even numbers
    keep = torch.tensor([4, 10, 50, 198])
    out = subset(indices, 30, seed=7, keep=keep)
    assert len(out) == 30
    assert torch.isin(keep, out).all()
    assert torch.isin(out, indices).all()
    assert len(torch.unique(out)) == 30
    assert torch.equal(out, out.sort().values)
    assert torch.equal(out, subset(indices, 30, seed=7, keep=keep))
    assert not torch.equal(out, subset(indices, 30, seed=8, keep=keep))
    plain = subset(indices, 12, seed=7)
    assert len(plain) == 12 and torch.isin(plain, indices).all() and len(torch.unique(plain)) == 12
    assert torch.equal(subset(indices, None, seed=7, keep=keep), indices)
    assert torch.equal(subset(indices, 100, seed=7, keep=keep), indices)
    with pytest.raises(ConfigError, match="asked for 500 images of 100; sizes are refused, not capped"):
        subset(indices, 500, seed=7, keep=keep)  # issue 25: never capped
    with pytest.raises(ConfigError):
        subset(indices, 3, seed=7, keep=keep)


# ---- 12. the shells trial --------------------------------------------------------------------------------


def test_shells_mlp_shape():
    model = relu_mlp(50, 128, 4, 5)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 4
    assert [(m.in_features, m.out_features) for m in linears] == [(50, 128), (128, 128), (128, 128), (128, 5)]
    assert sum(p.numel() for p in model.parameters()) == 50 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 5 + 5
    assert sum(p.numel() for p in model.parameters()) == 40_197


@pytest.mark.parametrize("method", ["supervised", "lga"])
def test_shells_trial_curves(method):
    data = make_shells(d=5, n_labeled=100, n_unlabeled=200, n_test=150, seed=0)
    s = ShellsTrialSettings(steps=20, batch=16, eval_every=10, hessian_points=100, lanczos_iters=5)
    curves = shells_trial(data, method, s, seed=0)
    assert curves["step"] == [0, 10]
    for key in ("alignment", "test_accuracy", "test_loss", "eigenvalue"):
        assert len(curves[key]) == 2, key
        assert all(math.isfinite(v) for v in curves[key]), key
    assert all(0.0 <= a <= 1.0 + 1e-6 for a in curves["alignment"])
    assert all(0.0 <= a <= 1.0 for a in curves["test_accuracy"])
    assert len(curves["final_test_accuracy"]) == 1
    if method == "lga":
        assert len(curves["imputed_accuracy"]) == 2
        assert all(0.0 <= a <= 1.0 for a in curves["imputed_accuracy"])
    else:
        assert "imputed_accuracy" not in curves
    with pytest.raises(ConfigError):
        shells_trial(data, "vat", s, seed=0)
