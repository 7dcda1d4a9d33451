"""SGR's BP-free training (sgr.tab4, fig2, fig4): the PlainMLP with fixed ETF heads, the analytic local gradient
of a block, the run spec, and the checks fed passing and failing cases."""

from __future__ import annotations

import pytest

from gradalign.experiments.sgr import validity
from gradalign.experiments.units import units_of
import torch
from torch.nn import functional as F

from gradalign.analysis.input_effect import input_effect, module_inputs
from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.sgr import bp_free, bp_free_figures
from gradalign.methods.local import LOCAL_METHODS, LocalSettings
from gradalign.models.etf import FixedETFHead
from gradalign.models.plain_mlp import PlainMLP, mlp_modules, parameter_count
from gradalign.training import local as tl


pytestmark = pytest.mark.usefixtures("one_thread")


def test_plain_mlp_parameters_follow_the_layer_list_and_its_heads_are_fixed():
    model = PlainMLP(4, 10, 784, 0.25)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(4, 784, 0.25) == 785 * 256 + 3 * 257 * 256
    assert isinstance(model.head, FixedETFHead) and not list(model.head.parameters())
    assert len(mlp_modules(model, 4)) == 4 and len(mlp_modules(model, 1)) == 1
    with pytest.raises(ValueError, match="splits into 1 or 4"):
        mlp_modules(model, 2)


def test_a_bp_free_block_gets_the_analytic_gradient_of_its_own_etf_loss():
    """Layer-wise step, module 2: dW = (δa)ᵀ x₁ with δa = ((softmax(x₂M) − Y) Mᵀ / B) ⊙ 1[a > 0], where x₁ is
    module 1's output before its step: nothing from module 3 reaches it (§3.3)."""
    torch.manual_seed(0)
    model = PlainMLP(3, 4, 12, 8 / 1024)
    modules = mlp_modules(model, 3)
    heads = [FixedETFHead(8, 4), FixedETFHead(8, 4), model.head]
    x, y = torch.randn(6, 1, 3, 4), torch.tensor([0, 1, 2, 3, 0, 1])
    with torch.no_grad():
        x1 = modules[0](x)
        lin = modules[1][0]
        a = lin(x1)
        x2 = torch.relu(a)
        delta = (torch.softmax(heads[1](x2), 1) - F.one_hot(y, 4)) @ heads[1].weight.T / len(y)
        expected = ((delta * (a > 0)).T @ x1, (delta * (a > 0)).sum(0))
    opts = [torch.optim.SGD(m.parameters(), lr=0.0) for m in modules]
    LOCAL_METHODS["layerwise"](modules, heads, opts, x, y, LocalSettings(method="layerwise", modules=3, head="etf"))
    assert torch.allclose(lin.weight.grad, expected[0], atol=1e-6)
    assert torch.allclose(lin.bias.grad, expected[1], atol=1e-6)


def test_bp_free_run_specs():
    cfg = EXPERIMENTS["sgr.tab4"].resolve("cpu")
    s = cfg.spec(cfg.network, "sgr", cfg.depth, "fashion_mnist", 0)
    assert (s.network, s.method.modules, s.method.head_kind, s.width) == ("mlp4", 4, "etf", 1.0)  # 1,024 units
    assert (s.protocol.crop_padding, s.protocol.flip, s.method.lam) == (0, False, 1000.0)  # no augmentation; calibrated
    fig = EXPERIMENTS["sgr.fig2"].resolve("cpu")  # the figures read Table 4's layer-wise and SGR runs
    assert {u.key for u in units_of("sgr.fig2", fig)} == {
        u.key for u in units_of("sgr.tab4", cfg) if u.label.startswith(("SGR", "Layer-wise"))
    }
    with pytest.raises(ConfigError, match="method.modules must be one of"):
        tl.LocalRunSpec(network="mlp4", method=LocalSettings(method="sgr", modules=3, head="etf"))
    with pytest.raises(ConfigError, match="network must be"):
        tl.LocalRunSpec(network="mlp0")


@pytest.mark.parametrize(
    ("override", "field"),
    [({"depth": 1}, "depth"), ({"methods": ["layerwise"]}, "methods"), ({"methods": ["sgr", "dgl"]}, "methods")],
)
def test_bad_settings_refused(override, field):
    with pytest.raises(ConfigError, match=field):
        EXPERIMENTS["sgr.tab4"].resolve("smoke", override)
    with pytest.raises(ConfigError, match="CIFAR-100's ETF"):
        EXPERIMENTS["sgr.tab4"].resolve("paper", {"width": 0.05})


def _s(mean):
    return {"mean": mean, "std": 1.0, "n": 3}


def test_table4_checks_against_the_baselines():
    ok = bp_free.table4_checks({"fa": _s(50.0), "pepita": _s(55.0), "sgr": _s(61.0)})
    assert set(ok) == {"sgr_beats_bp_free_baselines"} and ok["sgr_beats_bp_free_baselines"]["passed"]
    bad = bp_free.table4_checks({"fa": _s(50.0), "pepita": _s(62.0), "sgr": _s(61.0)})
    assert not bad["sgr_beats_bp_free_baselines"]["passed"]


def test_a_baseline_run_resumes_bitwise_and_learns(tmp_path):
    from gradalign.training.bp_free import RUN_VERSION, BPFreeRun, BPFreeRunSpec

    data = tl.LocalData(*_synthetic())
    spec = BPFreeRunSpec(method="dfa", protocol=tl.SGRProtocol(epochs=3, batch_size=16, lr=0.01), width=0.02)
    straight = tl.train_local(spec, "cpu", data=data, make_run=BPFreeRun, version=RUN_VERSION)
    tl.train_local(
        spec, "cpu", tmp_path / "c.pt", data=data, make_run=BPFreeRun, version=RUN_VERSION, max_epochs_this_call=1
    )
    resumed = tl.train_local(spec, "cpu", tmp_path / "c.pt", data=data, make_run=BPFreeRun, version=RUN_VERSION)
    assert resumed["history"] == straight["history"] and straight["complete"]
    assert straight["history"]["train_loss"][-1] < straight["history"]["train_loss"][0]


def _synthetic(n: int = 64, n_test: int = 32):
    """Random 28 x 28 images whose label is their brightest quadrant: learnable in a few steps."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 100, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 4, (n,), generator=g)
    for i, q in enumerate(labels.tolist()):
        images[i, 0, (q // 2) * 14 : (q // 2 + 1) * 14, (q % 2) * 14 : (q % 2 + 1) * 14] += 120
    test = images[:n_test].float() / 255
    return images, labels, (test - 0.3) / 0.3, labels[:n_test], (0.3,), (0.3,)


def test_table4_checks():
    """Beyond 2 SE of the difference (std 1 over 3 seeds each: 2 SE = 1.63 points)."""
    ok = bp_free.table4_checks({"layerwise": _s(58.0), "reforward": _s(57.0), "sgr": _s(61.0)})
    assert all(c["passed"] for c in ok.values()) and set(ok) == {"sgr_beats_layerwise", "sgr_beats_reforward"}
    bad = bp_free.table4_checks({"layerwise": _s(58.0), "reforward": _s(62.0), "sgr": _s(61.0)})
    assert bad["sgr_beats_layerwise"]["passed"] and not bad["sgr_beats_reforward"]["passed"]
    noise = bp_free.table4_checks({"layerwise": _s(60.0), "reforward": _s(57.0), "sgr": _s(61.0)})[
        "sgr_beats_layerwise"
    ]
    assert not noise["passed"] and noise["within_noise"]


def _curves(sgr, acc, loss=(1.0, 0.5), train_acc=(50.0, 60.0), spread=0.01):
    """Three seeds per curve (seed × epoch), around the given mean values."""

    def rows(values):
        return [[v + d * spread * max(1.0, abs(v)) for v in values] for d in (-1, 0, 1)]

    return {
        "sgr": rows(sgr),
        "test_acc": rows(acc),
        "train_loss": rows(loss),
        "test_loss": rows(loss),
        "train_acc": rows(train_acc),
    }


def test_figure2_checks():
    ok = bp_free_figures.figure2_checks(_curves((0.1, 0.1), (50, 60)), _curves((0.2, 0.3), (40, 55)))
    assert all(c["passed"] for c in ok.values())
    bad = bp_free_figures.figure2_checks(_curves((0.1, 0.4), (50, 50)), _curves((0.2, 0.3), (40, 59)))
    assert not bad["sgr_term_lower_with_sgr"]["passed"] and not bad["test_accuracy_higher_throughout"]["passed"]
    assert not bad["test_accuracy_higher_throughout"]["within_noise"]  # lower beyond noise
    close = bp_free_figures.figure2_checks(_curves((0.1, 0.1), (50, 59.5)), _curves((0.2, 0.3), (40, 59)))
    assert close["test_accuracy_higher_throughout"]["within_noise"]


def test_figure4_checks():
    fig4 = bp_free_figures.figure4_checks
    ok = fig4(_curves((0,), (0,), (1.0, 0.4), (50, 70)), _curves((0,), (0,), (1.0, 0.5), (50, 60)))
    assert all(c["passed"] for c in ok.values()) and len(ok) == 3
    bad = bp_free_figures.figure4_checks(
        _curves((0,), (0,), (1.0, 0.6), (50, 70)), _curves((0,), (0,), (1.0, 0.5), (50, 60))
    )
    assert not bad["final_train_loss_lower_with_sgr"]["passed"] and bad["final_train_acc_higher_with_sgr"]["passed"]
    one_seed = {k: v[:1] for k, v in _curves((0,), (0,), (1.0, 0.4), (50, 70)).items()}
    few = bp_free_figures.figure4_checks(one_seed, _curves((0,), (0,), (1.0, 0.5), (50, 60)))
    assert (
        not few["final_train_loss_lower_with_sgr"]["passed"] and few["final_train_loss_lower_with_sgr"]["within_noise"]
    )


def test_tab4_and_figures_share_their_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    monkeypatch.setenv("GRADALIGN_PROGRESS", "0")
    small = {"n_train": 64, "n_test": 32, "width": 0.01, "protocol.batch_size": 32, "protocol.epochs": 1}
    untuned = {**small, "lrs": [], "baseline_lrs": []}
    tab4 = EXPERIMENTS["sgr.tab4"].run(EXPERIMENTS["sgr.tab4"].resolve("smoke", untuned), "cpu")
    entries = sorted((tmp_path / "runs" / "sgr.local").glob("*.json"))
    assert len(entries) == 3 * 2  # three methods, two seeds
    assert len(list((tmp_path / "runs" / "sgr.bpfree").glob("*.json"))) == 4 * 2  # four baselines
    fig2 = EXPERIMENTS["sgr.fig2"].run(EXPERIMENTS["sgr.fig2"].resolve("smoke", {**small, "lrs": []}), "cpu")
    assert sorted((tmp_path / "runs" / "sgr.local").glob("*.json")) == entries  # nothing new trained
    assert fig2["curves"]["fashion_mnist/sgr"]["test_acc"] == tab4["curves"]["fashion_mnist/sgr"]["test_acc"]
    fig3 = EXPERIMENTS["sgr.fig3"].run(EXPERIMENTS["sgr.fig3"].resolve("smoke", {**small, "lrs": []}), "cpu")
    assert fig3["curves"] == fig2["curves"]  # Figure 3's preconditions read the same runs' curves
    record = {"id": "sgr.fig3", "config": {"datasets": ["fashion_mnist"]}, **fig3}
    assert set(validity.fig3(record)) == {"enough_seeds", "finished_learning", "mechanism_active"}
    assert validity.fig3_claims(record) == fig3["checks"]
    assert validity.fig3({**record, "curves": {}}) == {"evaluated": validity.not_evaluated()}  # an older record
    assert set(tab4["checks"]) == {"sgr_beats_layerwise", "sgr_beats_reforward", "sgr_beats_bp_free_baselines"}
    assert set(tab4["metrics"]["table"]["fashion_mnist"]) == {
        "fa",
        "dfa",
        "drtp",
        "pepita",
        "layerwise",
        "reforward",
        "sgr",
    }


def test_tab4_tunes_every_lr_on_held_out_training_images_then_runs_the_chosen(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    monkeypatch.setenv("GRADALIGN_PROGRESS", "0")
    small = {"n_train": 64, "validation": 64, "n_test": 32, "width": 0.01, "protocol.batch_size": 32, "seeds": 1}
    small |= {"protocol.epochs": 1, "lrs": [0.01, 0.1], "baseline_lrs": [0.01], "baselines": ["fa"]}
    cfg = EXPERIMENTS["sgr.tab4"].resolve("smoke", small)
    tuning = bp_free.tune(cfg, "cpu")["fashion_mnist"]
    assert set(tuning) == {"fa", "layerwise", "reforward", "sgr"}
    for m, entry in tuning.items():
        assert set(entry["grid"]) == ({"0.01"} if m == "fa" else {"0.01", "0.1"})
        assert entry["grid"][f"{entry['chosen']:g}"] == max(entry["grid"].values())
    tune_spec = cfg.local_spec("sgr", "fashion_mnist", 0, 0.1, tune=True)
    assert (tune_spec.validation, tune_spec.n_test, tune_spec.protocol.lr) == (64, 0, 0.1)
    final = cfg.local_spec("sgr", "fashion_mnist", 0, tuning["sgr"]["chosen"])
    assert (final.validation, final.protocol.lr) == (0, tuning["sgr"]["chosen"])
    record = EXPERIMENTS["sgr.tab4"].run(cfg, "cpu")
    stored = record["metrics"]["tuning"]["fashion_mnist"]
    assert {m: {k: e[k] for k in ("grid", "chosen")} for m, e in stored.items()} == {
        m: {k: e[k] for k in ("grid", "chosen")} for m, e in tuning.items()
    }  # read back, not retrained
    assert all(e["final"] == e["chosen"] for e in stored.values())  # nothing diverged
    table = record["metrics"]["table"]["fashion_mnist"]
    assert all(len(s["values"]) == s["n"] for s in table.values())  # per seed: the budget check pairs by seed


def test_tab4_refuses_a_training_set_that_leaves_no_validation():
    with pytest.raises(ConfigError, match="n_train"):
        EXPERIMENTS["sgr.tab4"].resolve("cpu", {"n_train": 0})
    with pytest.raises(ConfigError, match="n_train"):
        EXPERIMENTS["sgr.tab4"].resolve("cpu", {"n_train": 58000, "validation": 5000})


def test_input_effect_is_zero_without_updates_and_the_recomputed_loss_change_with_them():
    torch.manual_seed(0)
    model = PlainMLP(3, 4, 12, 8 / 1024)
    modules = mlp_modules(model, 3)
    heads = [FixedETFHead(8, 4), FixedETFHead(8, 4), model.head]
    x, y = torch.randn(16, 1, 3, 4), torch.arange(16) % 4
    settings = LocalSettings(method="layerwise", modules=3, head="etf")
    for lr, zero in ((0.0, True), (0.5, False)):
        opts = [torch.optim.SGD(m.parameters(), lr=lr) for m in modules]
        old = module_inputs(modules, x)
        LOCAL_METHODS["layerwise"](modules, heads, opts, x, y, settings)
        effect = input_effect(modules, heads, x, y, old)
        assert set(effect) == {"input_effect_2", "input_effect_3"}
        with torch.no_grad():
            new_input = modules[1](modules[0](x))
            by_hand = F.cross_entropy(heads[2](modules[2](new_input)), y) - F.cross_entropy(
                heads[2](modules[2](old[2])), y
            )
        assert float(effect["input_effect_3"]) == pytest.approx(float(by_hand), abs=1e-7)
        assert (float(effect["input_effect_3"]) == 0.0) is zero


def test_figure3_checks():
    grows = {"2": [0.01, -0.01], "3": [0.02, 0.03], "4": [0.05, 0.04]}
    helped = {"2": [0.0, 0.01], "3": [0.01, -0.01], "4": [-0.01, -0.02]}
    ok = bp_free_figures.figure3_checks({"layerwise": grows, "sgr": helped})
    assert all(c["passed"] for c in ok.values()) and len(ok) == 4
    shrinks = {"2": [0.05, -0.05], "3": [-0.01, -0.02], "4": [-0.001, 0.0]}
    bad = bp_free_figures.figure3_checks({"layerwise": shrinks, "sgr": grows})
    assert not any(c["passed"] for c in bad.values())


def test_table1_checks_and_the_measured_columns():
    from gradalign.experiments.sgr import attributes
    from gradalign.methods.bp_free import ATTRIBUTES

    declared = {name: vars(a) for name, a in ATTRIBUTES.items()}
    measured = attributes.measure(attributes.AttributesConfig(draws=1))
    assert measured["fa"] == {"weight_transport_free": "yes", "bp_free": "no"}
    assert measured["global_bp"] == {"weight_transport_free": "no", "bp_free": "no"}
    ok = attributes.table1_checks(declared, measured)
    assert all(c["passed"] for c in ok.values()) and len(ok) == 2
    wrong = {**declared, "fa": {**declared["fa"], "bp_free": "yes"}}  # a table that calls FA BP-free
    bad = attributes.table1_checks(wrong, measured)
    assert bad["weight_transport_free_as_in_table1"]["passed"] and not bad["bp_free_as_in_table1"]["passed"]


def test_a_final_run_that_diverges_at_the_tuned_lr_moves_to_the_next_rate(monkeypatch):
    from gradalign.errors import DivergenceError

    cfg = EXPERIMENTS["sgr.tab4"].resolve("smoke", {"baselines": ["fa"], "methods": ["sgr"]})

    class Fake:
        def __init__(self, lr):
            self.lr = lr

        def run(self):
            if self.lr == 0.1:
                raise DivergenceError("exploded; lower the learning rate")
            return {"lr": self.lr}

    monkeypatch.setattr(type(cfg), "unit", lambda self, m, d, s, lr=None, tune=False, device=None: Fake(lr))
    tuning = {"fashion_mnist": {"sgr": {"grid": {"0.03": 50.0, "0.1": 60.0}, "chosen": 0.1}}}
    runs = bp_free._tuned_runs(cfg, tuning, "cpu")
    entry = tuning["fashion_mnist"]["sgr"]
    assert entry["final"] == 0.03 and set(entry["diverged"]) == {"0.1"}
    assert runs[(cfg.network, "sgr", cfg.depth, "fashion_mnist")][0]["lr"] == 0.03
    assert runs[(cfg.network, "fa", cfg.depth, "fashion_mnist")][0]["lr"] is None  # untuned: its default rate
    tuning = {"fashion_mnist": {"sgr": {"grid": {"0.1": 60.0}, "chosen": 0.1}}}
    with pytest.raises(DivergenceError):  # no rate left: the command stops
        bp_free._tuned_runs(cfg, tuning, "cpu")


def test_a_baseline_diverging_at_every_rate_is_left_out_and_said_so():
    """`_tuned_runs`: the next rate by validation accuracy after a diverged final run, never a rate whose tuning run
    diverged; a baseline diverging at every rate tried is left out with `final` None, SGR's own method raises."""
    from types import SimpleNamespace

    from gradalign.errors import DivergenceError

    tried = []

    class Run:
        def __init__(self, method, lr):
            self.method, self.lr = method, lr

        def run(self):
            tried.append((self.method, self.lr))
            if self.method == "fa" or (self.method == "drtp" and self.lr == 1.0) or self.method == "sgr":
                raise DivergenceError(f"{self.method} diverged at step 5: loss = nan; lower the learning rate")
            return {"final_test_acc": 80.0}

    cfg = SimpleNamespace(
        seed=0, seeds=1, datasets=("d",), baselines=("fa", "drtp"), methods=(), network="mlp4", depth=4,
        unit=lambda m, d, s, lr, device=None: Run(m, lr),
    )  # fmt: skip
    tuning = {
        "d": {
            "fa": {"grid": {"0.001": 58.0, "0.003": 65.0, "0.01": 0.0}, "chosen": 0.003},
            "drtp": {"grid": {"0.3": 79.0, "1": 81.0, "3": 0.0}, "chosen": 1.0},
        }
    }
    runs = bp_free._tuned_runs(cfg, tuning, "cpu")
    assert tried == [("fa", 0.003), ("fa", 0.001), ("drtp", 1.0), ("drtp", 0.3)]  # 0.01 and 3: their tuning diverged
    assert tuning["d"]["fa"]["final"] is None and set(tuning["d"]["fa"]["diverged"]) == {"0.003", "0.001"}
    assert tuning["d"]["drtp"]["final"] == 0.3 and list(runs) == [("mlp4", "drtp", 4, "d")]
    own = SimpleNamespace(**{**vars(cfg), "baselines": (), "methods": ("sgr",)})
    with pytest.raises(DivergenceError):
        bp_free._tuned_runs(own, {"d": {"sgr": {"grid": {"0.01": 80.0}, "chosen": 0.01}}}, "cpu")


def test_an_arm_whose_final_rate_fell_to_the_grids_end_is_not_tuned():
    """Table 4's FA: tuning chose 0.003, its final run diverged there, the final runs trained at 0.001, the grid's
    smallest rate: lower rates were never tried, so the arm is not tuned inside its grid."""
    from gradalign.experiments.sgr import validity

    grid = {"0.001": 58.4, "0.003": 65.5, "0.01": 0.0}
    curves = {f"fashion_mnist/{m}": {"test_acc": [[1.0, 2.0]] * 3, "sgr": [[0.1, 0.1]] * 3} for m in ("fa", "sgr")}
    tuned = {"fa": {"grid": grid, "chosen": 0.003, "final": 0.003}, "sgr": {"grid": grid, "chosen": 0.003}}
    record = {"curves": curves, "config": {"datasets": ["fashion_mnist"]}, "metrics": {"tuning": {"fm": tuned}}}
    assert validity.bp_free(record)["tuned_inside_grid"]["passed"]
    tuned["fa"]["final"] = 0.001
    check = validity.bp_free(record)["tuned_inside_grid"]
    assert not check["passed"] and check["value"]["at_an_end"] == {"fa": "0.001"}
