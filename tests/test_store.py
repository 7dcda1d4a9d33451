import json
import os

import pytest

from gradalign.records import runner
from gradalign.experiments import EXPERIMENTS, check, outcome
from gradalign.records.results import SCHEMA, RecordWarning, ResultStore, record_digest
from gradalign.experiments.verdict import derive_verdict

ELEMENT = "sgr.tab8"  # Eq. 35's cost table: 0.2 s at smoke (lga.alg1 takes 2.5 s): the store is tested, not it
QUICK = {"draws": 2}


def count_runs(monkeypatch, element_id=ELEMENT):
    """Record every config the experiment `element_id` actually computes (shared with test_tampering)."""
    calls = []
    exp = EXPERIMENTS[element_id]
    original = exp.run

    def counting(cfg, device):
        calls.append(cfg)
        return original(cfg, device)

    monkeypatch.setitem(EXPERIMENTS, element_id, type(exp)(**{**exp.__dict__, "run": counting}))
    return calls


def test_save_is_atomic_and_loads_back(store):
    record = runner.run(ELEMENT, "smoke", QUICK, store=store)
    path = store.path(ELEMENT, "smoke", record["config_hash"])
    assert path.exists() and path.parent == store.root / "sgr" / ELEMENT
    assert not list(path.parent.glob("*.tmp"))
    loaded = store.load(ELEMENT, "smoke", record["config_hash"], record["experiment_version"])
    assert loaded == json.loads(json.dumps(record))
    assert loaded["schema"] == 3 and loaded["scope"] == "exact" and loaded["digest"] == record_digest(loaded)
    for key in ("hardware", "torch", "seeds", "wall_time_s", "date", "git_commit"):
        assert key in loaded["provenance"]


def test_failed_write_keeps_the_old_record(store, monkeypatch):
    record = runner.run(ELEMENT, "smoke", QUICK, store=store)
    path = store.path(ELEMENT, "smoke", record["config_hash"])
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    record["metrics"]["edited"] = 1
    with pytest.raises(OSError, match="disk full"):
        store.save(record)
    assert path.read_bytes() == before
    assert not list(path.parent.glob("*.tmp"))


def test_stored_record_is_reused(store, monkeypatch):
    calls = count_runs(monkeypatch)
    runner.run(ELEMENT, "smoke", QUICK, store=store)
    runner.run(ELEMENT, "smoke", QUICK, store=store)
    assert len(calls) == 1


@pytest.mark.parametrize("damage", ["truncate", "schema", "hash", "version", "config"])
def test_bad_record_is_reported_and_recomputed(store, monkeypatch, damage):
    record = runner.run(ELEMENT, "smoke", QUICK, store=store)
    path = store.path(ELEMENT, "smoke", record["config_hash"])
    text = path.read_text()
    bad = json.loads(text)
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    else:
        if damage == "schema":
            bad["schema"] = 99
        elif damage == "hash":
            bad["config_hash"] = "0" * 12
        elif damage == "version":
            bad["experiment_version"] = 0
        else:
            bad["config"]["m"] = 999
        path.write_text(json.dumps(bad))
    calls = count_runs(monkeypatch)
    with pytest.warns(RecordWarning, match="ignoring stored record"):
        again = runner.run(ELEMENT, "smoke", QUICK, store=store)
    assert len(calls) == 1
    assert again["config"] == record["config"]
    assert json.loads(path.read_text())["schema"] == SCHEMA == 3  # rewritten


def test_auto_prefers_the_largest_stored_preset(store, monkeypatch):
    small = dict(EXPERIMENTS[ELEMENT].presets["smoke"])  # the cpu and gpu presets at the smoke scale: seconds
    assert runner.best_stored_preset(ELEMENT, small, store=store) is None
    runner.run(ELEMENT, "cpu", small, store=store)
    assert runner.best_stored_preset(ELEMENT, small, store=store) == "cpu"
    assert runner.best_stored_preset(ELEMENT, store=store) is None  # other settings: another record
    runner.run(ELEMENT, "gpu", small, store=store)
    assert runner.load_or_run(ELEMENT, "auto", small, store=store)["preset"] == "gpu"


def test_store_root_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "elsewhere"))
    assert ResultStore().root == tmp_path / "elsewhere"


def test_verdict_follows_from_the_checks_and_the_scope():
    good, bad = check(True, 1, "rule", "claim"), check(False, 2, "rule", "claim")
    none = {"unmet": [], "within_noise": [], "unstable": []}
    assert derive_verdict({"a": good}, "exact") == {"status": "reproduced", "failed": [], **none}
    assert derive_verdict({"a": good}, "reduced")["status"] == "reproduced"  # the scale is shown beside it
    assert derive_verdict({"a": good, "b": bad}, "exact") == {"status": "not reproduced", "failed": ["b"], **none}
    assert derive_verdict({"a": good, "b": bad}, "reduced") == {"status": "not reproduced", "failed": ["b"], **none}
    with pytest.raises(ValueError, match="scope must be one of exact, reduced; got 'full'"):
        derive_verdict({"a": good}, "full")
    result = outcome({"a": good, "b": bad}, {"m": 1}, scope="reduced")
    assert result == {
        "metrics": {"m": 1},
        "curves": {},
        "checks": {"a": good, "b": bad},
        "scope": "reduced",
        "verdict": {"status": "not reproduced", "failed": ["b"], "unmet": [], "within_noise": [], "unstable": []},
    }
