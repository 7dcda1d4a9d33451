"""Table 7 without BatchNorm (`sgr.tab7nobn`): the VGG's two inits, the rate choice and the two claim checks, each
fed a case where it must fail."""

from __future__ import annotations

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.experiments.sgr.vgg_without_bn import NEAR_CHANCE, choose_rates, no_bn_checks
from gradalign.models.vgg_deep import vgg_deep
from gradalign.methods.local import LocalSettings
from gradalign.training.local import LocalRunSpec, SGRProtocol

CHANCE = 10.0


def row(lam: float) -> str:
    """A row label of `lambda_table` (no-break spaces keep it on one line)."""
    return f"λ\u00a0=\u00a0{lam:g}"


def _last_conv_std(init: str, depth: int = 57) -> float:
    torch.manual_seed(0)
    model = vgg_deep(depth, 10, 1, 0.125, batch_norm=False, init=init)
    x = torch.randn(64, 1, 28, 28)
    with torch.no_grad():
        for unit in model.layers:
            x = unit(x)
    return x.std().item()


def test_the_fan_in_init_keeps_the_signal_of_a_plain_vgg_12_and_torchvisions_shrinks_it():
    """He et al.'s fan-in init keeps a fifth of the input's spread through VGG-12's 10 ReLU convs; torchvision's
    fan-out init loses 8 times more wherever a stage widens (our VGG-12 without BN stayed at chance with it). At
    VGG-57 on 28-pixel images both vanish: stage 5 runs on 1-pixel maps (stage 4 on 3-pixel ones), where a 3x3
    conv sees one ninth of its fan-in (`analysis.signal_at_init`; the collapse the no-BN reading tests)."""
    assert _last_conv_std("fan_in", 12) > 0.1
    assert _last_conv_std("torchvision", 12) < 0.05
    assert _last_conv_std("fan_in", 57) < 1e-3


def test_an_unknown_init_is_refused_before_any_compute():
    with pytest.raises(ConfigError, match="init must be one of"):
        vgg_deep(12, init="xavier")
    with pytest.raises(ConfigError, match="vgg_init"):
        LocalRunSpec(network="vgg12", vgg_init="xavier").validate()


def test_the_default_init_keeps_every_stored_run_key():
    assert "vgg_init" not in LocalRunSpec().to_dict()
    assert LocalRunSpec(vgg_init="fan_in").to_dict()["vgg_init"] == "fan_in"


def test_each_depth_takes_its_best_rate_and_a_depth_at_chance_takes_the_shallowest_depths():
    sweep = {12: {0.003: 80.0, 0.01: 88.0, 0.03: 85.0}, 37: {0.003: 70.0, 0.01: 60.0, 0.03: 11.0}}
    sweep[57] = {0.003: CHANCE + 1, 0.01: CHANCE, 0.03: CHANCE + NEAR_CHANCE - 0.1}
    assert choose_rates(sweep, CHANCE) == {12: 0.01, 37: 0.003, 57: 0.01}
    sweep[57][0.03] = CHANCE + NEAR_CHANCE + 0.1  # it left chance at one rate: its own best
    assert choose_rates(sweep, CHANCE)[57] == 0.03


def test_the_claim_passes_when_global_bp_collapses_and_sgr_trains_the_deepest():
    sweep = {12: {0.01: 88.0, 0.03: 86.0}, 57: {0.01: 11.3, 0.03: 11.3}}
    checks = no_bn_checks(sweep, sgr_deep=80.0, chance=CHANCE)
    assert checks["global_bp_collapses_without_bn"]["passed"] and checks["sgr_trains_deepest_without_bn"]["passed"]


def test_global_bp_training_the_deepest_fails_the_collapse_check():
    sweep = {12: {0.01: 88.0, 0.03: 86.0}, 57: {0.01: 11.3, 0.03: 70.0}}  # one rate trains it
    assert not no_bn_checks(sweep, sgr_deep=80.0, chance=CHANCE)["global_bp_collapses_without_bn"]["passed"]


def test_sgr_at_chance_fails_the_stability_check():
    sweep = {12: {0.01: 88.0, 0.03: 86.0}, 57: {0.01: 11.3, 0.03: 11.3}}
    assert not no_bn_checks(sweep, sgr_deep=11.0, chance=CHANCE)["sgr_trains_deepest_without_bn"]["passed"]


def test_a_grid_of_one_rate_or_a_second_data_set_is_refused():
    from gradalign.experiments import get

    exp = get("sgr.tab7nobn")
    with pytest.raises(ConfigError, match="lrs"):
        exp.resolve("smoke", {"lrs": [0.01]})
    with pytest.raises(ConfigError, match="datasets"):
        exp.resolve("smoke", {"datasets": ["fashion_mnist", "mnist"]})


def test_a_local_arm_that_diverges_trains_at_the_next_lower_rate_and_at_every_rate_counts_at_chance(monkeypatch):
    from gradalign.errors import DivergenceError
    from gradalign.experiments import get
    from gradalign.experiments.sgr import vgg_without_bn

    cfg = get("sgr.tab7nobn").resolve("smoke", {"lrs": [0.003, 0.01, 0.03]})
    job = ("vgg17", "sgr", 5, "fashion_mnist")
    run = {"final_test_acc": 70.0, "diverged": None, "history": {"test_acc": [60.0, 70.0]}}
    run |= {"train_seconds": 1.0, "epoch_seconds": [0.5, 0.5], "epochs_done": 2}
    tried = []

    def fake_group(at, jobs, device):
        tried.append(at.protocol.lr)
        if at.protocol.lr > 0.005:
            raise DivergenceError("diverged at step 50")
        return {jobs[0]: [run]}

    monkeypatch.setattr(vgg_without_bn, "run_group", fake_group)
    runs, arm = vgg_without_bn.deepest_arm(cfg, job, 0.03, CHANCE, "cpu")
    assert tried == [0.03, 0.01, 0.003] and arm["lr"] == 0.003 and arm["mean"] == 70.0
    assert [d["lr"] for d in arm["diverged_at"]] == [0.03, 0.01]
    runs, arm = vgg_without_bn.deepest_arm(cfg, job, 0.001 * 5, CHANCE, "cpu")  # below every diverging rate
    assert arm["lr"] == 0.003
    monkeypatch.setattr(vgg_without_bn, "run_group", lambda at, jobs, device: fake_group(at.at_rate(1.0), jobs, device))
    runs, arm = vgg_without_bn.deepest_arm(cfg, job, 0.03, CHANCE, "cpu")
    assert runs == [] and arm["lr"] is None and arm["mean"] == CHANCE and arm["diverged"] == cfg.seeds


def test_images_are_padded_centred_with_black_and_a_smaller_size_is_refused():
    from gradalign.training.local_data import pad_images

    images = torch.full((2, 1, 28, 28), 200, dtype=torch.uint8)
    padded = pad_images(images, 32)
    assert padded.shape == (2, 1, 32, 32) and padded.dtype == torch.uint8
    assert torch.equal(padded[..., 2:30, 2:30], images) and int(padded.sum()) == int(images.sum())
    assert pad_images(torch.ones(1, 1, 3, 3), 6)[0, 0].nonzero().min(0).values.tolist() == [1, 1]  # odd: extra below
    with pytest.raises(ConfigError, match="pad_to=20 is smaller than the 28x28 images"):
        pad_images(images, 20)


def test_padding_keeps_every_stored_run_key_and_is_for_a_vgg_only():
    from gradalign.experiments import get

    assert "pad_to" not in LocalRunSpec().to_dict()
    one = LocalSettings(method="global_bp", modules=1)
    assert LocalRunSpec(network="vgg12", method=one, pad_to=32).to_dict()["pad_to"] == 32
    with pytest.raises(ConfigError, match="pad_to"):
        LocalRunSpec(network="resnet32", pad_to=32).validate()
    with pytest.raises(ConfigError, match="pad_to is for a VGG without InfoPro heads"):  # its heads read 28 px
        LocalRunSpec(
            network="vgg12", method=LocalSettings(method="sgr", modules=5, head="infopro"), pad_to=32
        ).validate()
    study = get("sgr.tab7nobn")
    spec = study.resolve("cpu", {"pad_to": 32}).spec("vgg57", "sgr", 55, "fashion_mnist", 0)
    assert spec.pad_to == 32 and study.resolve("cpu", {}).spec("vgg57", "sgr", 55, "fashion_mnist", 0).pad_to == 0
    with pytest.raises(ConfigError, match="pad_to"):
        study.resolve("cpu", {"pad_to": 20})


def test_a_reading_of_lambda_keys_sgr_alone_and_reuses_the_other_arms_runs():
    """Global BP and layer-wise training never read λ (`methods.local`): their specs carry `UNUSED_LAM` at any λ
    of the study, so `--set lam=1` trains SGR alone; SGR's own key moves with λ; at the presets' λ nothing moves."""
    from gradalign.experiments import get
    from gradalign.experiments.sgr.vgg_without_bn import UNUSED_LAM

    study = get("sgr.tab7nobn")
    at = {lam: study.resolve("cpu", {"pad_to": 32, "lam": lam}) for lam in (1.0, UNUSED_LAM)}
    assert at[UNUSED_LAM].lam == study.resolve("cpu", {"pad_to": 32}).lam == UNUSED_LAM  # the presets' λ

    def key(lam: float, method: str, modules: int) -> dict:  # what a run's key digests
        return at[lam].spec("vgg57", method, modules, "fashion_mnist", 0).to_dict()

    assert key(1.0, "global_bp", 1) == key(UNUSED_LAM, "global_bp", 1)
    assert key(1.0, "layerwise", 55) == key(UNUSED_LAM, "layerwise", 55)
    assert key(1.0, "sgr", 55) != key(UNUSED_LAM, "sgr", 55)
    assert at[1.0].spec("vgg57", "sgr", 55, "fashion_mnist", 0).method.lam == 1.0


def test_a_padded_run_sees_32_pixel_images_in_training_and_evaluation():
    from gradalign.training.local import train_local
    from gradalign.training.local_data import local_data

    data = local_data("fashion_mnist", 64, 32, "cpu", pad_to=32)
    assert data.images.shape[-2:] == (32, 32) and data.test_x.shape[-2:] == (32, 32)
    one = LocalSettings(method="global_bp", modules=1)
    spec = LocalRunSpec(
        network="vgg12",
        method=one,
        protocol=SGRProtocol(epochs=1, batch_size=32),
        width=0.125,
        n_train=64,
        n_test=32,
        pad_to=32,
        vgg_batch_norm=False,
        vgg_init="fan_in",
    )
    out = train_local(spec)
    assert out["complete"] and out["spec"]["pad_to"] == 32 and len(out["history"]["test_acc"]) == 1


def test_the_interim_sweep_reads_the_committed_runs_the_record_read(monkeypatch):
    """`book.nobn_sweep.committed_sweep` at the stored record's reading gives the record's own sweep, cell by cell;
    a run not committed reads "not trained yet"."""
    import json

    from gradalign.book.nobn_sweep import collapse_check, committed_sweep
    from gradalign.environment import project_root
    from gradalign.store import run_unit

    records = [json.loads(p.read_text()) for p in (project_root() / "results/sgr/sgr.tab7nobn").glob("cpu-*.json")]
    (record,) = [r for r in records if not r["config"].get("pad_to")]  # the 28-pixel reading (the padded one's too)
    table, done, total = committed_sweep({})
    assert (done, total) == (9, 9)
    expected = {
        f"VGG-{d}": {f"lr {lr}": f"{v:.1f}" for lr, v in by.items()} for d, by in record["metrics"]["sweep"].items()
    }
    assert table == expected
    assert collapse_check({}) == record["checks"]["global_bp_collapses_without_bn"]  # the record's own check
    monkeypatch.setattr(run_unit, "read_entry", lambda folder, u: None)  # nothing committed
    table, done, _ = committed_sweep({"pad_to": 32})
    assert collapse_check({}) is None
    assert done == 0 and {cell for row in table.values() for cell in row.values()} == {"not trained yet"}


def _nobn_record(best_bp: float, lw: float, sgr: float, seeds: int, pad_to: int | None = 32, **arm) -> dict:
    """A `sgr.tab7nobn` record: global BP's best at VGG-57 over the grid `best_bp` (its mean over seeds 1 point
    higher, so that a sentence quoting the mean instead of the checked value shows), the other deepest arms' means,
    its checks computed as the record computes them; `arm`: overrides of SGR's arm (its rate, its divergences)."""
    from gradalign.experiments.sgr.vgg_without_bn import no_bn_checks

    sweep = {12: {0.003: 80.0}, 57: {0.003: best_bp}}
    arms = {a: {"mean": v, "n": seeds, "lr": 0.003, "diverged": 0} for a, v in (("layerwise", lw), ("sgr", sgr))}
    arms["global_bp"] = {"mean": best_bp + 1.0, "n": seeds, "lr": 0.003, "diverged": 0}
    arms["sgr"].update(arm)
    unmet = [] if seeds >= 3 else ["enough_seeds"]
    config = {"lam": 100.0, "reduction": "mean", "datasets": ["fashion_mnist"]} | ({"pad_to": pad_to} if pad_to else {})
    return {
        "config": config,
        "metrics": {"chance": 10.0, "deepest": {"depth": 57, "arms": arms}},
        "checks": no_bn_checks(sweep, sgr, 10.0),  # chance 10 %
        "preconditions": {"enough_seeds": {"claim": "enough seeds to decide a difference", "passed": seeds >= 3}},
        "verdict": {"status": "inconclusive" if unmet else "reproduced", "unmet": unmet},
    }


def test_the_padded_readings_sentence_names_each_half_and_lambda_only_where_layerwise_trains():
    """`book.nobn_sweep.reading`: the record's two checks in words with the numbers they read, and SGR's λ named as
    the leading alternative only where layer-wise training (SGR at λ = 0) trained at SGR's rate and lies
    `TERM_MARGIN` points above it. The failing cases: layer-wise at chance too, too small a margin, SGR at another
    rate or diverged (no λ sentence); a record that meets both halves at 3 seeds (no inconclusive sentence)."""
    from gradalign.book.nobn_sweep import TERM_MARGIN, reading

    text = reading(_nobn_record(66.5, 42.1, 11.3, 1))
    assert "32-pixel images (1 seed," in text and "best over the rate grid 66.5 %" in text and "mark 45.0 %" in text
    assert "does not collapse" in text and "against the second half" in text and "held this seed of SGR" in text
    assert "leading alternative for SGR's half is its λ, which the study takes from `sgr.lam7`" in text
    assert text.endswith("The record is inconclusive (not met: enough seeds to decide a difference).")
    native = reading(_nobn_record(11.3, 11.3, 11.3, 1, pad_to=None))
    assert "28-pixel images" in native and "leading alternative" not in native
    for other in ({"lr": 0.001}, {"lr": None}, {"diverged": 1}):  # SGR at another rate, or diverged
        assert "leading alternative" not in reading(_nobn_record(66.5, 42.1, 11.3, 1, **other))
    assert "leading alternative" not in reading(_nobn_record(66.5, 11.3 + TERM_MARGIN - 0.1, 11.3, 1))
    held = reading(_nobn_record(20.0, 60.0, 70.0, 3))
    assert "3 seeds" in held and "it collapses" in held and "the second half holds" in held
    assert "leading alternative" not in held and held.endswith("The record is reproduced.")


def test_the_backlog_holds_the_padded_reading_at_other_lambdas_each_training_sgr_alone():
    """`backlog.PADDED_LAMBDAS` follow the padded reading in the GPU backlog, the compute page says what each is for,
    and with the padded reading's runs committed each of them leaves SGR's run at VGG-57 alone to train."""
    from gradalign.compute.backlog import BACKLOG, PADDED_LAMBDAS, PADDED_NO_BN
    from gradalign.compute.pilots import uncommitted
    from gradalign.compute.window_report import purpose
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    at = BACKLOG.index(PADDED_NO_BN)
    assert BACKLOG[at + 1 : at + 1 + len(PADDED_LAMBDAS)] == PADDED_LAMBDAS
    assert [item[2]["lam"] for item in PADDED_LAMBDAS] == [1.0, 10.0]
    for element_id, preset, overrides in PADDED_LAMBDAS:
        assert f"SGR at λ = {overrides['lam']:g} (mean)" in purpose(element_id, preset, overrides)
        left = uncommitted(units_of(element_id, get(element_id).resolve(preset, overrides)))
        assert [unit.label for unit in left] in ([], ["SGR K=55 vgg57 seed 0"])


def _padded_store(monkeypatch, accs: dict, own_passed: bool | None = None, terms: dict | None = None) -> dict:
    """Fake stored records of the padded reading at `cpu`: {λ: SGR's accuracy at VGG-57, None where every rate
    diverged}; a λ not in `accs` has no record. Each record's SGR check is its accuracy against the mark (the study's
    own λ = 100 passes where `own_passed` says so), its term ratio at VGG-57 `terms`' (else the committed record's).
    Returns the committed padded record (λ = 100)."""
    import copy

    from gradalign.records import runner

    padded, read = runner.stored_record("sgr.tab7nobn", "cpu", {"pad_to": 32}), runner.stored_record
    mark = padded["checks"]["global_bp_collapses_without_bn"]["value"]["halfway_to_chance"]

    def at(lam):
        rec = copy.deepcopy(padded)
        rec["config"]["lam"], acc = lam, accs[lam]
        rec["metrics"]["deepest"]["arms"]["sgr"].update(mean=acc, lr=None if acc is None else 0.003)
        passed = acc is not None and acc >= mark
        rec["checks"]["sgr_trains_deepest_without_bn"]["passed"] = own_passed if lam == 100.0 and own_passed else passed
        if terms and lam in terms:
            rec["preconditions"]["mechanism_active"]["value"]["d=57"]["ratio"] = terms[lam]
        return rec

    def fake(element_id, preset, overrides=None, store=None):
        if element_id != "sgr.tab7nobn" or preset != "cpu" or (overrides or {}).get("pad_to") != 32:
            return read(element_id, preset, overrides)
        lam = (overrides or {}).get("lam", 100.0)
        return at(lam) if lam in accs else None

    monkeypatch.setattr(runner, "stored_record", fake)
    return padded


def test_the_padded_gpu_reading_is_queued_at_the_lambda_validation_chose_once_every_lambda_is_stored(monkeypatch):
    """`backlog.padded_choice` and `full_backlog`: until every λ of the padded reading has a stored record, its `gpu`
    item keeps the study's λ; once they have, at the λ `choose_lambda` picks (a diverged λ never, a tie to the
    smaller), and the compute page says so; where the choice is the study's own λ, or SGR reached the mark there, the
    item is unchanged."""
    from gradalign.compute.backlog import PADDED_NO_BN, choose_lambda, full_backlog, padded_choice
    from gradalign.compute.window_report import purpose

    assert choose_lambda({1.0: 40.0, 10.0: None, 100.0: 40.0}) == 1.0 and choose_lambda({1.0: None}) is None
    assert choose_lambda({1.0: 40.0, 10.0: 45.5, 100.0: 11.3}) == 10.0
    gpu_item = (PADDED_NO_BN[0], "gpu", PADDED_NO_BN[2])
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: 42.0})  # λ = 10's record not stored yet
    assert padded_choice() is None and gpu_item in full_backlog()
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: 42.0, 10.0: None})
    assert padded_choice() == 1.0
    backlog = full_backlog()
    chosen = (PADDED_NO_BN[0], "gpu", {**PADDED_NO_BN[2], "lam": 1.0})
    assert chosen in backlog and gpu_item not in backlog
    assert "at the λ validation chose there (λ = 1, mean reduction)" in purpose(*chosen)
    _padded_store(monkeypatch, {100.0: 50.0, 1.0: 42.0, 10.0: 11.3})  # the study's own λ chosen: the item as it was
    assert padded_choice() == 100.0 and gpu_item in full_backlog()
    _padded_store(monkeypatch, {100.0: 40.0, 1.0: 42.0, 10.0: 11.3}, own_passed=True)  # SGR reached the mark at 10²
    assert padded_choice() == 100.0 and gpu_item in full_backlog()


def test_the_28_pixel_record_stored_before_pad_to_existed_is_found_and_the_padded_one_too():
    """`NoBNConfig.to_dict` leaves `pad_to` out of the record's key at its default, as it was before the field: the
    committed 28-pixel record keeps its key (the page showed "no record stored" while the field was in it)."""
    from gradalign.experiments import get
    from gradalign.records.runner import stored_record

    study = get("sgr.tab7nobn")
    assert "pad_to" not in study.resolve("cpu", {}).to_dict()
    assert study.resolve("cpu", {"pad_to": 32}).to_dict()["pad_to"] == 32
    plain, padded = stored_record("sgr.tab7nobn", "cpu"), stored_record("sgr.tab7nobn", "cpu", {"pad_to": 32})
    assert plain is not None and "pad_to" not in plain["config"]
    assert padded is not None and padded["config"]["pad_to"] == 32


def test_the_lambda_test_is_shown_where_sgr_stays_below_the_mark_with_each_lambdas_run_or_none(monkeypatch):
    """`nobn_sweep.lambda_test` before every λ's record is stored: a row per λ of `PADDED_LAMBDAS` with its committed
    run (labelled a run only, with its term) or that none is committed, and no choice; None where SGR reached the
    mark, at a λ reading's own record, or at 28 pixels (the backlog holds the padded reading only)."""
    import copy

    from gradalign.book.nobn_sweep import TERM_COLUMN, deepest_run, lambda_test
    from gradalign.experiments import get
    from gradalign.store import run_unit

    padded = _padded_store(monkeypatch, {100.0: 11.3})
    read = run_unit.read_entry
    committed = deepest_run(get("sgr.tab7nobn").resolve("cpu", {"pad_to": 32}), "SGR")  # λ = 100's run

    def sgr_runs(accs):
        def fake(folder, unit):  # SGR's VGG-57 runs at the λ of `accs` committed (λ = 100's, its accuracy replaced)
            if unit.label.startswith("SGR") and "vgg57" in unit.label:
                acc = accs.get(unit.spec["method"]["lam"])
                return None if acc is None else {"value": {**committed, "final_test_acc": acc}}
            return read(folder, unit)

        monkeypatch.setattr(run_unit, "read_entry", fake)

    sgr_runs({100.0: 11.3})  # no run at λ = 1 or 10 committed
    table = lambda_test(padded)["table"]
    assert list(table) == [row(1), row(10), row(100)] and table[row(1)]["SGR (%)"] == "no run committed"
    assert table[row(100)]["SGR (%)"] == "11.3" and table[row(100)]["reaches the mark (47.8\u00a0%)"] == "no"
    sgr_runs({1.0: 42.25})
    test = lambda_test(padded)
    one = test["table"][row(1)]  # the run's term: term_against_layerwise on the committed runs
    assert (
        one["SGR (%)"] == "42.2 (run only)"
        and one["rate"] == "0.003"
        and one["reaches the mark (47.8\u00a0%)"] == "no record yet"
    )
    assert one[TERM_COLUMN] != "—" and test["table"][row(10)]["SGR (%)"] == "no run committed"
    assert "VGG-57" in test["intro"] and "GPU backlog" in test["intro"] and test["answer"] == ""
    sgr_runs({1.0: 42.25, 10.0: 60.0})  # every λ's run committed, no record: no choice yet (a run may diverge)
    assert lambda_test(padded)["answer"] == ""
    passed = copy.deepcopy(padded)
    passed["checks"]["sgr_trains_deepest_without_bn"]["passed"] = True
    assert lambda_test(passed) is None
    at_one = copy.deepcopy(padded)
    at_one["config"]["lam"] = 1.0
    assert lambda_test(at_one) is None
    plain = copy.deepcopy(padded)
    plain["config"].pop("pad_to")
    assert lambda_test(plain) is None


def test_the_lambda_test_chooses_lambda_on_validation_once_every_lambda_is_stored_and_says_what_it_means(monkeypatch):
    """`nobn_sweep.lambda_test` once every λ of the padded reading has a record: validation's choice
    (`backlog.padded_choice`: a diverged λ never chosen), whether it reaches the record's mark (the record's check),
    and what that says of Table 7 with global BP's check beside it; failing cases: the choice below the mark, global BP
    above it (the committed record: 66.5 %), and global BP below it."""
    import copy

    from gradalign.book.nobn_sweep import lambda_test

    padded = _padded_store(monkeypatch, {100.0: 11.3, 1.0: 30.0, 10.0: None})
    mark = padded["checks"]["global_bp_collapses_without_bn"]["value"]["halfway_to_chance"]
    test = lambda_test(padded)
    assert test["table"][row(10)]["SGR (%)"] == "every rate diverged" and "record is stored" in test["intro"]
    assert "GPU backlog" not in test["intro"] and "Validation chooses λ = 1 (SGR 30.0 %)" in test["answer"]
    assert "still below the record's mark" in test["answer"] and "at any λ tried (1, 10, 100" in test["answer"]
    assert "does not collapse" in test["answer"]  # global BP trained VGG-57 at 32 pixels
    collapsed = copy.deepcopy(padded)
    collapsed["checks"]["global_bp_collapses_without_bn"]["passed"] = True
    collapsed["checks"]["global_bp_collapses_without_bn"]["value"]["best_at_deepest"] = mark - 10
    assert "is below the mark too: the first half holds" in lambda_test(collapsed)["answer"]
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: mark + 1, 10.0: mark + 3})
    answer = lambda_test(padded)["answer"]
    assert "Validation chooses λ = 10" in answer and "which reaches the record's mark" in answer
    assert "holds on this reading" not in answer and "does not collapse" in answer
    assert lambda_test(padded)["table"][row(10)]["reaches the mark (47.8\u00a0%)"] == "yes"
    assert "the claim as a whole holds on this reading, at a λ chosen here" in lambda_test(collapsed)["answer"]
    _padded_store(monkeypatch, {100.0: None, 1.0: None, 10.0: None})
    every = copy.deepcopy(padded)
    every["metrics"]["deepest"]["arms"]["sgr"]["lr"] = None
    assert lambda_test(every)["answer"] == "At each λ tried (1, 10, 100) every rate diverged."


def test_at_the_lambda_validation_chose_the_reading_no_longer_names_lambda_as_the_untested_alternative(monkeypatch):
    """`nobn_sweep.reading` at the padded record of the λ `padded_choice` picked (the backlog's `gpu` item, here faked
    at `cpu`): layer-wise training still lies 10 points above SGR, and the sentence says the term holds SGR back at
    every λ tried, not that λ was not chosen on this network; at the study's own λ it still says so."""
    import copy

    from gradalign.book.nobn_sweep import reading

    padded = _padded_store(monkeypatch, {100.0: 11.3, 1.0: 15.0, 10.0: 11.3})
    at_one = copy.deepcopy(padded)
    at_one["config"]["lam"] = 1.0
    at_one["metrics"]["deepest"]["arms"]["sgr"]["mean"] = 15.0
    text = reading(at_one)
    assert "the one validation chose on this network" in text and "not chosen on this network" not in text
    assert "not chosen on this network; the test below tries λ = 1 and 10 on it." in reading(padded)
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: 15.0})  # λ = 10's record not stored: no test to point to
    assert reading(padded).endswith(
        "not chosen on this network. The record is inconclusive (not met: enough seeds to decide a difference)."
    )


def test_sgrs_term_against_layerwise_is_its_last_term_over_layerwise_mismatch_mean_over_modules():
    """`nobn_sweep.term_against_layerwise`: SGR's term at the last epoch over the mean of layer-wise training's
    mismatch over modules 2 … K (module 1 has none); None without both runs, or where SGR's run diverged."""
    from gradalign.book.nobn_sweep import term_against_layerwise

    sgr = {"diverged": None, "history": {"sgr": [0.9, 0.2]}}
    layerwise = {"diverged": None, "history": {"sgr_by_module": [[None, 1.0, 1.0], [None, 0.3, 0.5]]}}
    assert term_against_layerwise(sgr, layerwise) == 0.5
    assert term_against_layerwise(None, layerwise) is None and term_against_layerwise(sgr, None) is None
    assert term_against_layerwise({**sgr, "diverged": {"step": 3}}, layerwise) is None
    gap = {"diverged": None, "history": {"sgr_by_module": [[None, 0.3, None]]}}  # a module's mismatch missing
    assert term_against_layerwise(sgr, gap) is None


def test_a_chosen_lambda_whose_term_barely_acts_is_not_credited_to_the_reconciliation(monkeypatch):
    """`nobn_sweep.lambda_test` and `mechanism_caveat`: where the chosen λ reaches the mark with a term above 0.5 ×
    layer-wise's, the answer says the runs do not show the reconciliation is what trains the VGG, naming the λ where
    the term falls that far and whether SGR reached the mark there, and layer-wise training's gap at its rate; no
    caveat where the chosen λ's term acts, or where it stays below the mark."""
    from gradalign.book.nobn_sweep import TERM_COLUMN, lambda_test, mechanism_caveat

    tried = {
        1.0: {"term": 0.956, "reached": True, "acc": 57.6, "lr": 0.003},
        10.0: {"term": 0.792, "reached": True, "acc": 54.5, "lr": 0.003},
        100.0: {"term": 0.418, "reached": False, "acc": 11.3, "lr": 0.003},
    }
    layerwise = {"mean": 42.1, "lr": 0.003}
    text = mechanism_caveat(tried, 1.0, layerwise, 57, 0.5)
    assert "0.956× layer-wise training's mismatch, above 0.5" in text
    assert "or below (λ = 100), SGR stays below the mark" in text and "trains VGG-57 here" in text
    assert "ended at 42.1 % at the same rate, 15.5 points below SGR" in text
    assert "at lr 0.01, 15.5 points below" in mechanism_caveat(tried, 1.0, {**layerwise, "lr": 0.01}, 57, 0.5)
    both = {**tried, 10.0: {**tried[10.0], "term": 0.4}, 100.0: {**tried[100.0], "term": 0.4}}
    assert "(λ = 10, 100), SGR reaches the mark at λ = 10 only" in mechanism_caveat(both, 1.0, layerwise, 57, 0.5)
    acting_trains = {**tried, 100.0: {**tried[100.0], "term": 0.4, "reached": True}}
    assert "SGR reaches the mark too" in mechanism_caveat(acting_trains, 1.0, layerwise, 57, 0.5)
    assert "At no λ tried does the term fall" in mechanism_caveat({1.0: tried[1.0]}, 1.0, layerwise, 57, 0.5)
    terms = {1.0: 0.956, 10.0: 0.792}
    padded = _padded_store(monkeypatch, {100.0: 11.3, 1.0: 57.6, 10.0: 54.5}, terms=terms)
    test = lambda_test(padded)
    assert test["table"][row(1)][TERM_COLUMN] == "0.956" and "Validation chooses λ = 1" in test["answer"]
    assert "do not show that the reconciliation is what trains VGG-57" in test["answer"]
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: 57.6, 10.0: 54.5}, terms={1.0: 0.3, 10.0: 0.792})  # the term acts
    assert "reconciliation" not in lambda_test(padded)["answer"]
    _padded_store(monkeypatch, {100.0: 11.3, 1.0: 20.0, 10.0: 15.0}, terms=terms)  # chosen below the mark: no caveat
    assert "reconciliation" not in lambda_test(padded)["answer"]


def test_the_lambda_table_says_what_each_row_is_in_words():
    """`nobn_sweep.lambda_table`: a stored record whose every rate diverged, a committed run that diverged, none
    committed, a run without a record (and its term), each in words; no raw float in a cell."""
    from gradalign.book.nobn_sweep import TERM_COLUMN, lambda_table

    none = {"acc": None, "lr": None, "reached": None, "term": None}
    rows = lambda_table(
        {
            1.0: {**none, "source": "record", "reached": False},
            10.0: {**none, "source": "run diverged"},
            30.0: {**none, "source": "none"},
            100.0: {"acc": 42.25, "lr": 0.003, "reached": None, "term": 0.41749, "source": "run only"},
        },
        47.75,
    )
    assert rows[row(1)]["SGR (%)"] == "every rate diverged" and rows[row(10)]["SGR (%)"] == "diverged (run only)"
    assert rows[row(30)]["SGR (%)"] == "no run committed" and rows[row(30)][TERM_COLUMN] == "—"
    assert rows[row(100)] == {
        "SGR (%)": "42.2 (run only)",
        "rate": "0.003",
        TERM_COLUMN: "0.417",
        "reaches the mark (47.8\u00a0%)": "no record yet",
    }
