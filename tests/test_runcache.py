"""The run cache: a shared sub-run is computed once, read back verified, and recomputed when damaged or forced."""

import json
import math
import stat
import warnings

import pytest

from gradalign.store.atomic import content_digest
from gradalign.errors import ConfigError
from gradalign.store.runcache import RunCacheWarning, cache_root, cached_run, force_recompute, run_key

KIND, SPEC, VERSION = "trial", {"lr": 0.1, "sizes": (3, 4), "method": "lga"}, 2


class Counter:
    """A computation that counts its calls and records the checkpoint path it was given."""

    def __init__(self):
        self.calls, self.checkpoints = 0, []

    def __call__(self, checkpoint):
        self.calls += 1
        self.checkpoints.append(checkpoint)
        assert not checkpoint.exists()  # a fresh computation never sees a stale checkpoint
        checkpoint.write_bytes(b"in progress")
        return {"loss": [1.0, 0.5], "accuracy": 0.75, "run": self.calls}


def _run(root, compute, spec=SPEC):
    return cached_run(KIND, spec, VERSION, compute, root=root)


def _entry(root, spec=SPEC):
    return root / "runs" / KIND / f"{run_key(KIND, json.loads(json.dumps(spec)), VERSION)}.json"


def test_computed_once_then_read_back(tmp_path):
    compute = Counter()
    first = _run(tmp_path, compute)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _run(tmp_path, compute) == first == {"loss": [1.0, 0.5], "accuracy": 0.75, "run": 1}
        assert _run(tmp_path, compute, {**SPEC, "sizes": [3, 4]}) == first  # a tuple is stored as a list
    assert compute.calls == 1
    entry = _entry(tmp_path)
    assert compute.checkpoints == [entry.with_suffix(".pt")] and not entry.with_suffix(".pt").exists()
    stored = json.loads(entry.read_text())
    assert stored["spec"] == {"lr": 0.1, "sizes": [3, 4], "method": "lga"} and stored["kind"] == KIND
    assert stored["digest"] == content_digest(stored) and stored["version"] == VERSION
    assert stat.S_IMODE(entry.stat().st_mode) == 0o644
    assert _run(tmp_path, compute, {**SPEC, "lr": 0.2})["run"] == 2  # another spec is another run


def _edit(change):
    def damage(path):
        entry = json.loads(path.read_text())
        change(entry)
        path.write_text(json.dumps(entry))

    return damage


def _forged(change):
    """An edit whose digest is recomputed, so that only the spec or key checks can catch it."""

    def edit(entry):
        change(entry)
        entry["digest"] = content_digest(entry)

    return _edit(edit)


def _text(change):
    return lambda path: path.write_text(change(path.read_text()))


DAMAGE = {  # name: (damage(path), the reason the warning must give)
    "value edited": (_edit(lambda e: e["value"].update(accuracy=0.99)), "has a digest that does not match"),
    "spec edited": (_forged(lambda e: e["spec"].update(lr=0.3)), "has a spec that does not hash to its key"),
    "truncated": (_text(lambda text: text[: len(text) // 2]), "is truncated"),
    "not JSON": (_text(lambda text: "checkpoint of " + text), "is not valid JSON"),
    "empty": (_text(lambda text: ""), "is empty"),
    "binary": (lambda path: path.write_bytes(bytes(range(128, 256))), "is not UTF-8 text"),
    "NaN": (_text(lambda text: text.replace('"accuracy": 0.75', '"accuracy": NaN')), r"holds NaN at value\.accuracy"),
    "wrong key": (_forged(lambda e: e.update(key="0" * 16)), "has key '0000000000000000', expected"),
    "wrong kind": (_forged(lambda e: e.update(kind="ssl")), "has kind 'ssl', expected 'trial'"),
    "wrong version": (_forged(lambda e: e.update(version=1)), "has version 1, expected 2"),
    "wrong schema": (_forged(lambda e: e.update(schema=0)), "has schema 0, expected 1"),
    "not an object": (_text(lambda text: f"[{text}]"), r"is not a JSON object \(a list\)"),
    "field missing": (_forged(lambda e: e.pop("value")), "lacks value"),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_damaged_entry_is_reported_and_recomputed(tmp_path, name):
    damage, reason = DAMAGE[name]
    compute = Counter()
    _run(tmp_path, compute)
    entry = _entry(tmp_path)
    damage(entry)
    with pytest.warns(RunCacheWarning, match=reason) as caught:
        assert _run(tmp_path, compute)["run"] == 2
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"ignoring cached run {entry}: ") and message.endswith("; it will be recomputed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten good: read back without a warning
        assert _run(tmp_path, compute)["run"] == 2
    assert compute.calls == 2


def test_another_spec_with_the_same_key_is_not_returned(tmp_path, monkeypatch):
    """A key collision (or an entry copied over another) is caught by comparing the spec itself."""
    compute = Counter()
    _run(tmp_path, compute)
    monkeypatch.setattr("gradalign.store.runcache.run_key", lambda kind, spec, version: "collision")
    _run(tmp_path, compute)
    with pytest.warns(RunCacheWarning, match="has a spec other than the one asked for"):
        assert _run(tmp_path, compute, {**SPEC, "lr": 0.2})["run"] == 3
    assert compute.calls == 3


def test_force_recompute_ignores_the_entry_and_the_checkpoint(tmp_path):
    compute = Counter()
    _run(tmp_path, compute)
    checkpoint = _entry(tmp_path).with_suffix(".pt")
    checkpoint.write_bytes(b"stale")  # Counter asserts it is gone when compute starts
    with force_recompute():
        assert _run(tmp_path, compute)["run"] == 2
        assert _run(tmp_path, compute)["run"] == 2  # recomputed once per forced block, then read back
    assert not checkpoint.exists()
    assert _run(tmp_path, compute)["run"] == 2
    with force_recompute():
        assert _run(tmp_path, compute)["run"] == 3
    assert compute.calls == 3


def test_checkpoint_survives_a_failed_computation(tmp_path):
    """An interrupted run keeps its checkpoint so that the next call resumes from it."""
    seen = []

    def failing(checkpoint):
        checkpoint.write_bytes(b"half way")
        raise KeyboardInterrupt

    def resuming(checkpoint):
        seen.append(checkpoint.read_bytes())
        return {"done": True}

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, failing)
    assert not _entry(tmp_path).exists()
    assert _run(tmp_path, resuming) == {"done": True} and seen == [b"half way"]
    assert not _entry(tmp_path).with_suffix(".pt").exists()


def test_non_finite_value_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"non-finite number at loss\[1\]"):
        _run(tmp_path, lambda checkpoint: {"loss": [1.0, math.nan]})
    assert not _entry(tmp_path).exists()


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "cache"
    cached_run(KIND, SPEC, VERSION, Counter())
    assert _entry(tmp_path / "cache").exists()
    monkeypatch.delenv("GRADALIGN_CACHE")
    assert cache_root() == tmp_path / "xdg" / "gradalign"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "gradalign"


@pytest.mark.parametrize("variable", ["GRADALIGN_CACHE", "XDG_CACHE_HOME"])
def test_cache_root_on_a_file_is_a_one_line_config_error(tmp_path, monkeypatch, variable):
    monkeypatch.delenv("GRADALIGN_CACHE", raising=False)
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv(variable, str(tmp_path / "file"))
    with pytest.raises(ConfigError, match=f"is a file; set {variable} to a folder") as err:
        cache_root()
    assert "\n" not in str(err.value)


def test_kind_must_be_a_plain_name(tmp_path):
    with pytest.raises(ValueError, match="run kind must be a plain name"):
        cached_run("../escape", SPEC, VERSION, Counter(), root=tmp_path)
