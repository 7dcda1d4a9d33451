"""The semi-supervised training loop of LGA's benchmark (`training.ssl`): Oliver et al.'s settings,
each method's update against a hand computation, BatchNorm statistics, the Mean Teacher EMA, LGA + VAT,
bit-identical checkpoint/resume; plus the index streams, pool subsets and the shells trial.

Tiny synthetic data only (random 1×12×12 images, 10 classes) and a width-4 SmallCNN, on one thread."""

import copy
import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradalign.data.shells import make_shells
from gradalign.data.ssl_augment import SSLAugment
from gradalign.data.ssl_data import SSLData, subset
from gradalign.errors import ConfigError
from gradalign.methods.pseudo_label import rampup
from gradalign.models.small_cnn import SmallCNN
from gradalign.training.shells import TrialSettings, shells_mlp, shells_trial
from gradalign.training.ssl import (METHODS, MethodSettings, Schedule, SSLTrainer, oliver_settings,
                                    train_ssl)
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


def make_data(translate: int = 2, n_labeled: int = 16, n_unlabeled: int = 32, n_val: int = 20, n_test: int = 20,
              seed: int = 0) -> SSLData:
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


def batches(data: SSLData, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    i_l = torch.randperm(len(data.x_labeled), generator=g)[:B_L]
    i_u = torch.randperm(len(data.x_unlabeled), generator=g)[:B_U]
    return data.x_labeled[i_l], data.y_labeled[i_l], data.x_unlabeled[i_u], i_u


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def schedule(steps: int = 10, **kw) -> Schedule:
    return Schedule(steps=steps, batch_labeled=B_L, batch_unlabeled=B_U, **kw)


# ---- 1. Oliver et al.'s settings (PROTOCOLS.md, section LGA) ---------------------------------------------

EXPECTED = {  # method: (lr, weight, threshold, ema, entmin); vat_eps is checked per family below
    "supervised": (3e-3, 0.0, None, None, 0.0),
    "pseudo_label": (3e-4, 1.0, 0.95, None, 0.0),
    "pi_model": (3e-4, 20.0, None, None, 0.0),
    "mean_teacher": (4e-4, 8.0, None, 0.95, 0.0),
    "vat": (3e-3, 0.3, None, None, 0.0),
    "vat_entmin": (3e-3, 0.3, None, None, 0.1),
    "lga": (1e-3, 0.0, None, None, 0.0),
    "lga_vat": (1e-3, 0.3, None, None, 0.0),
}


@pytest.mark.parametrize("family", ["cifar", "svhn"])
@pytest.mark.parametrize("method", METHODS)
def test_oliver_settings_match_protocols(method, family):
    assert set(EXPECTED) == set(METHODS)
    s = oliver_settings(method, family)
    lr, weight, threshold, ema, entmin = EXPECTED[method]
    assert s.method == method
    assert s.lr == pytest.approx(lr, rel=1e-12)
    assert s.weight == pytest.approx(weight, rel=1e-12)
    assert s.entmin == pytest.approx(entmin, rel=1e-12)
    if threshold is not None:
        assert s.threshold == pytest.approx(threshold)
    if ema is not None:
        assert s.ema == pytest.approx(ema)
    if method in ("vat", "vat_entmin", "lga_vat"):
        assert s.vat_eps == (6.0 if family == "cifar" else 1.0)
        assert s.vat_xi == pytest.approx(1e-6)
    if method in ("lga", "lga_vat"):  # Figure 1's α_w = ε_norm = 1e-3
        assert s.lga_alpha_w == pytest.approx(1e-3) and s.lga_eps_norm == pytest.approx(1e-3)


def test_oliver_settings_overrides_and_errors():
    assert oliver_settings("lga_vat", "cifar", weight=0.0).weight == 0.0
    assert oliver_settings("vat", "svhn", lr=1e-2).lr == 1e-2
    assert oliver_settings("vat", "svhn", lr=1e-2).vat_eps == 1.0
    with pytest.raises(ConfigError):
        oliver_settings("fixmatch", "cifar")
    with pytest.raises(ConfigError):
        oliver_settings("vat", "imagenet")
    with pytest.raises(ConfigError):
        oliver_settings("vat", "cifar", lr=-1e-3)
    with pytest.raises(ConfigError):
        MethodSettings(method="bogus", lr=1e-3)
    with pytest.raises(ConfigError):
        oliver_settings("mean_teacher", "cifar", ema=1.0)


# ---- 2. every method trains ---------------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains(method):
    data = make_data(translate=2)
    model = make_model()
    before = params(model)
    out = train_ssl(model, oliver_settings(method, "cifar"), schedule(6, eval_every=3), data, seed=0)
    assert out["method"] == method and out["steps"] == 6
    assert math.isfinite(out["test_error"]) and 0 <= out["test_error"] <= 100
    assert math.isfinite(out["test_loss"]) and out["test_loss"] > 0
    assert math.isfinite(out["final_test_loss"])
    h = out["history"]
    assert h["step"] == [3, 6]
    assert len(h["val_error"]) == len(h["val_loss"]) == len(h["train_loss"]) == 2
    assert all(math.isfinite(v) for v in h["train_loss"] + h["val_loss"])
    assert out["best_step"] in (3, 6)
    after = params(model)
    for name, b, a in zip([n for n, _ in model.named_parameters()], before, after):
        assert not torch.equal(a, b), f"{method}: parameter {name} did not move"


# ---- 3. Supervised: one step against a hand-written Adam step --------------------------------------------

def test_supervised_step_matches_manual_adam():
    data = make_data(translate=0)
    model = make_model()
    ref = copy.deepcopy(model)
    x_l, y_l, x_u, i_u = batches(data)
    trainer = SSLTrainer(model, oliver_settings("supervised"), schedule(), data, seed=0)
    out = trainer.step(1, x_l, y_l, x_u, i_u)

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
    x_l, y_l, x_u, i_u = batches(data)
    logits = ref(torch.cat([x_l, x_u]))  # BN batch statistics of the concatenated batch
    logits_u = logits[B_L:]
    confidence, target = logits_u.detach().softmax(-1).max(-1)
    threshold = float(confidence.median())  # some rows pass, some do not
    passing = confidence >= threshold
    assert 0 < int(passing.sum()) < B_U
    expected_u = F.cross_entropy(logits_u[passing], target[passing], reduction="sum") / (B_L + B_U)
    expected_l = F.cross_entropy(logits[:B_L], y_l, reduction="sum") / (B_L + B_U)
    sched = schedule(rampup_fraction=0.4)
    ramp = rampup(1, sched.rampup_steps)
    assert 0 < ramp < 1
    expected = expected_l + 1.0 * ramp * expected_u
    expected.backward()

    settings = oliver_settings("pseudo_label", "cifar", threshold=threshold)
    out = SSLTrainer(model, settings, sched, data, seed=0).step(1, x_l, y_l, x_u, i_u)
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
    x_l, y_l, x_u, i_u = batches(data)
    with torch.no_grad():
        ref(torch.cat([x_l, x_u]))
    trainer = SSLTrainer(model, oliver_settings(method, "cifar"), schedule(), data, seed=0)
    trainer.step(1, x_l, y_l, x_u, i_u)
    buffers = dict(model.named_buffers())
    assert any(name.endswith("running_mean") for name in buffers)
    for name, expected in ref.named_buffers():
        torch.testing.assert_close(buffers[name], expected, rtol=0, atol=1e-7, msg=f"{method}: {name}")
    if trainer.teacher is not None:  # AveragedModel (use_buffers=False) copies the student's statistics
        for name, b in trainer.teacher.module.named_buffers():
            assert torch.equal(b, buffers[name]), f"teacher {name}"


# ---- 6. Mean Teacher: the teacher is the EMA of the student's trajectory -------------------------------

def test_mean_teacher_is_ema_of_student():
    data = make_data(translate=2)
    model = make_model()
    trainer = SSLTrainer(model, oliver_settings("mean_teacher", "cifar"), schedule(), data, seed=0)
    decay = 0.95
    ema = None
    for step in range(1, 5):
        x_l, y_l, x_u, i_u = batches(data, seed=step)
        trainer.step(step, x_l, y_l, x_u, i_u)
        student = params(model)
        # AveragedModel's first update copies the student; later ones average
        ema = student if ema is None else [decay * e + (1 - decay) * s for e, s in zip(ema, student)]
    teacher = params(trainer.teacher.module)
    assert len(teacher) == len(ema)
    for t, e, s in zip(teacher, ema, student):
        torch.testing.assert_close(t, e, rtol=0, atol=1e-6)
    assert any(not torch.allclose(t, s, atol=1e-6) for t, s in zip(teacher, student))  # it lags


# ---- 7. LGA + VAT with a zero VAT weight is LGA ----------------------------------------------------------

def _one_lga_step(settings, data, x_l, y_l, x_u, i_u, seed=0):
    model = make_model()
    trainer = SSLTrainer(model, settings, schedule(rampup_fraction=0.0), data, seed=seed)
    out = trainer.step(1, x_l, y_l, x_u, i_u)
    return model, trainer, out


def test_lga_vat_with_zero_weight_equals_lga():
    data = make_data(translate=0)  # identity augmentation: only the VAT direction draws from the generator
    x_l, y_l, x_u, i_u = batches(data)
    m_lga, t_lga, o_lga = _one_lga_step(oliver_settings("lga", "cifar"), data, x_l, y_l, x_u, i_u)
    m_zero, t_zero, o_zero = _one_lga_step(oliver_settings("lga_vat", "cifar", weight=0.0), data, x_l, y_l, x_u, i_u)
    for (name, a), b in zip(m_lga.state_dict().items(), m_zero.state_dict().values()):
        assert torch.equal(a, b), name
    assert torch.equal(t_lga.lga.w, t_zero.lga.w)
    assert t_lga.lga.w.abs().sum() > 0  # w moved
    assert torch.equal(o_lga["loss_unlabeled"], o_zero["loss_unlabeled"])

    # and the VAT gradient does reach θ when its weight is not 0 (w moves from the same gradients)
    m_vat, t_vat, _ = _one_lga_step(oliver_settings("lga_vat", "cifar"), data, x_l, y_l, x_u, i_u)
    assert any(not torch.equal(a, b) for a, b in zip(params(m_lga), params(m_vat)))
    assert torch.equal(t_lga.lga.w, t_vat.lga.w)


# ---- 8. checkpoint and resume ----------------------------------------------------------------------------

class Interrupted(Exception):
    pass


def _run(method, data, monkeypatch, path=None, interrupt_at=None, **overrides):
    """train_ssl for 8 steps; returns (model, result, the SSLTrainer it built)."""
    model = make_model(seed=3)
    sched = schedule(8, eval_every=2, checkpoint_every=4)
    trainers = []
    init, step = SSLTrainer.__init__, SSLTrainer.step

    def recording_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        trainers.append(self)

    def interrupted_step(self, i, *args):
        if i == interrupt_at:
            raise Interrupted(f"step {i}")
        return step(self, i, *args)

    with monkeypatch.context() as patch:
        patch.setattr(SSLTrainer, "__init__", recording_init)
        patch.setattr(SSLTrainer, "step", interrupted_step)
        settings = oliver_settings(method, "cifar", **overrides)
        if interrupt_at is not None:
            with pytest.raises(Interrupted):
                train_ssl(model, settings, sched, data, seed=5, checkpoint=path)
            return None, None, trainers[0]
        out = train_ssl(model, settings, sched, data, seed=5, checkpoint=path)
    return model, out, trainers[0]


def _trainer_state(trainer):
    state = {}
    if trainer.teacher is not None:
        state.update({"teacher." + k: v for k, v in trainer.teacher.state_dict().items()})
    if trainer.lga is not None:
        state.update({"w": trainer.lga.w.detach(), "ema_grad_labeled": trainer.lga.ema_grad_labeled,
                      "ema_v4": trainer.lga.ema_v4})
    return state


@pytest.mark.parametrize("method", ["mean_teacher", "lga"])
def test_resume_is_bit_identical(method, tmp_path, monkeypatch):
    # 16 unlabeled images, batches of 8: the rows of w are revisited every 2 steps, so w feeds back into θ
    data = make_data(translate=2, n_labeled=16, n_unlabeled=16)
    reference, ref_out, ref_trainer = _run(method, data, monkeypatch)
    path = tmp_path / "run.pt"
    _run(method, data, monkeypatch, path, interrupt_at=6)
    assert path.exists()
    assert torch.load(path, weights_only=False)["step"] == 4
    resumed, out, trainer = _run(method, data, monkeypatch, path)
    assert not path.exists()  # removed once the run is complete
    for (name, a), b in zip(reference.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), f"{method}: {name} differs after resuming"
    expected = _trainer_state(ref_trainer)
    assert expected
    for name, value in _trainer_state(trainer).items():
        assert torch.equal(value, expected[name]), f"{method}: {name} differs after resuming"
    if trainer.lga is not None:
        assert trainer.lga.step == ref_trainer.lga.step == 8
    assert out["history"] == ref_out["history"]
    assert out["history"]["step"] == [2, 4, 6, 8]
    assert (out["best_step"], out["test_error"], out["test_loss"]) == \
        (ref_out["best_step"], ref_out["test_error"], ref_out["test_loss"])


def test_checkpoint_of_another_run_is_refused(tmp_path, monkeypatch):
    data = make_data(translate=2)
    path = tmp_path / "run.pt"
    _run("lga", data, monkeypatch, path, interrupt_at=6)
    assert path.exists()
    with pytest.raises(ConfigError, match="another run"):
        _run("lga", data, monkeypatch, path, lr=2e-3)
    assert path.exists()


# ---- 9. too few labeled images ---------------------------------------------------------------------------

def test_too_few_images_raise_before_compute(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the trainer was built before the check")

    monkeypatch.setattr(SSLTrainer, "__init__", forbidden)
    for data in (make_data(n_labeled=B_L - 1, n_unlabeled=32), make_data(n_labeled=4, n_unlabeled=B_U - 1)):
        model = make_model()
        before = copy.deepcopy(model.state_dict())
        with pytest.raises(ConfigError):
            train_ssl(model, oliver_settings("supervised"), schedule(4), data, seed=0)
        for name, t in model.state_dict().items():
            assert torch.equal(t, before[name])


# ---- 10. index streams -----------------------------------------------------------------------------------

def _draw(stream, k):
    return torch.cat([stream.next() for _ in range(k)])


def test_index_stream_passes_determinism_and_state():
    n, batch = 10, 3
    drawn = _draw(IndexStream(n, batch, seed=4), 10)  # 30 indices = three full passes
    for p in range(3):
        assert sorted(drawn[p * n:(p + 1) * n].tolist()) == list(range(n))
    assert torch.equal(drawn, _draw(IndexStream(n, batch, seed=4), 10))
    assert not torch.equal(drawn, _draw(IndexStream(n, batch, seed=5), 10))
    assert not torch.equal(drawn[:n], drawn[n:2 * n])  # reshuffled every pass

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
    assert torch.equal(subset(indices, 500, seed=7, keep=keep), indices)
    with pytest.raises(ConfigError):
        subset(indices, 3, seed=7, keep=keep)


# ---- 12. the shells trial --------------------------------------------------------------------------------

def test_shells_mlp_shape():
    model = shells_mlp(50)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 4
    assert [(m.in_features, m.out_features) for m in linears] == [(50, 128), (128, 128), (128, 128), (128, 5)]
    assert sum(p.numel() for p in model.parameters()) == 50 * 128 + 128 + 2 * (128 * 128 + 128) + 128 * 5 + 5
    assert sum(p.numel() for p in model.parameters()) == 40_197


@pytest.mark.parametrize("method", ["supervised", "lga"])
def test_shells_trial_curves(method):
    data = make_shells(d=5, n_labeled=100, n_unlabeled=200, n_test=150, seed=0)
    s = TrialSettings(steps=20, batch=16, eval_every=10, hessian_points=100, lanczos_iters=5)
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
