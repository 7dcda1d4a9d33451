"""The book's supervised reference (`gradalign.experiments.reference`): read from committed runs only, used only
when its runs finished learning, and the precondition *baseline sane* it decides, with passing and failing cases."""

from __future__ import annotations

import json

import pytest

from gradalign.experiments import reference
from gradalign.store.run_unit import RunCacheWarning, entry_path, write_entry
from gradalign.experiments.lga.ssl_runs import run_unit

FLAT = [30.0, 22.0, 20.0, 19.9, 19.9, 19.9, 19.9, 19.9, 19.9, 19.9]  # finished learning
FALLING = [30.0, 28.0, 26.0, 24.0, 22.0, 20.0, 18.0, 16.0, 14.0, 12.0]  # still improving


def _store(tmp_path, labels: int, test_error: float, history=FLAT, seeds=3):
    cfg = reference.config("cpu")
    for seed, unit in enumerate(reference._units(cfg, labels)[:seeds]):
        value = {
            "dataset": cfg.dataset,
            "test_error": test_error + seed * 0.1,
            "test_loss": 0.5,
            "best_val_error": history[-1],
            "labeled_error": 0.0,
            "train_seconds": 1.0,
            "history": {"val_error": list(history)},
        }
        write_entry(tmp_path / "runs", unit, value, {"hardware": "test"})
    return cfg


def test_lookup_reads_a_finished_reference(tmp_path):
    _store(tmp_path, 1000, 15.0)
    assert reference.lookup("fashion_mnist", 1000, tmp_path) == pytest.approx(15.1)
    s = reference.summary(reference.config("cpu"), 1000, tmp_path)
    assert s["seeds"] == 3 and s["finished"]["passed"]
    assert s["test_error_se"] == pytest.approx(0.1 / 3**0.5 * 1.0, rel=1e-6)


def test_lookup_refuses_a_reference_still_learning(tmp_path):
    _store(tmp_path, 1000, 15.0, history=FALLING)
    assert not reference.summary(reference.config("cpu"), 1000, tmp_path)["finished"]["passed"]
    assert reference.lookup("fashion_mnist", 1000, tmp_path) is None


def test_lookup_needs_every_seed_and_a_measured_label_count(tmp_path):
    _store(tmp_path, 1000, 15.0, seeds=2)
    assert reference.lookup("fashion_mnist", 1000, tmp_path) is None
    assert reference.lookup("fashion_mnist", 500, tmp_path) is None  # not a label count the reference measures
    assert reference.lookup("no_such_set", 1000, tmp_path) is None


def test_an_edited_reference_run_is_reported_and_not_used(tmp_path):
    cfg = _store(tmp_path, 1000, 15.0)
    unit = reference._units(cfg, 1000)[0]
    path = entry_path(tmp_path / "runs", unit.kind, unit.key)
    doc = json.loads(path.read_text())
    doc["value"]["test_error"] = 1.0
    path.write_text(json.dumps(doc))
    with pytest.warns(RunCacheWarning, match="digest"):
        assert reference.lookup("fashion_mnist", 1000, tmp_path) is None


def test_baseline_check_passes_near_and_fails_far_from_the_reference(tmp_path):
    _store(tmp_path, 250, 25.0)
    _store(tmp_path, 4000, 12.0)
    near = reference.baseline_check("fashion_mnist", {250: 27.0, 4000: 14.0}, "test error", tmp_path)
    assert near["passed"], near
    far = reference.baseline_check("fashion_mnist", {250: 27.0, 4000: 12.1 + reference.TOLERANCE + 0.5}, "e", tmp_path)
    assert not far["passed"] and far["value"]["4,000 labels"]["gap"] > reference.TOLERANCE


def test_baseline_check_without_a_reference_or_a_baseline_is_not_recorded(tmp_path):
    missing = reference.baseline_check("fashion_mnist", {1000: 20.0}, "test error", tmp_path)
    assert not missing["passed"] and "not measured" in missing["value"]["1,000 labels"]["reference"]
    _store(tmp_path, 4000, 12.0, history=FALLING)
    learning = reference.baseline_check("fashion_mnist", {4000: 12.0}, "test error", tmp_path)
    assert (
        not learning["passed"]
        and "still learning (0 of 3 runs finished)" in learning["value"]["4,000 labels"]["reference"]
    )
    assert not reference.baseline_check("fashion_mnist", {}, "test error", tmp_path)["passed"]


def test_the_longer_label_counts_run_longer_on_the_fast_path():
    cfg = reference.config("cpu")
    assert reference.for_labels(cfg, 250) == cfg
    longer = reference.for_labels(cfg, 4000)
    assert longer.protocol.steps == reference.LONGER[4000] > cfg.protocol.steps and longer.fast.bf16
    assert reference._units(cfg, 4000)[0].key != run_unit(cfg, cfg.dataset, "cifar", "supervised", 4000, 0).key
    assert reference.for_labels(reference.config("smoke"), 4000) == reference.config("smoke")


def test_bad_preset_is_one_line_error():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        reference.config("huge")


def test_measure_at_smoke_trains_and_commits_nothing(tmp_path):
    (row,) = reference.measure("smoke", results=tmp_path)
    assert row["labels"] == 50 and row["seeds"] == 1 and 0 <= row["test_error"] <= 100
    assert len(row["history"][0]["val_error"]) == 2  # 10 steps, an evaluation every 5
    assert not (tmp_path / "runs").exists()
