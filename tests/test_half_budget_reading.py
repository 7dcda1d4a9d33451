"""`claim_budget.at_half_budget` reads what the experiment reads at B/2 (Table 4's tuning and the finals at the rates
it chooses), a tuning run kept as diverged scored as the experiment scores it, and trains nothing."""

import pytest

SMALL = {"n_train": 64, "validation": 64, "n_test": 32, "width": 0.01, "protocol.batch_size": 32, "seeds": 1}
SMALL |= {"protocol.epochs": 2, "lrs": [0.01, 0.1], "baseline_lrs": [0.01], "baselines": ["fa"]}


@pytest.fixture
def table4(tmp_path, monkeypatch):
    """A small Table 4 record at 2 epochs (never run: its config is what `at_half_budget` resolves) and every run its
    experiment reads at 1 epoch, committed under a fresh results store."""
    from gradalign.experiments import get
    from gradalign.store.run_unit import committed_runs

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GRADALIGN_PROGRESS", "0")
    exp = get("sgr.tab4")
    cfg = exp.resolve("smoke", SMALL)
    record = {"id": "sgr.tab4", "preset": "smoke", "config": cfg.to_dict(), "config_hash": cfg.digest(exp.version)}
    half = exp.resolve("smoke", {**SMALL, "protocol.epochs": 1})
    with committed_runs(tmp_path / "results" / "runs", write=True) as committed:
        out = exp.run(half, "cpu")
    return record, half, out, committed.read, tmp_path / "results"


def _no_training(monkeypatch):
    from gradalign.store import run_unit

    def refuse(*args, **kwargs):
        raise AssertionError("at_half_budget trained a run")

    monkeypatch.setattr(run_unit, "cached_run", refuse)


def _tuning_unit(half, method, lr):
    return half.unit(method, half.datasets[0], half.seed, lr, tune=True)


def _uncommit(root, unit):
    (root / "runs" / unit.kind / f"{unit.key}.json").unlink()


def test_it_reads_only_the_runs_the_experiment_reads_and_trains_nothing(table4, monkeypatch):
    from gradalign.experiments.claim_budget import at_half_budget
    from gradalign.experiments.units import units_of

    from gradalign.store.runcache import force_recompute

    record, half, out, read, _ = table4
    assert len(units_of("sgr.tab4", half)) > len(read)  # the finals at rates not chosen: never trained, not needed
    _no_training(monkeypatch)
    with force_recompute():  # --force recomputes committed runs elsewhere; a reading from them still trains nothing
        reading, budgets, runs = at_half_budget(record)
    assert budgets == ("2 epochs", "1 epochs") and runs == len(_own(record, read))
    assert 0 < runs < len(read)  # the tuning's runs are the full budget's: read, not counted as the half budget's
    assert reading["metrics"]["tuning"] == out["metrics"]["tuning"]


def _own(record, read):
    """The keys of the runs read at half the budget that the full budget does not share."""
    from gradalign.experiments.committed import units

    return {key for _, key in read} - {unit.key for unit in units(record)}


def test_with_only_runs_shared_with_the_full_budget_the_experiment_is_not_opened(table4, monkeypatch):
    from gradalign.experiments.claim_budget import at_half_budget
    from gradalign.store import run_unit

    record, half, _, read, root = table4
    for kind, key in read:
        if key in _own(record, read):
            (root / "runs" / kind / f"{key}.json").unlink()
    monkeypatch.setattr(run_unit, "committed_runs", lambda *a, **k: pytest.fail("opened the experiment"))
    assert at_half_budget(record) is None


def test_a_final_run_kept_as_diverged_moves_to_the_next_rate_as_the_experiment_does(table4, monkeypatch):
    from gradalign.experiments.claim_budget import at_half_budget
    from gradalign.experiments.diverged_runs import keep_diverged
    from gradalign.store.run_unit import committed_runs

    record, half, out, _, root = table4
    grid = out["metrics"]["tuning"]["fashion_mnist"]["layerwise"]
    chosen = grid["chosen"]
    other = 0.01 if chosen == 0.1 else 0.1
    d = half.datasets[0]
    with committed_runs(root / "runs", write=True):
        half.unit("layerwise", d, half.seed, other).run()  # the next rate's final run, committed
    final = half.unit("layerwise", d, half.seed, chosen)
    _uncommit(root, final)
    keep_diverged("sgr.tab4", final, "diverged at step 2: loss = nan", "cpu", root)
    _no_training(monkeypatch)
    reading, _, _ = at_half_budget(record)
    entry = reading["metrics"]["tuning"]["fashion_mnist"]["layerwise"]
    assert entry["final"] == other and set(entry["diverged"]) == {f"{chosen:g}"}


def test_a_reading_from_committed_runs_keeps_no_divergence(tmp_path):
    from types import SimpleNamespace

    from gradalign.experiments.diverged_runs import diverged, keep_diverged
    from gradalign.store.run_unit import committed_runs

    unit = SimpleNamespace(label="a run", key="0123456789abcdef")
    with committed_runs(tmp_path / "runs", write=False, missing=lambda u: None):
        kept = keep_diverged("sgr.tab4", unit, "diverged", "cpu", tmp_path)
    assert kept["why"] == "diverged" and diverged("sgr.tab4", tmp_path) == {}  # nothing written
    keep_diverged("sgr.tab4", unit, "diverged", "cpu", tmp_path)
    assert set(diverged("sgr.tab4", tmp_path)) == {unit.key}  # outside it, kept


def test_a_run_it_reads_that_is_neither_committed_nor_kept_leaves_no_reading(table4, monkeypatch):
    from gradalign.experiments.claim_budget import at_half_budget

    record, half, out, _, root = table4
    _uncommit(root, _tuning_unit(half, "layerwise", 0.01))
    _no_training(monkeypatch)
    assert at_half_budget(record) is None


def test_a_tuning_run_kept_as_diverged_is_read_as_its_divergence_and_scores_zero(table4, monkeypatch):
    from gradalign.experiments.claim_budget import at_half_budget
    from gradalign.experiments.diverged_runs import diverged, keep_diverged

    record, half, out, read, root = table4
    grid = out["metrics"]["tuning"]["fashion_mnist"]["layerwise"]
    other = 0.01 if grid["chosen"] == 0.1 else 0.1  # the rate tuning did not choose: no final run reads it
    unit = _tuning_unit(half, "layerwise", other)
    _uncommit(root, unit)
    keep_diverged("sgr.tab4", unit, "diverged at step 3: loss = nan", "cpu", root)
    assert unit.key in diverged("sgr.tab4", root)
    _no_training(monkeypatch)
    reading, _, runs = at_half_budget(record)
    assert runs == len(_own(record, read))  # a tuning run: shared with the full budget either way
    assert reading["metrics"]["tuning"]["fashion_mnist"]["layerwise"]["grid"][f"{other:g}"] == 0.0


def test_a_divergence_the_experiment_does_not_score_leaves_no_reading(table4, monkeypatch):
    """SGR diverging at every rate of its grid stops Table 4 (`_tuned_runs`): there is no reading at B/2."""
    from gradalign.experiments.claim_budget import at_half_budget
    from gradalign.experiments.diverged_runs import keep_diverged

    record, half, _, _, root = table4
    for lr in (0.01, 0.1):
        unit = _tuning_unit(half, "sgr", lr)
        _uncommit(root, unit)
        keep_diverged("sgr.tab4", unit, "diverged at step 1: loss = nan", "cpu", root)
    _no_training(monkeypatch)
    assert at_half_budget(record) is None
