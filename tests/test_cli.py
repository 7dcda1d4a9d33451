import json
import os
import subprocess
import sys

import pytest

from gradalign.cli import main
from gradalign.elements import ELEMENTS


def test_list_shows_all_46_elements_with_status(capsys):
    from gradalign.elements import PAPER_ELEMENTS, is_study

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert len(PAPER_ELEMENTS) == 46  # the papers'; our own studies (sgr.lam) come beside them, not counted
    studies = ["lga.tune", "sgr.lam", "sgr.lam7", "sgr.lamfull", "sgr.tab7nobn", "sgr.tab4conv", "sgr.poolhead"]
    assert [e for e in ELEMENTS if is_study(e)] == studies
    for element_id in ELEMENTS:
        assert f"  {element_id} " in out
    assert "lga.fig1         built" in out
    assert "sgr.tab2         not run here" in out
    assert "not yet built" not in out  # every element of REPRODUCE.md is registered
    assert "metagrad.tab3    not run here" in out


def test_run_smoke_writes_a_record(store, capsys):
    assert main(["run", "lga.prop1", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "lga.prop1 [smoke] reproduced" in out
    assert "computed now in" in out and " on CPU" in out
    files = list((store.root / "lga" / "lga.prop1").glob("smoke-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["preset"] == "smoke"
    assert main(["run", "lga.prop1", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "loaded from the store: computed" in out and "computed now" not in out
    assert main(["run", "lga.prop1", "--preset", "smoke", "--device", "cpu"]) == 0
    assert "note:" not in capsys.readouterr().out


def _stored(monkeypatch, element_id: str, device: str) -> None:
    """Pretend a record computed on `device` is stored (stored_record returns it)."""
    from gradalign.records import runner

    record = {
        "id": element_id,
        "preset": "smoke",
        "config_hash": "0" * 12,
        "verdict": {"status": "reproduced"},
        "checks": {},
        "scope": "exact",
        "metrics": {},
        "provenance": {
            "hardware": "NVIDIA H100 (CUDA 12.4)",
            "device": device,
            "wall_time_s": 60.0,
            "date": "2025-01-01T00:00:00+00:00",
        },
    }
    monkeypatch.setattr(runner, "stored_record", lambda *args, **kwargs: record)
    monkeypatch.setattr(runner, "run", lambda *args, **kwargs: pytest.fail("a stored record was recomputed"))


def test_run_notes_a_stored_record_from_other_hardware(store, capsys, monkeypatch):
    _stored(monkeypatch, "isoloss.tab1", "cuda:0")
    assert main(["run", "isoloss.tab1", "--preset", "smoke", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "loaded from the store: computed 2025-01-01T00:00:00+00:00 in 1.0 min" in out and "on NVIDIA H100" in out
    assert "note: you asked for --device cpu, but this stored record was computed on cuda:0; --force recomputes" in out
    assert main(["run", "isoloss.tab1", "--preset", "smoke"]) == 0  # auto: no note
    assert "note:" not in capsys.readouterr().out


def test_run_show_config_lists_dotted_settings_without_compute(store, capsys, monkeypatch):
    from gradalign.records import runner
    from gradalign.config import settings_fields
    from gradalign.experiments import get

    monkeypatch.setattr(runner, "run", lambda *args, **kwargs: pytest.fail("--show-config computed"))
    assert main(["run", "lga.fig1", "--preset", "smoke", "--set", "steps=400", "--show-config"]) == 0
    out = capsys.readouterr().out
    assert "  steps = 400" in out
    for name in settings_fields(get("lga.fig1").config):
        assert f"  {name} = " in out
    assert not store.root.exists()


def test_bad_input_exits_2_with_one_line(store, capsys):
    assert main(["run", "lga.fig1", "--preset", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gradalign: error: unknown preset") and "\n" not in err
    assert main(["run", "lga.fig1", "--set", "steps=-5"]) == 2
    assert main(["frobnicate"]) == 2  # argparse's own errors are one line too
    assert capsys.readouterr().err.splitlines()[-1].startswith("gradalign: error: argument command: invalid choice")


def test_help_exits_0(capsys):
    assert main(["run", "--help"]) == 0
    assert "--show-config" in capsys.readouterr().out


def test_run_and_bench_work_without_submitit_and_the_book_toolchain(tmp_path):
    """The GPU machine has torch and torchvision only: `run` and `bench` must not need submitit or Jupyter."""
    code = (
        "import sys; sys.modules['submitit'] = None; from gradalign.cli import main; "
        "assert main(['run', 'lga.alg1', '--preset', 'smoke']) == 0; "
        "assert main(['bench', 'sgr_step', '--quick', '--device', 'cpu']) == 0; "
        "bad = [m for m in ('papermill', 'jupyter_book', 'sphinx', 'nbformat', 'matplotlib') if m in sys.modules]; "
        "assert not bad, bad"
    )
    env = {**os.environ, "GRADALIGN_RESULTS": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_run_works_without_tqdm(tmp_path):
    """A GPU machine may lack tqdm: progress bars fall back to silence, the run still completes."""
    code = (
        "import sys; sys.modules['tqdm'] = None; from gradalign.cli import main; "
        "from gradalign.progress import progress; "
        "assert list(progress(range(3))) == [0, 1, 2]; "
        "bar = progress(None, total=2).__enter__(); bar.update(1); bar.set_postfix(loss='1'); "
        "assert main(['run', 'lga.fig1', '--preset', 'smoke']) == 0"
    )
    env = {**os.environ, "GRADALIGN_RESULTS": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
