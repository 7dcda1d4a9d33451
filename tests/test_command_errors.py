"""One error path for every command (issue 48, item 4): `report`, `rederive`, `data`, `sweep`, `book`,
`gpu-window` and `import` check their folders as `run` does (not empty, a folder, creatable, writable, with room),
turn every storage error into one line with exit status 2, leave no partial file, and check the environment before
anything is written. Tests run as root, where chmod does not stop writes: a read-only folder is simulated by making
`tempfile.mkstemp` fail under it (as `tests/test_hostile_input.py` does), a full disk by `shutil.disk_usage` or a
write that fails with ENOSPC.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gradalign.records import rederive
from gradalign.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def env(tmp_path, monkeypatch, no_compute):
    """A results store that exists, a run cache, no GRADALIGN_DATA or GRADALIGN_BOOK_JOBS; nothing may compute,
    build the book or open a window."""
    from gradalign.book import build as book
    from gradalign.compute import gpu_window

    (tmp_path / "results").mkdir()
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    for name in ("GRADALIGN_DATA", "GRADALIGN_BOOK_JOBS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(book, "build_book", _forbidden)
    monkeypatch.setattr(gpu_window, "gpu_window", _forbidden)
    (tmp_path / "a-file").write_text("not a folder")
    return tmp_path


def _forbidden(*args, **kwargs):
    raise AssertionError("this must not run: the input was bad")


def _read_only(monkeypatch, root: Path, code: int = errno.EACCES) -> None:
    """mkstemp under `root` fails as on a read-only folder."""
    original = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(Path(dir).absolute()).startswith(str(root.absolute())):
            raise OSError(code, "refused by the test")
        return original(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _one_line(capsys, code: int, fragment: str) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradalign: error: "), captured.err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err
    return lines[0]


def _window_folder(tmp_path: Path) -> Path:
    from gradalign.store.atomic import content_digest

    folder = tmp_path / "window"
    folder.mkdir()
    report = {"minutes": 8, "units": [], "began": "2026-11-28T10:00:00+00:00"}
    (folder / "window.json").write_text(json.dumps({**report, "digest": content_digest(report)}))
    return folder


# (argv with {tmp} for the test's folder, environment changes, a read-only folder under {tmp}, what the line says,
# a path under {tmp} that must not exist afterwards)
CASES = {
    # --- report -------------------------------------------------------------------------------------------------
    "report: results root a file": (["report"], {"GRADALIGN_RESULTS": "{tmp}/a-file"}, None, "is a file", None),
    "report: results root missing": (["report"], {"GRADALIGN_RESULTS": "{tmp}/nope"}, None, "does not exist", None),
    "report: results root empty": (["report"], {"GRADALIGN_RESULTS": " "}, None, "set but empty", None),
    "report: --out read-only": (
        ["report", "--out", "{tmp}/ro/r.md"],
        {},
        "{tmp}/ro",
        "cannot be written (permission denied)",
        "{tmp}/ro/r.md",
    ),
    "report: --out in a file": (["report", "--out", "{tmp}/a-file/r.md"], {}, None, "does not exist", None),
    "report: --out a folder": (["report", "--out", "{tmp}"], {}, None, "is a folder", None),
    "report: --out bad preset": (
        ["report", "--preset", "x", "--out", "{tmp}/r.md"],
        {},
        None,
        "unknown preset",
        "{tmp}/r.md",
    ),
    # --- data ---------------------------------------------------------------------------------------------------
    "data: --root a file": (["data", "--root", "{tmp}/a-file"], {}, None, "cannot be created", None),
    "data: --root under a file": (["data", "--root", "{tmp}/a-file/x"], {}, None, "cannot be created", None),
    "data: --root empty": (["data", "--root", ""], {}, None, "--root is empty", None),
    "data: GRADALIGN_DATA empty": (["data"], {"GRADALIGN_DATA": ""}, None, "GRADALIGN_DATA is set but empty", None),
    "data: GRADALIGN_DATA blank": (["data"], {"GRADALIGN_DATA": "  "}, None, "GRADALIGN_DATA is set but empty", None),
    "data: GRADALIGN_DATA a file": (["data"], {"GRADALIGN_DATA": "{tmp}/a-file"}, None, "cannot be created", None),
    "data: --root read-only": (
        ["data", "--root", "{tmp}/ro"],
        {},
        "{tmp}/ro",
        "cannot be written",
        "{tmp}/ro/FashionMNIST/raw/train-images-idx3-ubyte",
    ),
    # --- sweep --------------------------------------------------------------------------------------------------
    "sweep: --folder a file": (
        ["sweep", "lga.fig3", "--preset", "smoke", "--folder", "{tmp}/a-file"],
        {},
        None,
        "is a file",
        None,
    ),
    "sweep: --folder under a file": (
        ["sweep", "lga.fig3", "--preset", "smoke", "--folder", "{tmp}/a-file/jobs"],
        {},
        None,
        "cannot be created",
        None,
    ),
    "sweep: --folder read-only": (
        ["sweep", "lga.fig3", "--preset", "smoke", "--folder", "{tmp}/ro"],
        {},
        "{tmp}/ro",
        "cannot be written",
        None,
    ),
    "sweep: GRADALIGN_DATA empty": (
        ["sweep", "lga.fig3", "--preset", "smoke", "--folder", "{tmp}/jobs"],
        {"GRADALIGN_DATA": ""},
        None,
        "GRADALIGN_DATA is set but empty",
        "{tmp}/jobs",
    ),
    # --- book ---------------------------------------------------------------------------------------------------
    "book: GRADALIGN_BOOK_JOBS abc": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_BOOK_JOBS": "abc"},
        None,
        "GRADALIGN_BOOK_JOBS",
        "{tmp}/b",
    ),
    "book: GRADALIGN_BOOK_JOBS 0": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_BOOK_JOBS": "0"},
        None,
        "GRADALIGN_BOOK_JOBS",
        "{tmp}/b",
    ),
    "book: GRADALIGN_BOOK_JOBS -1": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_BOOK_JOBS": "-1"},
        None,
        "GRADALIGN_BOOK_JOBS",
        "{tmp}/b",
    ),
    "book: GRADALIGN_THREADS abc": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_THREADS": "abc"},
        None,
        "GRADALIGN_THREADS",
        "{tmp}/b",
    ),
    "book: GRADALIGN_DATA empty": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_DATA": ""},
        None,
        "GRADALIGN_DATA",
        "{tmp}/b",
    ),
    "book: results root empty": (
        ["book", "--out", "{tmp}/b"],
        {"GRADALIGN_RESULTS": ""},
        None,
        "GRADALIGN_RESULTS",
        "{tmp}/b",
    ),
    "book: --out a file": (["book", "--out", "{tmp}/a-file"], {}, None, "is a file", None),
    "book: --out under a file": (["book", "--out", "{tmp}/a-file/b"], {}, None, "cannot be created", None),
    "book: --out empty": (["book", "--out", ""], {}, None, "--out (the build folder) is empty", None),
    "book: --out read-only": (["book", "--out", "{tmp}/ro"], {}, "{tmp}/ro", "cannot be written", "{tmp}/ro/book-src"),
    # --- gpu-window ---------------------------------------------------------------------------------------------
    "window: --out a file": (["gpu-window", "--minutes", "1", "--out", "{tmp}/a-file"], {}, None, "is a file", None),
    "window: --out under a file": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/a-file/o"],
        {},
        None,
        "cannot be created",
        None,
    ),
    "window: --out empty": (["gpu-window", "--minutes", "1", "--out", ""], {}, None, "--out is empty", None),
    "window: --out read-only": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/ro"],
        {},
        "{tmp}/ro",
        "cannot be written",
        None,
    ),
    "window: minutes 0 first": (
        ["gpu-window", "--minutes", "0", "--out", "{tmp}/o"],
        {},
        None,
        "time limit",
        "{tmp}/o",
    ),
    "window: workers 0 first": (
        ["gpu-window", "--minutes", "1", "--workers", "0", "--out", "{tmp}/o"],
        {},
        None,
        "--workers",
        "{tmp}/o",
    ),
    "window: GRADALIGN_THREADS x": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/o"],
        {"GRADALIGN_THREADS": "x"},
        None,
        "GRADALIGN_THREADS",
        "{tmp}/o",
    ),
    "window: GRADALIGN_DATA empty": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/o"],
        {"GRADALIGN_DATA": ""},
        None,
        "GRADALIGN_DATA",
        "{tmp}/o",
    ),
    "window: GRADALIGN_RESULTS empty": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/o"],
        {"GRADALIGN_RESULTS": ""},
        None,
        "GRADALIGN_RESULTS",
        "{tmp}/o",
    ),
    "window: --skip unknown": (
        ["gpu-window", "--minutes", "1", "--out", "{tmp}/o", "--skip", "lga.nope"],
        {},
        None,
        "--skip",
        "{tmp}/o",
    ),
    # --- import -------------------------------------------------------------------------------------------------
    "import: --results a file": (["import", "{tmp}/window", "--results", "{tmp}/a-file"], {}, None, "is a file", None),
    "import: --results under a file": (
        ["import", "{tmp}/window", "--results", "{tmp}/a-file/r"],
        {},
        None,
        "cannot be created",
        None,
    ),
    "import: --results empty": (["import", "{tmp}/window", "--results", ""], {}, None, "--results is empty", None),
    "import: GRADALIGN_RESULTS empty": (
        ["import", "{tmp}/window"],
        {"GRADALIGN_RESULTS": ""},
        None,
        "GRADALIGN_RESULTS",
        None,
    ),
    "import: --results read-only": (
        ["import", "{tmp}/window", "--results", "{tmp}/ro"],
        {},
        "{tmp}/ro",
        "cannot be written",
        "{tmp}/ro/windows",
    ),
    "import: folder empty": (["import", ""], {}, None, "folder is empty", None),
    "import: folder missing": (
        ["import", "{tmp}/nope", "--results", "{tmp}/r"],
        {},
        None,
        "is not a folder",
        "{tmp}/r",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_a_command_s_storage_error_is_one_line(name, env, capsys, monkeypatch):
    argv, environment, read_only, fragment, absent = CASES[name]
    tmp = str(env)
    for key, value in environment.items():
        monkeypatch.setenv(key, value.format(tmp=tmp))
    if read_only:
        Path(read_only.format(tmp=tmp)).mkdir()
        _read_only(monkeypatch, Path(read_only.format(tmp=tmp)))
    if name.startswith("data: --root read-only"):
        _debian_package(env, monkeypatch)
    if name.startswith("import"):
        _window_folder(env)
    _one_line(capsys, main([arg.format(tmp=tmp) for arg in argv]), fragment)
    if absent:
        assert not Path(absent.format(tmp=tmp)).exists(), f"{absent} was written"
    assert not list(env.rglob("*.tmp")), "a temporary file was left"


def _debian_package(tmp_path: Path, monkeypatch) -> Path:
    """Four small .gz files standing for the Debian package's."""
    from gradalign.data import fashion_mnist

    source = tmp_path / "debian"
    source.mkdir()
    for name in fashion_mnist.FILES:
        (source / f"{name}.gz").write_bytes(gzip.compress(b"x" * 1000))
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", source)
    return source


def test_data_unpacked_onto_a_full_disk_is_one_line_and_leaves_no_part(env, capsys, monkeypatch):
    from gradalign.data import fashion_mnist

    _debian_package(env, monkeypatch)

    def full(src, dst, *args):
        dst.write(b"part")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fashion_mnist.shutil, "copyfileobj", full)
    _one_line(capsys, main(["data", "--root", str(env / "d")]), "the disk is full")
    assert not [p for p in (env / "d").rglob("*") if p.is_file()], "a partial file was left"


def test_report_onto_a_full_disk_is_one_line_and_leaves_no_file(env, capsys, monkeypatch):
    from gradalign.book import report

    monkeypatch.setattr(report, "report_markdown", lambda preset: "# report\n" * 1000)
    real = os.fsync

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    _one_line(capsys, main(["report", "--out", str(env / "r.md")]), "the disk is full")
    monkeypatch.setattr(os, "fsync", real)
    assert not (env / "r.md").exists() and not list(env.glob("r.md*"))


def test_report_onto_a_disk_without_room_is_refused_before_it_is_made(env, capsys, monkeypatch):
    from gradalign.book import report

    monkeypatch.setattr(report, "report_markdown", _forbidden)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 2**10, 2**10))
    _one_line(capsys, main(["report", "--out", str(env / "r.md")]), "MiB free")
    assert not (env / "r.md").exists()


def test_report_writes_its_file_whole(env, capsys, monkeypatch):
    from gradalign.book import report

    monkeypatch.setattr(report, "report_markdown", lambda preset: "# the report\n")
    assert main(["report", "--out", str(env / "r.md")]) == 0
    assert (env / "r.md").read_text() == "# the report\n"


@pytest.mark.parametrize(
    "error",
    [
        PermissionError(errno.EACCES, "Permission denied", "/x/y.json"),
        NotADirectoryError(errno.ENOTDIR, "Not a directory", "/x/y"),
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EROFS, "Read-only file system", "/x"),
    ],
    ids=["permission", "not a directory", "full disk", "read-only"],
)
def test_any_storage_error_left_is_one_line(error, env, capsys, monkeypatch):
    """The last net: an OSError no command turned into its own message is still one line, exit 2."""
    from gradalign.book import report

    def fail(preset):
        raise error

    monkeypatch.setattr(report, "report_markdown", fail)
    line = _one_line(capsys, main(["report"]), "gradalign: error: cannot ")
    assert ("/x" in line) == (error.filename is not None)


# --- python -m gradalign.records.rederive ----------------------------------------------------------------------------


def _rederive(capsys, code_expected: int = 2) -> str:
    code = rederive.main([])
    captured = capsys.readouterr()
    assert code == code_expected, captured
    return captured.err


@pytest.mark.parametrize(
    "results, fragment",
    [("{tmp}/a-file", "is a file"), ("{tmp}/nope", "does not exist"), ("", "set but empty"), (" ", "set but empty")],
    ids=["a file", "missing", "empty", "blank"],
)
def test_rederive_refuses_a_store_that_is_not_a_folder(results, fragment, env, capsys, monkeypatch):
    monkeypatch.setenv("GRADALIGN_RESULTS", results.format(tmp=env))
    err = _rederive(capsys)
    assert err.count("\n") == 1 and err.startswith("gradalign: error: ") and fragment in err


def test_rederive_refuses_a_read_only_store(env, capsys, monkeypatch):
    _read_only(monkeypatch, env / "results", errno.EROFS)
    err = _rederive(capsys)
    assert err.count("\n") == 1 and "read-only" in err


def test_rederive_stops_in_one_line_when_a_write_fails(env, capsys, monkeypatch):
    from gradalign.store.atomic import StorageError

    record = next((ROOT / "results" / "lga" / "lga.fig1").glob("cpu-*.json"))
    (env / "results" / "lga" / "lga.fig1").mkdir(parents=True)
    shutil.copy(record, env / "results" / "lga" / "lga.fig1" / record.name)

    def fail(path, store):
        raise StorageError(f"cannot write {path}: the disk is full")

    monkeypatch.setattr(rederive, "rederive_file", fail)
    err = _rederive(capsys)
    assert err.count("\n") == 1 and "the disk is full" in err


def test_an_empty_data_path_is_refused_by_run_and_bench(env, capsys, monkeypatch):
    monkeypatch.setenv("GRADALIGN_DATA", "")
    _one_line(capsys, main(["run", "lga.fig1", "--preset", "smoke"]), "GRADALIGN_DATA is set but empty")
    _one_line(capsys, main(["bench", "lga_step", "--quick"]), "GRADALIGN_DATA is set but empty")


def test_the_cases_count():
    assert len(CASES) >= 40
