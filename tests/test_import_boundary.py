"""`gradalign import` as a boundary (issue 48, item 1): a window's folder comes back from another machine, so
every name that becomes part of a path is checked against the registry or a strict pattern, every file's shape
and size are checked before use, symbolic links are refused, and a checkpoint is size-capped while it is read.

Each attack is a folder built by hand from one that imports cleanly (`window`), with one thing changed; the
digests and keys an attacker can recompute are recomputed, so only the boundary can refuse it. Each must exit 2
with one line on stderr and write nothing: not in the store, not beside it, not where its names point.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from gradalign.store.atomic import content_digest
from gradalign.cli import main
from gradalign.store.runcache import run_key

ROOT = Path(__file__).resolve().parents[1]
RECORD = next((ROOT / "results" / "lga" / "lga.fig1").glob("cpu-*.json"))  # read, never written
BEGAN = "2026-11-28T10:00:00+00:00"


def _entry(kind: str = "sgr.local", key: str | None = None, spec: dict | None = None) -> dict:
    spec = {"seed": 0, "width": 0.125} if spec is None else spec
    entry = {
        "schema": 1,
        "kind": kind,
        "key": run_key(kind, spec, 1) if key is None else key,
        "version": 1,
        "spec": spec,
        "value": {"final_test_acc": 50.0},
        "provenance": {"hardware": "NVIDIA H100", "date": BEGAN, "git_commit": "0" * 40},
    }
    return {**entry, "digest": content_digest(entry)}


def _report(**changes) -> dict:
    report = {
        "minutes": 8,
        "device": "cuda",
        "workers": 1,
        "began": BEGAN,
        "tests": {"outcome": "5 passed"},
        "bench": {},
        "units": [{"element": "sgr.fig2", "preset": "cpu", "kind": "sgr.local", "status": "finished", "seconds": 9}],
        "records": [],
        "stopped": "",
        "left": [],
    }
    report.update(changes)
    return {**report, "digest": content_digest(report)}


def _record(**changes) -> dict:
    record = json.loads(RECORD.read_text())
    record.update(changes)
    record.pop("digest")
    return {**record, "digest": content_digest(record)}


def _write(folder: Path, name: str, document) -> None:
    (folder / name).write_text(json.dumps(document))


@pytest.fixture
def window(tmp_path, monkeypatch):
    """A window's folder that imports cleanly: one run entry, one record, a dated report, a bench file."""
    from gradalign.store.run_unit import SCHEMA

    assert SCHEMA == 1
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "out"
    folder.mkdir()
    _write(folder, "window.json", _report())
    _write(folder, "runs-1.json", {"runs": [_entry()]})
    _write(folder, "records.json", {"records": [_record()]})
    _write(folder, "bench.json", {"bench": {"lga_step": {"error": "no CUDA"}}})
    return folder


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def _import(folder: Path, store: Path) -> list[str]:
    return ["import", str(folder), "--results", str(store)]


def test_the_untouched_folder_imports(window, tmp_path, capsys):
    store = tmp_path / "home" / "results"
    assert main(_import(window, store)) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "imported 1 run entry and 1 record(s)" in out and "report of the window 2026-11-28T100000" in out
    placed = {p.relative_to(store).parts[0] for p in _files(store)}
    assert placed == {"runs", "lga", "windows"}


def _entry_with(**names):
    def attack(folder: Path) -> None:
        entry = _entry(**names)
        _write(folder, "runs-1.json", {"runs": [entry]})

    return attack


def _record_with(**changes):
    def attack(folder: Path) -> None:
        _write(folder, "records.json", {"records": [_record(**changes)]})

    return attack


def _window_with(document=None, **changes):
    def attack(folder: Path) -> None:
        _write(folder, "window.json", _report(**changes) if document is None else document)

    return attack


def _file(name: str, document):
    def attack(folder: Path) -> None:
        _write(folder, name, document)

    return attack


def _symlink(name: str):
    def attack(folder: Path) -> None:
        outside = folder.parent / f"elsewhere-{name}"
        if (folder / name).exists():
            (folder / name).rename(outside)
        else:
            outside.write_bytes(b"")
        (folder / name).symlink_to(outside)

    return attack


ATTACKS = {
    # --- a run entry's kind and key become <results>/runs/<kind>/<key>.json ---------------------------------
    "kind ../../outside": (_entry_with(kind="../../outside/x"), "kind"),
    "kind absolute": (_entry_with(kind="/tmp/gradalign-attack/x"), "kind"),
    "kind part/../..": (_entry_with(kind="sgr.local/../../x"), "kind"),
    "kind ..": (_entry_with(kind=".."), "kind"),
    "kind empty": (_entry_with(kind=""), "kind"),
    "kind with a newline": (_entry_with(kind="sgr.local\nx"), "kind"),
    "kind of no part": (_entry_with(kind="nope.local"), "names no part"),
    "kind in capitals": (_entry_with(kind="SGR.local"), "kind"),
    "kind with a backslash": (_entry_with(kind="sgr.local\\..\\x"), "kind"),
    "key ../x": (_entry_with(key="../../../outside"), "key"),
    "key absolute": (_entry_with(key="/tmp/gradalign-attack"), "key"),
    "key too long": (_entry_with(key="0" * 17), "key"),
    # --- a record's id, preset and hash become <results>/<part>/<id>/<preset>-<hash>.json -----------------
    "preset ../../outside": (_record_with(preset="../../../outside/x"), "preset"),
    "preset absolute": (_record_with(preset="/tmp/gradalign-attack/x"), "preset"),
    "preset turbo": (_record_with(preset="turbo"), "preset 'turbo' is not one of"),
    "preset auto": (_record_with(preset="auto"), "preset"),
    "preset empty": (_record_with(preset=""), "preset"),
    "preset a number": (_record_with(preset=3), "preset"),
    "id ../x": (_record_with(id="../../x"), "is not a built experiment"),
    "id unknown": (_record_with(id="lga.nope"), "is not a built experiment"),
    "id a list": (_record_with(id=["lga.fig1"]), "is not a built experiment"),
    "config hash ../": (_record_with(config_hash="../../../x"), "config hash"),
    "config hash absolute": (_record_with(config_hash="/tmp/x"), "config hash"),
    # --- the window's date becomes <results>/windows/<began>-<digest>.json ----------------------------------
    "began ../../outside": (_window_with(began="../../../outside/x"), "began"),
    "began absolute": (_window_with(began="/tmp/gradalign-attack/x"), "began"),
    "began date then ../": (_window_with(began=f"{BEGAN}/../../x"), "began"),
    "began not a date": (_window_with(began="2026-13-45T99:99:99"), "not a date"),
    "began a number": (_window_with(began=20261128), "began"),
    # --- shapes ---------------------------------------------------------------------------------------------
    "window a number": (_window_with(8), "window.json is not a JSON object"),
    "window a list": (_window_with([]), "window.json is not a JSON object"),
    "window null": (_file("window.json", None), "window.json holds null"),
    "window without units": (_file("window.json", {"minutes": 8}), "lacks units"),
    "window units an object": (_window_with(units={}), "units of type dict"),
    "window unit a number": (_window_with(units=[3]), "units[0] that is not an object"),
    "window minutes a string": (_window_with(minutes="8"), "minutes of type str"),
    "window workers true": (_window_with(workers=True), "workers of type bool"),
    "window finished without seconds": (
        _window_with(units=[{"status": "finished", "element": "sgr.fig2", "preset": "cpu"}]),
        "without its element, preset and seconds",
    ),
    "window progress at 0": (_window_with(units=[{"status": "stopped", "progress": [0, 10]}]), "progress"),
    "window left numbers": (_window_with(left=[1, 2]), "left that is not a list of strings"),
    "window stopped a list": (_window_with(stopped=["x"]), "stopped of type list"),
    "runs a list": (_file("runs-1.json", []), "runs-1.json must be an object"),
    "runs a number": (_file("runs-1.json", 5), "runs-1.json must be an object"),
    "runs null": (_file("runs-1.json", None), "runs-1.json holds null"),
    "runs an object": (_file("runs-1.json", {"runs": {}}), "'runs' is a list (got dict)"),
    "records a list": (_file("records.json", []), "records.json must be an object"),
    "records a number": (_file("records.json", {"records": 5}), "'records' is a list (got int)"),
    "bench a list": (_file("bench.json", {"bench": []}), "bench.json must be an object"),
    "bench whole a list": (_file("bench.json", []), "bench.json must be an object"),
    "bench item a number": (_file("bench.json", {"bench": {"x": 5}}), "bench 'x' that is not an object"),
    "bench measurement a list": (
        _file("bench.json", {"bench": {"x": {"measurement": []}}}),
        "measurement is not an object",
    ),
    # --- symbolic links -------------------------------------------------------------------------------------
    "window.json a link": (_symlink("window.json"), "symbolic link"),
    "runs a link": (_symlink("runs-1.json"), "symbolic link"),
    "records a link": (_symlink("records.json"), "symbolic link"),
    "bench a link": (_symlink("bench.json"), "symbolic link"),
    "checkpoints.tar a link": (_symlink("checkpoints.tar"), "symbolic link"),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_is_one_line_and_writes_nothing(name, window, tmp_path, capsys):
    attack, fragment = ATTACKS[name]
    attack(window)
    store = tmp_path / "home" / "results"
    before = _files(tmp_path)
    assert main(_import(window, store)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradalign: error: "), captured.err
    assert fragment in lines[0] and "Traceback" not in captured.err and captured.out == ""
    assert _files(tmp_path) == before, "a file was written"
    assert not Path("/tmp/gradalign-attack").exists()


def test_a_folder_that_is_a_file_or_lacks_its_report_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("{}")
    for folder, fragment in ((tmp_path / "file", "is not a folder"), (tmp_path, "holds no window.json")):
        assert main(_import(folder, tmp_path / "store")) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err
    assert not (tmp_path / "store").exists()


def test_an_undated_report_with_nothing_valid_beside_it_is_not_kept(window, tmp_path, capsys):
    """A bare report (no date, no finished run) beside only refused files imports nothing: no stub
    `undated-….json` report (issue 48, item 2)."""
    _write(window, "window.json", {"minutes": 8, "units": []})
    _write(window, "runs-1.json", {"runs": [{**_entry(), "value": {"edited": True}}]})  # its digest fails
    (window / "records.json").unlink()
    store = tmp_path / "home" / "results"
    assert main(_import(window, store)) == 1
    out = capsys.readouterr().out
    assert "imported 0 run entries and 0 record(s)" in out and "says not when the window began" in out
    assert not store.exists() or not _files(store)


def _tar(folder: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(folder / "checkpoints.tar", "w") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_gzip_bomb_is_refused_while_it_is_read(window, tmp_path, capsys, monkeypatch):
    """A member that inflates beyond the bound is refused before it is inflated whole: with the bound lowered to
    1 MiB, 64 MiB of zeros (64 KiB packed) stops at the bound, and nothing of the folder is placed."""
    import zlib

    from gradalign.compute import window_carry

    monkeypatch.setattr(window_carry, "MAX_CHECKPOINT_BYTES", 2**20)
    inflated = []
    real = zlib.decompressobj

    class Watched:
        def __init__(self, *args, **kw):
            self._inner = real(*args, **kw)

        def decompress(self, data, max_length=0):
            out = self._inner.decompress(data, max_length)
            inflated.append(len(out))
            return out

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.setattr(window_carry.zlib, "decompressobj", Watched)
    bomb = gzip.compress(bytes(64 * 2**20), compresslevel=9)
    _tar(window, {"runs/sgr.local/" + "a" * 16 + ".pt.gz": bomb})
    store = tmp_path / "home" / "results"
    before = _files(tmp_path)
    assert main(_import(window, store)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "inflates beyond 1048576 bytes" in err
    assert max(inflated) <= 2**20 + 1, "the bomb was inflated past its bound"
    assert _files(tmp_path) == before


def test_a_member_over_its_size_is_refused_before_it_is_read(window, tmp_path, capsys, monkeypatch):
    from gradalign.compute import window_carry

    monkeypatch.setattr(window_carry, "MAX_MEMBER_BYTES", 1000)
    _tar(window, {"runs/sgr.local/" + "b" * 16 + ".pt.gz": os.urandom(2000)})
    assert main(_import(window, tmp_path / "store")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 2000 bytes, over 1000" in err and not (tmp_path / "store").exists()


def test_a_json_file_over_its_size_is_refused_unread(window, tmp_path, capsys, monkeypatch):
    from gradalign.compute import import_checks

    monkeypatch.setattr(import_checks, "MAX_JSON_BYTES", 100)
    assert main(_import(window, tmp_path / "store")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than the 100 a window's file may" in err


def test_a_placed_path_must_stay_inside_the_store(tmp_path):
    from gradalign.compute.import_checks import HostileImport, inside

    assert inside(tmp_path, tmp_path / "runs" / "a" / "b.json") == tmp_path / "runs" / "a" / "b.json"
    for escape in (tmp_path / ".." / "x.json", tmp_path / "runs" / ".." / ".." / "x", Path("/etc/passwd")):
        with pytest.raises(HostileImport, match="outside the results store"):
            inside(tmp_path, escape)


def test_an_edited_entry_is_still_refused_item_by_item(window, tmp_path, capsys):
    """Not an attack on the boundary: an entry whose digest does not match is refused and named, the rest placed
    (exit 1), as before."""
    entries = [_entry(), copy.deepcopy(_entry(spec={"seed": 1}))]
    entries[1]["value"] = {"final_test_acc": 99.0}
    _write(window, "runs-1.json", {"runs": entries})
    assert main(_import(window, tmp_path / "store")) == 1
    out = capsys.readouterr().out
    assert "imported 1 run entry" in out and "refused: a run entry in runs-1.json has a digest" in out
