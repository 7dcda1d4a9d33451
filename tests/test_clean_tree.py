"""Records come from committed trees (issue 49, item 5): `gradalign run` at `cpu`, `gpu` and `paper` refuses to
compute a record from a working tree with uncommitted changes (its provenance would name a `+dirty` commit, which
pins no code), and `--allow-dirty` is honoured only in a results store away from the checkout's results/. And no
committed record names a `+dirty` commit, and no run entry beyond the ones listed before the rule.
"""

from __future__ import annotations

import json

import pytest

from gradalign import environment
from gradalign.records import storage
from gradalign.cli import main
from gradalign.errors import ConfigError

ROOT = environment.project_root()


class Reached(ConfigError):
    """Raised where `run` would check that its results root can be written: the clean-tree rule let it pass."""


@pytest.fixture
def dirty(no_compute, monkeypatch):
    monkeypatch.setattr(environment, "git_commit", lambda: "0123abcd" * 5 + "+dirty")

    def reached(root):
        raise Reached("reached the write checks")

    monkeypatch.setattr(storage, "check_results_writable", reached)
    return no_compute


def _line(capsys, argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradalign: error: "), captured.err
    return lines[0]


@pytest.mark.parametrize("preset", ["cpu", "auto"])
def test_a_cpu_record_from_a_dirty_tree_is_refused(preset, dirty, capsys):
    line = _line(capsys, ["run", "lga.fig1", "--preset", preset, "--force"])
    assert "the working tree has uncommitted changes" in line and "+dirty" in line


def test_allow_dirty_away_from_the_checkout_s_results_computes(dirty, capsys):
    assert "reached the write checks" in _line(capsys, ["run", "lga.fig1", "--preset", "cpu", "--allow-dirty"])


@pytest.mark.parametrize("how", ["--results", "GRADALIGN_RESULTS"])
def test_allow_dirty_into_the_checkout_s_results_is_refused(how, dirty, capsys, monkeypatch):
    argv = ["run", "lga.fig1", "--preset", "cpu", "--force", "--allow-dirty"]
    if how == "--results":
        argv += ["--results", str(ROOT / "results")]
    else:
        monkeypatch.setenv("GRADALIGN_RESULTS", str(ROOT / "results" / "." / ""))
    before = sorted(p.stat().st_mtime_ns for p in (ROOT / "results" / "lga" / "lga.fig1").iterdir())
    line = _line(capsys, argv)
    assert "--allow-dirty stores a cpu record only away from the checkout's results/" in line
    assert sorted(p.stat().st_mtime_ns for p in (ROOT / "results" / "lga" / "lga.fig1").iterdir()) == before


@pytest.mark.parametrize("commit", ["0123abcd" * 5, "unknown"])
def test_a_clean_or_unknown_tree_computes(commit, dirty, capsys, monkeypatch):
    monkeypatch.setattr(environment, "git_commit", lambda: commit)
    assert "reached the write checks" in _line(capsys, ["run", "lga.fig1", "--preset", "cpu"])


def test_a_smoke_record_from_a_dirty_tree_computes(dirty, capsys):
    assert "reached the write checks" in _line(capsys, ["run", "lga.fig1", "--preset", "smoke"])


def _dirty_files() -> list[str]:
    """Every JSON file under results/ whose provenance names a `+dirty` commit, relative to results/."""
    dirty = []
    for path in sorted((ROOT / "results").rglob("*.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # not this test's business: the store's own checks report it
        provenance = document.get("provenance") if isinstance(document, dict) else None
        commit = provenance.get("git_commit") if isinstance(provenance, dict) else None
        if isinstance(commit, str) and commit.endswith("+dirty"):
            dirty.append(path.relative_to(ROOT / "results").as_posix())
    return dirty


KNOWN_DIRTY_RUNS = [
    f"runs/{line.strip()}"
    for line in (ROOT / "tests" / "dirty_run_entries.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def test_no_committed_record_names_a_dirty_commit():
    """Every record under results/ was computed from a committed tree (the 9 that were not on 2026-11-27 were
    computed again from a committed one)."""
    records = [name for name in _dirty_files() if not name.startswith("runs/")]
    assert not records, f"{len(records)} record(s) name a +dirty commit, e.g. {', '.join(records[:5])}"


def test_no_new_run_entry_names_a_dirty_commit_and_the_known_list_only_shrinks():
    """The run entries trained from a dirty tree before the refusal are listed (tests/dirty_run_entries.txt); a new
    one fails, and an entry retrained from a committed tree must leave the list."""
    runs = [name for name in _dirty_files() if name.startswith("runs/")]
    new = sorted(set(runs) - set(KNOWN_DIRTY_RUNS))
    assert not new, f"{len(new)} new run entr(ies) name a +dirty commit, e.g. {', '.join(new[:5])}"
    gone = sorted(set(KNOWN_DIRTY_RUNS) - set(runs))
    assert not gone, f"no longer dirty, remove from tests/dirty_run_entries.txt: {', '.join(gone[:5])}"
