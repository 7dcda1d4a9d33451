"""Issue 25, items 5 and 6: storage failures and malformed stored files.

A full disk after compute keeps the record in a fallback file the error names; temporary files of killed
writes are removed; identical runs wait for each other through a lock per key; run-cache entries, checkpoint
headers and records are checked for their fields and types (and duplicate JSON keys) on load, reported and
recomputed, never a traceback.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch

from gradalign.records import runner
from gradalign.store.atomic import (
    StorageError,
    StoredJSONError,
    content_digest,
    read_json_strict,
    remove_stale_temporaries,
    write_json_atomically,
)
from gradalign.cli import main
from gradalign.experiments import EXPERIMENTS, check, outcome
from gradalign.records.results import RecordWarning, record_digest
from gradalign.store.runcache import RunCacheWarning, cached_run, run_key
from gradalign.store.schema import record_problem
from gradalign.training.checkpoint import CheckpointWarning, load_checkpoint, save_checkpoint

ELEMENT = "lga.alg1"


def _quick(calls: list, sleep_s: float = 0.0):
    """A stand-in experiment: one passing check, counting its calls."""

    def run(cfg, device):
        calls.append(cfg)
        time.sleep(sleep_s)
        return outcome({"ok": check(True, 1.0, "1 > 0", "a claim")}, {"value": 1.0})

    return run


@pytest.fixture
def quick(store, tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(EXPERIMENTS, ELEMENT, dataclasses.replace(EXPERIMENTS[ELEMENT], run=_quick(calls, 0.3)))
    return calls


# --- a full disk after compute: the record is kept in a fallback file ----------------------------------------


def test_full_disk_after_compute_keeps_the_record_in_a_fallback_file(quick, store, capsys, monkeypatch):
    import gradalign.store.atomic as atomic

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    assert main(["run", ELEMENT, "--preset", "smoke"]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "cannot write" in lines[0] and "the disk is full" in lines[0] and "kept in " in lines[0]
    kept = Path(lines[0].split("kept in ")[1].split(" (copy it")[0])
    record = json.loads(kept.read_text())
    assert record["id"] == ELEMENT and record["digest"] == record_digest(record) and len(quick) == 1
    assert not list(store.root.rglob("*.json")) and not list(store.root.rglob("*.tmp"))
    kept.unlink()


def test_write_failure_without_any_fallback_says_so(tmp_path, monkeypatch):
    import gradalign.store.atomic as atomic

    monkeypatch.setattr(atomic, "keep_in_fallback", lambda path, text: None)
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError, match="a file stands where a folder should be; and no fallback file"):
        write_json_atomically(tmp_path / "file" / "record.json", {"a": 1})


# --- stale temporary files -------------------------------------------------------------------------------------


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_stale_temporaries_of_dead_writers_are_removed_on_start(tmp_path, quick, capsys):
    folder = tmp_path / "results" / "lga" / "lga.fig1"
    folder.mkdir(parents=True)
    old = time.time() - 3600
    dead = folder / f"smoke-abc.json.x1y2z3w4.pid{_dead_pid()}.tmp"
    mine = folder / f"smoke-abc.json.x1y3z3w4.pid{os.getpid()}.tmp"
    fresh = folder / f"smoke-abd.json.x1y4z3w4.pid{_dead_pid()}.tmp"
    legacy = tmp_path / "cache" / "runs" / "trial" / "0123456789abcdef.jsonk3j4_9a8.tmp"
    legacy.parent.mkdir(parents=True)
    others = [folder / "notes.tmp", folder / "backup.json.tmp", folder / "x.json.keep.me.tmp"]  # not ours
    for path in (dead, mine, fresh, legacy, *others):
        path.write_text("{half")
    for path in (dead, mine, legacy, *others):
        os.utime(path, (old - 86400, old - 86400))
    assert main(["run", ELEMENT, "--preset", "smoke"]) == 0
    assert not dead.exists() and not legacy.exists()
    assert mine.exists() and fresh.exists() and all(path.exists() for path in others)


_KILLED_WRITE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from gradalign.store.atomic import write_atomically

    def write(handle):
        handle.write("{half")
        handle.flush()
        os._exit(9)  # killed in the middle of the write: no cleanup runs

    write_atomically(Path(sys.argv[1]), write)
    """
)


def test_the_temporary_file_of_a_killed_write_is_removed(tmp_path):
    target = tmp_path / "results" / "lga" / "lga.fig1" / "smoke-0123.json"
    assert subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(target)]).returncode == 9
    (left,) = target.parent.glob("*.tmp")
    assert not target.exists()
    assert remove_stale_temporaries(tmp_path / "results") == []  # too fresh: it could be a write in progress
    os.utime(left, (time.time() - 120, time.time() - 120))
    assert remove_stale_temporaries(tmp_path / "results") == [left] and not left.exists()


def test_remove_stale_temporaries_of_a_missing_root_is_a_no_op(tmp_path):
    assert remove_stale_temporaries(tmp_path / "nowhere") == []


# --- a lock per key: identical runs compute once ---------------------------------------------------------------


def test_two_identical_runs_at_once_compute_once(quick, capsys):
    codes = []
    threads = [threading.Thread(target=lambda: codes.append(main(["run", ELEMENT, "--preset", "smoke"])))]
    threads.append(threading.Thread(target=lambda: codes.append(main(["run", ELEMENT, "--preset", "smoke"]))))
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(60)
    out = capsys.readouterr()
    assert codes == [0, 0] and len(quick) == 1, out
    assert "computed now" in out.out and "loaded from the store" in out.out
    assert "waiting for another process computing the same record" in out.err


_CACHED_RUN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from gradalign.store.runcache import cached_run

    root, marks = Path(sys.argv[1]), Path(sys.argv[2])

    def compute(checkpoint):
        (marks / f"computed-{time.time_ns()}").write_text("")
        time.sleep(1.0)
        return {"value": 42}

    print(cached_run("trial", {"lr": 0.1}, 1, compute, root=root)["value"])
    """
)


def test_two_processes_asking_for_the_same_run_compute_it_once(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    command = [sys.executable, "-c", _CACHED_RUN_SCRIPT, str(tmp_path / "cache"), str(marks)]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    time.sleep(0.3)
    processes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == ["42", "42"]
    assert len(list(marks.iterdir())) == 1, "both processes computed the run"


# --- malformed run-cache entries -------------------------------------------------------------------------------

KIND, SPEC, VERSION = "trial", {"lr": 0.1}, 1


class Counter:
    def __init__(self):
        self.calls = 0

    def __call__(self, checkpoint):
        self.calls += 1
        return {"loss": 0.5, "run": self.calls}


def _entry(root: Path) -> Path:
    return root / "runs" / KIND / f"{run_key(KIND, SPEC, VERSION)}.json"


def _forge(change):
    def damage(path):
        entry = json.loads(path.read_text())
        change(entry)
        entry["digest"] = content_digest(entry)
        path.write_text(json.dumps(entry))

    return damage


def _duplicate(path):
    text = path.read_text()
    path.write_text(text.replace('"value":', '"value": {"loss": 0.1, "run": 99}, "value":', 1))


ENTRY_DAMAGE = {
    "spec a string": (_forge(lambda e: e.update(spec="lr=0.1")), "has spec of type str, expected an object"),
    "version a string": (_forge(lambda e: e.update(version="1")), "has version of type str, expected an integer"),
    "schema a bool": (_forge(lambda e: e.update(schema=True)), "has schema of type bool, expected an integer"),
    "extra field": (_forge(lambda e: e.update(note="hand edit")), "has fields an entry does not hold: note"),
    "digest a number": (lambda p: p.write_text(p.read_text().replace('"digest": "', '"digest": 1, "x": "')), ""),
    "duplicate value key": (_duplicate, "has the key 'value' twice"),
}


@pytest.mark.parametrize("name", ENTRY_DAMAGE)
def test_malformed_run_entry_is_reported_and_recomputed(tmp_path, name):
    damage, reason = ENTRY_DAMAGE[name]
    compute = Counter()
    cached_run(KIND, SPEC, VERSION, compute, root=tmp_path)
    damage(_entry(tmp_path))
    with pytest.warns(RunCacheWarning, match=reason):
        assert cached_run(KIND, SPEC, VERSION, compute, root=tmp_path)["run"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_run(KIND, SPEC, VERSION, compute, root=tmp_path)["run"] == 2


def test_duplicate_keys_are_refused_in_every_stored_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"metrics": {"a": 1}, "curves": {}, "metrics": {"a": 2}}')
    with pytest.raises(StoredJSONError, match="has the key 'metrics' twice in one object"):
        read_json_strict(path)
    path.write_text('{"outer": {"k": 1, "k": 1}}')
    with pytest.raises(StoredJSONError, match="has the key 'k' twice"):
        read_json_strict(path)


# --- malformed checkpoints -------------------------------------------------------------------------------------


def _checkpoint(tmp_path, fingerprint="run-a") -> Path:
    path = tmp_path / "run.pt"
    save_checkpoint(path, fingerprint, {"loop": {"step": 3}, "w": torch.arange(4.0)})
    return path


def _with_header(path: Path, header: bytes) -> None:
    _, _, payload = path.read_bytes().partition(b"\n")
    path.write_bytes(header + b"\n" + payload)


def _header(path: Path) -> dict:
    return json.loads(path.read_bytes().partition(b"\n")[0])


CHECKPOINT_DAMAGE = {
    "format alone": (lambda p, h: _with_header(p, b'{"format": 2}'), "header without fingerprint, sha256, bytes"),
    "bytes a string": (
        lambda p, h: _with_header(p, json.dumps({**h, "bytes": str(h["bytes"])}).encode()),
        "bytes is a str, not a int",
    ),
    "fingerprint a number": (
        lambda p, h: _with_header(p, json.dumps({**h, "fingerprint": 7}).encode()),
        "fingerprint is a int",
    ),
    "format 1": (lambda p, h: _with_header(p, json.dumps({**h, "format": 1}).encode()), "has format 1, expected 2"),
    "header a list": (lambda p, h: _with_header(p, b"[2]"), "not a JSON object"),
    "extra field": (lambda p, h: _with_header(p, json.dumps({**h, "x": 1}).encode()), "unknown fields x"),
    "duplicate key": (
        lambda p, h: _with_header(p, json.dumps(h)[:-1].encode() + b', "format": 2}'),
        "no readable header",
    ),
    "sha256 not hex": (lambda p, h: _with_header(p, json.dumps({**h, "sha256": "z" * 64}).encode()), "64 hex"),
    "negative bytes": (lambda p, h: _with_header(p, json.dumps({**h, "bytes": -1}).encode()), "negative"),
    "payload not torch": (
        lambda p, h: p.write_bytes(
            json.dumps({**h, "sha256": __import__("hashlib").sha256(b"junk").hexdigest(), "bytes": 4}).encode()
            + b"\njunk"
        ),
        "payload torch cannot load",
    ),
    "no header line": (lambda p, h: p.write_bytes(b"\x80\x02garbage"), "no readable header"),
}


@pytest.mark.parametrize("name", CHECKPOINT_DAMAGE)
def test_malformed_checkpoint_is_reported_and_the_run_starts_over(tmp_path, name):
    damage, reason = CHECKPOINT_DAMAGE[name]
    path = _checkpoint(tmp_path)
    damage(path, _header(path))
    with pytest.warns(CheckpointWarning, match=reason):
        assert load_checkpoint(path, "run-a") is None
    assert not path.exists()


def test_checkpoint_of_another_run_is_set_aside_and_the_run_starts_fresh(tmp_path):
    path = _checkpoint(tmp_path, "run-b")
    before = path.read_bytes()
    with pytest.warns(CheckpointWarning, match=r"belongs to another run \(fingerprint runb\); set aside as run.pt"):
        assert load_checkpoint(path, "run-a") is None
    assert not path.exists() and (tmp_path / "run.pt.other-runb").read_bytes() == before
    _checkpoint(tmp_path, "run-b")
    with pytest.warns(CheckpointWarning, match="set aside as run.pt.other-runb.2"):
        assert load_checkpoint(path, "run-a") is None
    assert load_checkpoint(tmp_path / "run.pt.other-runb", "run-b")["loop"]["step"] == 3  # intact for its owner


def test_a_good_checkpoint_loads(tmp_path):
    path = _checkpoint(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_checkpoint(path, "run-a")["loop"]["step"] == 3


# --- records: fields and types, beyond the digest --------------------------------------------------------------


@pytest.fixture
def stored(quick, store):
    record = runner.run(ELEMENT, "smoke", store=store)
    return record, store.path(ELEMENT, "smoke", record["config_hash"])


def _forge_record(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    record["digest"] = record_digest(record)
    path.write_text(json.dumps(record))


def _set_check(name, key, value=None, drop=False):
    def change(record):
        if drop:
            record["checks"][name].pop(key)
        else:
            record["checks"][name][key] = value

    return change


RECORD_DAMAGE = {
    "provenance a string": (lambda r: r.update(provenance="cpu"), "has provenance of type str, expected an object"),
    "check without rule": (_set_check("ok", "rule", drop=True), "malformed checks entry 'ok': lacks rule"),
    "check rule a number": (_set_check("ok", "rule", 3), "has rule of type int, expected a string"),
    "check claim missing": (_set_check("ok", "claim", drop=True), "lacks claim"),
    "check not an object": (lambda r: r["checks"].update(ok=True), "entry 'ok': not an object"),
    "metrics a list": (lambda r: r.update(metrics=[1]), "has metrics of type list, expected an object"),
    "curves null": (lambda r: r.update(curves=None), "has curves of type NoneType"),
    "config_hash a number": (lambda r: r.update(config_hash=12), "has config_hash of type int"),
    "experiment_version a string": (lambda r: r.update(experiment_version="1"), "has experiment_version of type str"),
    "hardware missing": (lambda r: r["provenance"].pop("hardware"), "has a provenance without hardware"),
    "wall time a string": (lambda r: r["provenance"].update(wall_time_s="3 s"), "provenance.wall_time_s of type str"),
    "wall time negative": (lambda r: r["provenance"].update(wall_time_s=-1.0), "expected a time >= 0"),
    "seeds not integers": (lambda r: r["provenance"].update(seeds=["a"]), "provenance.seeds that are not all"),
    "verdict without status": (lambda r: r["verdict"].pop("status"), "verdict without a status string"),
    "verdict failed a string": (lambda r: r["verdict"].update(failed="ok"), "verdict.failed that is not a list"),
    "kind unknown": (lambda r: r.update(kind="vibes"), "has kind 'vibes', expected one of analytic, empirical"),
    "preconditions a list": (lambda r: r.update(preconditions=[]), "has preconditions of type list"),
    "precondition without passed": (
        lambda r: r.update(preconditions={"p": {"value": 1, "rule": "r", "claim": "c"}}),
        "malformed preconditions entry 'p': lacks passed",
    ),
    "targets entry passed a string": (
        lambda r: r.update(targets={"t": {"passed": "yes", "value": 1, "rule": "r", "claim": "c"}}),
        "malformed targets entry 't'",
    ),
}


@pytest.mark.parametrize("name", RECORD_DAMAGE)
def test_malformed_record_with_a_recomputed_digest_is_reported_and_recomputed(stored, store, quick, name):
    change, reason = RECORD_DAMAGE[name]
    record, path = stored
    _forge_record(path, change)
    with pytest.warns(RecordWarning, match=reason):
        again = runner.run(ELEMENT, "smoke", store=store)
    assert again["checks"] == record["checks"] and len(quick) == 2


def test_duplicate_metrics_key_in_a_record_is_refused(stored, store, quick):
    record, path = stored
    text = path.read_text()
    path.write_text(text.replace('"metrics": {', '"metrics": {"value": 5.0}, "metrics": {', 1))
    with pytest.warns(RecordWarning, match="has the key 'metrics' twice"):
        runner.run(ELEMENT, "smoke", store=store)
    assert len(quick) == 2


def test_record_schema_accepts_the_new_optional_fields(stored):
    record, _ = stored
    assert record_problem(record) is None
    extended = {
        **record,
        "kind": "empirical",
        "preconditions": {"learned": {"passed": True, "value": 0.9, "rule": "> 0.5", "claim": "c", "extra": 1}},
        "checks": {name: {**c, "within_noise": False, "se": 0.1} for name, c in record["checks"].items()},
    }
    assert record_problem(extended) is None
    assert record_problem({**record, "kind": "analytic"}) is None


def test_every_stored_record_of_the_checkout_has_the_schema():
    from gradalign.environment import project_root

    results = project_root() / "results"
    for path in results.rglob("*.json"):
        if path.relative_to(results).parts[0] in ("bench", "runs", "windows", "canaries", "pilots"):  # not records
            continue
        assert record_problem(read_json_strict(path)) is None, path


def test_ranks_of_one_torchrun_job_do_not_wait_for_each_other(tmp_path, monkeypatch):
    """Under torchrun every rank computes the run together with the others: a lock would deadlock them."""
    from filelock import FileLock

    from gradalign.store.runcache import key_lock

    path = tmp_path / "locks" / "k.lock"
    held = FileLock(str(path))
    held.acquire()
    try:
        monkeypatch.setenv("WORLD_SIZE", "2")
        with key_lock(path, "run"):
            pass  # entered although another holder has the lock
        monkeypatch.setenv("WORLD_SIZE", "1")
        done = []

        def wait_then_enter():
            with key_lock(path, "run"):
                done.append(1)

        thread = threading.Thread(target=wait_then_enter, daemon=True)
        thread.start()
        thread.join(0.5)
        assert not done  # a plain process waits
    finally:
        held.release()
    thread.join(10)
    assert done


def test_a_folder_where_the_record_goes_is_refused_before_compute(quick, store, capsys):
    exp = EXPERIMENTS[ELEMENT]
    folder = store.path(ELEMENT, "smoke", exp.resolve("smoke").digest(exp.version))
    folder.mkdir(parents=True)
    with pytest.warns(RecordWarning, match="cannot be read"):
        assert main(["run", ELEMENT, "--preset", "smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder, where the record goes" in err and quick == []


def test_a_folder_where_the_run_entry_goes_is_refused_before_compute(tmp_path):
    compute = Counter()
    _entry(tmp_path).mkdir(parents=True)
    with pytest.warns(RunCacheWarning, match="cannot be read"):
        with pytest.raises(StorageError, match="is a folder, where the run's file goes"):
            cached_run(KIND, SPEC, VERSION, compute, root=tmp_path)
    assert compute.calls == 0


def test_a_damaged_record_is_reported_once_by_the_cli(stored, quick, capsys):
    _, path = stored
    path.write_text(path.read_text()[:50])
    with pytest.warns(RecordWarning, match="is truncated") as caught:
        assert main(["run", ELEMENT, "--preset", "smoke"]) == 0
    assert len([w for w in caught if issubclass(w.category, RecordWarning)]) == 1 and len(quick) == 2
    assert "computed now" in capsys.readouterr().out
