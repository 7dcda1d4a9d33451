"""A loaded record's checks are derived again from its metrics (issue 48, item 6): a record whose checks were forged
to "passed", its verdict and digest recomputed to match (which anyone can do), is reported and recomputed on load,
like an edited one. Copies of committed records (read, never written) in a temporary store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradalign.records.results import RecordWarning, ResultStore, record_digest
from gradalign.experiments.verdict import derive_verdict

ROOT = Path(__file__).resolve().parents[1]


def _committed(element_id: str) -> Path:
    part = element_id.split(".")[0]
    return next((ROOT / "results" / part / element_id).glob("cpu-*.json"))


def _forge(record: dict, change) -> dict:
    """`change(record)` applied, then the verdict derived from the changed checks and the digest recomputed."""
    record = json.loads(json.dumps(record))
    change(record)
    record["verdict"] = derive_verdict(record["checks"], record["scope"], record["preconditions"], record["evidence"])
    record.pop("digest")
    record["digest"] = record_digest(record)
    return record


def _all_passed(record: dict) -> None:
    for key in ("checks", "preconditions"):
        for check in record[key].values():
            check.update(passed=True, within_noise=False)
            check.pop("budget_unstable", None)


def _preconditions_met(record: dict) -> None:
    for check in record["preconditions"].values():
        check["passed"] = True


def _fig1_measured_half(record: dict) -> None:
    record["checks"]["converges_to_1"]["value"] = 0.5


def _fig1_metrics_edited(record: dict) -> None:
    record["metrics"]["c_final"] = [0.5 for _ in record["metrics"]["c_final"]]


def _fig1_starts_elsewhere(record: dict) -> None:
    for curve in record["curves"]["c"]:
        curve[0] = 0.25  # the check still says 0: only the check derived from the curves can tell


def _load(tmp_path: Path, element_id: str, record: dict):
    store = ResultStore(tmp_path / "results")
    path = store.path(record["id"], record["preset"], record["config_hash"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return store.load(record["id"], record["preset"], record["config_hash"], record["experiment_version"])


@pytest.mark.parametrize("element_id", ["lga.fig1", "lga.fig5", "sgr.fig2", "metagrad.tab1", "isoloss.eq1-2"])
def test_a_committed_record_loads_unchanged(element_id, tmp_path, recwarn):
    record = json.loads(_committed(element_id).read_text())
    assert _load(tmp_path, element_id, record) == record
    assert not [w for w in recwarn if issubclass(w.category, RecordWarning)]


FORGERIES = {
    "lga.fig5 every check passed": ("lga.fig5", _all_passed, "do not follow from its metrics"),
    "lga.fig6 every check passed": ("lga.fig6", _all_passed, "do not follow from its metrics"),
    "sgr.fig2 every check passed": ("sgr.fig2", _all_passed, "do not follow from its metrics"),
    "metagrad.tab1 every check passed": ("metagrad.tab1", _all_passed, "do not follow from its metrics"),
    "lga.fig1 converges with 0.5": ("lga.fig1", _fig1_measured_half, "measured 0.5, rule < 0.01"),
    "lga.fig1 metrics edited": ("lga.fig1", _fig1_metrics_edited, "'converges_to_1' is stored passed"),
    "lga.fig1 curves edited": ("lga.fig1", _fig1_starts_elsewhere, "'starts_at_0' is stored passed"),
    "lga.fig5 preconditions met": ("lga.fig5", _preconditions_met, "precondition"),
    "lga.fig6 preconditions met": ("lga.fig6", _preconditions_met, "precondition"),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_a_forged_record_is_reported_and_recomputed(name, tmp_path):
    element_id, change, fragment = FORGERIES[name]
    original = json.loads(_committed(element_id).read_text())
    forged = _forge(original, change)
    if change is _all_passed:
        assert original["verdict"]["status"] != "reproduced" and forged["verdict"]["status"] == "reproduced"
    with pytest.warns(RecordWarning, match=fragment):
        assert _load(tmp_path, element_id, forged) is None  # the caller recomputes it


def test_a_forged_record_is_not_counted_by_the_reports(tmp_path):
    forged = _forge(json.loads(_committed("lga.fig5").read_text()), _all_passed)
    store = ResultStore(tmp_path / "results")
    path = store.path(forged["id"], forged["preset"], forged["config_hash"])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(forged))
    shutil.copy(_committed("lga.fig1"), path.parent.parent / "x.json")  # not its folder: ignored
    assert list(store.records("lga.fig5")) == []


def test_a_passed_check_that_breaks_its_own_rule_is_found():
    from gradalign.records.recheck import _breaks_own_rule

    assert _breaks_own_rule({"passed": True, "value": 0.5, "rule": "max |c - 1| < 1e-2 at the last step"})
    assert _breaks_own_rule({"passed": True, "value": 0.3, "rule": "accuracy > 0.4 (chance 0.2)"})
    assert _breaks_own_rule({"passed": True, "value": 2.0, "rule": "ratio <= 1, M exact"})
    assert not _breaks_own_rule({"passed": False, "value": 0.5, "rule": "x < 1e-2"})  # failed: nothing claimed
    assert not _breaks_own_rule({"passed": True, "value": 1.0, "rule": "G' ≤ G with α²β < 1/(4M²L₀)"})  # no bound
    assert not _breaks_own_rule({"passed": True, "value": [1, 2], "rule": "x < 1"})  # not a number
