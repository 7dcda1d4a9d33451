"""A damaged or edited record is never used: each kind of damage is reported with its reason and recomputed.

Also: saving is strict (no NaN or Infinity, named by path, the old file kept) and atomic (no temporary
file left), and stored files are readable by everyone (0644).
"""

import json
import math
import os
import stat
import warnings

import pytest
from test_store import count_runs

from gradalign.records import runner
from gradalign.store.atomic import NonFiniteValueError, dumps_strict, loads_strict, write_atomically
from gradalign.records.results import RecordWarning, record_digest
from gradalign.experiments.verdict import derive_verdict

ELEMENT = "lga.fig2"  # cheap at smoke, three checks, metrics and curves


def _stored(store):
    record = runner.run(ELEMENT, "smoke", store=store)
    return record, store.path(ELEMENT, "smoke", record["config_hash"])


def _load(store, record):
    return store.load(ELEMENT, "smoke", record["config_hash"], record["experiment_version"])


def _edit(change, forge_digest=True):
    """Damage that edits the parsed record; with forge_digest the digest is recomputed, as a careful forger would."""

    def damage(path):
        record = json.loads(path.read_text())
        change(record)
        if forge_digest:
            record["digest"] = record_digest(record)
        path.write_text(json.dumps(record))

    return damage


def _literal(*keys, text):
    """Damage that writes `text` (NaN, Infinity, 1e999: what json.dumps or a hand edit may leave) at keys."""
    placeholder = "@@literal@@"
    edit = _edit(_set(*keys, value=placeholder), forge_digest=False)

    def damage(path):
        edit(path)
        path.write_text(path.read_text().replace(f'"{placeholder}"', text))

    return damage


def _text(change):
    return lambda path: path.write_text(change(path.read_text()))


def _set(*keys, value):
    def change(record):
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value

    return change


def _edit_verdict(record):
    record["verdict"] = {
        "status": "not reproduced",
        "failed": ["radii_follow_eq14"],
        "unmet": [],
        "within_noise": [],
        "unstable": [],
    }


DAMAGE = {  # name: (damage(path), the reason the warning must give)
    "truncated": (_text(lambda text: text[: len(text) // 2]), "is truncated"),
    "invalid json": (_text(lambda text: text.replace('"metrics":', '"metrics"=', 1)), "is not valid JSON"),
    "empty": (_text(lambda text: ""), "is empty"),
    "binary garbage": (lambda path: path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))), "is not UTF-8 text"),
    "not an object": (_text(lambda text: f"[{text}]"), r"is not a JSON object \(a list\)"),
    "key missing": (_edit(lambda r: r.pop("provenance")), "lacks provenance"),
    "old schema": (_edit(_set("schema", value=1)), "has schema 1, expected 3"),
    "wrong key": (_edit(_set("config_hash", value="0" * 12)), "has config_hash '000000000000', expected"),
    "config changed": (_edit(_set("config", "n", value=499)), "has a config that does not hash to its key"),
    "metric edited": (
        _edit(_set("metrics", "class_counts", 0, value=100), forge_digest=False),
        "has a digest that does not match its content",
    ),
    "verdict edited": (
        _edit(_edit_verdict, forge_digest=False),
        r"does not follow from its checks "
        r"\(stored: not reproduced, failing radii_follow_eq14; derived: reproduced\)",
    ),
    "verdict and digest forged": (_edit(_edit_verdict), "has a verdict that does not follow from its checks"),
    "NaN": (
        _literal("metrics", "points_near_boundaries", 0, text="NaN"),
        r"holds NaN at metrics\.points_near_boundaries\[0\]",
    ),
    "-Infinity": (
        _literal("metrics", "class_counts", 2, text="-Infinity"),
        r"holds -Infinity at metrics\.class_counts\[2\]",
    ),
    "overflow": (_literal("curves", "x", 3, 1, text="1e999"), r"holds 1e999 at curves\.x\[3\]\[1\]"),
    "malformed checks": (_edit(_set("checks", "classes_balanced", "passed", value="yes")), "malformed checks entry"),
    "unknown scope": (_edit(_set("scope", value="full")), "has scope 'full', expected one of exact, reduced"),
    "wrong part": (_edit(_set("part", value="sgr")), "has part 'sgr', expected 'lga'"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_damaged_record_is_reported_and_recomputed(store, monkeypatch, name):
    damage, reason = DAMAGE[name]
    record, path = _stored(store)
    damage(path)
    with pytest.warns(RecordWarning, match=reason) as caught:
        assert _load(store, record) is None
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"ignoring stored record {path}: ") and message.endswith("; it will be recomputed")
    assert "\n" not in message

    calls = count_runs(monkeypatch, ELEMENT)
    with pytest.warns(RecordWarning, match=reason):
        again = runner.run(ELEMENT, "smoke", store=store)
    assert len(calls) == 1
    assert again["metrics"] == json.loads(json.dumps(record["metrics"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten file is good: no warning
        assert _load(store, record) == json.loads(json.dumps(again))
    assert len(calls) == 1


@pytest.mark.parametrize("name", DAMAGE)
def test_reports_skip_damaged_records_silently(store, name):
    record, path = _stored(store)
    other = runner.run(ELEMENT, "cpu", store=store)
    assert sorted(r["preset"] for r in store.records(ELEMENT)) == ["cpu", "smoke"]
    DAMAGE[name][0](path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["digest"] for r in store.records(ELEMENT)] == [other["digest"]]


def test_reports_skip_a_record_filed_under_another_id(store):
    record, path = _stored(store)
    elsewhere = store.path("lga.fig1", "smoke", record["config_hash"])
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_bytes(path.read_bytes())
    assert list(store.records("lga.fig1")) == [] and len(list(store.records(ELEMENT))) == 1


def test_save_refuses_non_finite_numbers_and_keeps_the_old_file(store):
    record, path = _stored(store)
    before, digest = path.read_bytes(), record["digest"]
    record["metrics"]["table"] = {"lga": {"test_loss": math.nan}}
    with pytest.raises(NonFiniteValueError, match=r"non-finite number at metrics\.table\.lga\.test_loss") as err:
        store.save(record)
    assert "\n" not in str(err.value)
    del record["metrics"]["table"]
    record["curves"]["x"][3][1] = math.inf
    with pytest.raises(NonFiniteValueError, match=r"at curves\.x\[3\]\[1\]"):
        store.save(record)
    assert path.read_bytes() == before and record["digest"] == digest
    assert not list(path.parent.glob("*.tmp"))


def test_failed_checks_in_any_order_load_back(store):
    """Stored checks come back key-sorted; a verdict listing its failed checks in the outcome's order still matches."""
    record, _ = _stored(store)
    failing = {"z_last": False, "a_first": False}
    record["checks"].update(
        {name: {"passed": passed, "value": 0, "rule": "r", "claim": "c"} for name, passed in failing.items()}
    )
    record["verdict"] = derive_verdict(record["checks"], record["scope"])
    record["verdict"]["failed"] = ["z_last", "a_first"]  # listed out of order
    store.save(record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _load(store, record)["verdict"]["failed"] == ["z_last", "a_first"]
    record["verdict"]["failed"] = ["a_first"]
    store.path(ELEMENT, "smoke", record["config_hash"]).write_text(json.dumps(record, sort_keys=True))
    reason = r"\(stored: not reproduced, failing a_first; derived: not reproduced, failing a_first, z_last\)"
    with pytest.warns(RecordWarning, match=reason):
        assert _load(store, record) is None


def test_save_refuses_a_verdict_that_does_not_follow_from_the_checks(store):
    record, path = _stored(store)
    before = path.read_bytes()
    _edit_verdict(record)
    with pytest.raises(ValueError, match="refusing to save record 'lga.fig2': it has a verdict that does not follow"):
        store.save(record)
    assert path.read_bytes() == before


def test_stored_files_are_readable_by_everyone(store):
    _, path = _stored(store)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "deep" / "file.json"
    write_atomically(path, lambda handle: handle.write("old"))

    def half_then_fail(handle):
        handle.write('{"half": ')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, half_then_fail)
    assert path.read_text() == "old"
    assert os.listdir(path.parent) == ["file.json"]


def test_strict_json_names_the_non_finite_value():
    assert dumps_strict({"a": [1.5, {"b": 2}]}) == json.dumps({"a": [1.5, {"b": 2}]})
    with pytest.raises(NonFiniteValueError, match=r"at a\[1\]\.b:"):
        dumps_strict({"a": [1.5, {"b": -math.inf}]})
    with pytest.raises(NonFiniteValueError, match="at the top level"):
        dumps_strict(math.nan)
    loop = {"a": [1.5]}
    loop["a"].append(loop)
    with pytest.raises(ValueError, match="Circular reference") as refused:
        dumps_strict(loop)
    assert not isinstance(refused.value, NonFiniteValueError)  # json's own error, not a made-up path
    assert loads_strict('{"a": [1.5, -2e300]}') == {"a": [1.5, -2e300]}
    for constant in ("NaN", "Infinity", "-Infinity", "1e400"):
        with pytest.raises(NonFiniteValueError, match=rf"holds {constant} at a\[1\]"):
            loads_strict(f'{{"a": [0, {constant}]}}')
