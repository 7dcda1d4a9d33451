"""Every bad command-line input: exit status 2, one line on stderr, and nothing computed or loaded.

Each case calls `gradalign.cli.main` in-process. The `no_compute` fixture makes the runner, every
registered experiment and the image loaders fail the test if they are called, and the case checks that
no record was written. Field names are looked up with `settings_fields`, so a case keeps testing the
same setting when it moves into a method's nested settings (`lr` -> `siamese.lr`).
"""

import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gradalign.records import runner
from gradalign.cli import main
from gradalign.config import settings_fields
from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.runtime import check_device, pin_threads, select_device, threads_from_env


def field(element_id: str, leaf: str) -> str:
    """The dotted name of setting `leaf` in the experiment's config (`lr` or, once nested, `siamese.lr`)."""
    names = settings_fields(EXPERIMENTS[element_id].config)
    if leaf in names:
        return leaf
    matches = [n for n in names if n.endswith(f".{leaf}")]
    assert matches, f"{element_id} has no setting named {leaf}: {names}"
    return matches[0]


def assert_one_line_error(capsys, argv: list[str], fragment: str = "", store=None) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gradalign: error: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err and captured.out == ""
    if store is not None:
        assert not list(store.root.rglob("*.json")), "a record was written"
    return lines[0]


SET_CASES = [
    # (element id, setting, value as typed, fragment of the error)
    ("lga.fig1", "steps", "abc", "steps must be an integer"),
    ("lga.fig1", "steps", "2000.5", "steps must be an integer"),
    ("lga.fig1", "steps", "true", "steps must be an integer"),
    ("lga.fig1", "steps", "NaN", "steps must be an integer"),
    ("lga.fig1", "steps", "[100]", "steps must be an integer"),
    ("lga.fig1", "steps", "", "steps must be an integer"),
    ("lga.fig1", "steps", "null", "steps must be an integer"),
    ("lga.fig1", "steps", "0", "steps "),
    ("lga.fig1", "seed", "0.5", "seed must be an integer"),
    ("lga.fig1", "seed", "-1", "seed must be >= 0"),
    ("lga.fig1", "seed", "false", "seed must be an integer"),
    ("lga.fig1", "alpha_w", "NaN", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "Infinity", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "-Infinity", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "1e999", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "abc", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", '"0.1"', "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "true", "alpha_w must be a finite number"),
    ("lga.fig1", "alpha_w", "-1", "alpha_w "),
    ("lga.fig1", "lambda_l", "3", "lambda_l must be a list"),
    ("lga.fig1", "lambda_l", '[0.5, "x"]', "LinearLGAConfig"),
    ("lga.fig1", "lambda_l", "[2.0, 1.0]", "lambda_l "),
    ("lga.fig1", "lambda_l", "[]", "lambda_l "),
    ("lga.prop1", "steps", "-5", "steps "),
    ("lga.prop2-3", "n_u", "0", "n_u "),
    ("lga.alg1", "m", "0", "m "),
    ("lga.fig2", "n", "4", "n "),
    ("lga.fig3", "steps", "2.5", "steps must be an integer"),
    ("lga.fig3", "lr", "NaN", "lr must be a finite number"),
    ("lga.fig5", "labels", "[55]", "labels "),
    ("lga.fig5", "labels", "250", "labels must be a list"),
    ("lga.fig5", "labels", '[250, "x"]', ""),
    ("lga.fig5", "methods", '["nope"]', "methods "),
    ("lga.fig5", "dataset", "mnist", "dataset "),
    ("lga.tab1", "columns", "5", "columns must be a list"),
    ("lga.tab1", "columns", "[[1, 2]]", "columns"),
    ("isoloss.eq5-8", "alphas", "[]", "alphas "),
    ("isoloss.fig2", "activation", "tanh", "activation "),
    ("isoloss.fig2", "activation", "3", "activation must be a string"),
    ("isoloss.fig2", "lr", "Infinity", "lr must be a finite number"),
    ("isoloss.tab1", "lr", "NaN", "lr must be a finite number"),
    ("isoloss.tab1", "lr", "abc", "lr must be a finite number"),
    ("isoloss.tab1", "lr", "true", "lr must be a finite number"),
    ("isoloss.tab1", "epochs", "[0]", "epochs"),
    ("isoloss.tab1", "datasets", '["mnist"]', "datasets "),
]


@pytest.mark.parametrize(
    "element_id, leaf, value, fragment", SET_CASES, ids=[f"{e}:{leaf}={v}" for e, leaf, v, _ in SET_CASES]
)
def test_bad_setting_is_one_line_error_before_compute(no_compute, capsys, element_id, leaf, value, fragment):
    argv = ["run", element_id, "--preset", "smoke", "--set", f"{field(element_id, leaf)}={value}"]
    assert_one_line_error(capsys, argv, fragment, store=no_compute)


TYPED_ITEM_CASES = [
    ("isoloss.tab1", "epochs", "[8.5]"),
    ("isoloss.tab1", "bench_dims", '[16, "x"]'),
    ("lga.fig5", "labels", "[250, true]"),
]


@pytest.mark.parametrize("element_id, leaf, value", TYPED_ITEM_CASES)
def test_wrong_typed_item_of_an_annotated_tuple(no_compute, capsys, element_id, leaf, value):
    """Items are checked once a field names its item type (`tuple[int, ...]`); a bare `tuple` checks none."""
    import typing

    name = field(element_id, leaf)
    owner = EXPERIMENTS[element_id].config
    for part in name.split(".")[:-1]:
        owner = typing.get_type_hints(owner)[part]
    if typing.get_type_hints(owner)[leaf] is tuple:
        pytest.skip(f"{owner.__name__}.{leaf} is a bare tuple: its items are not typed yet")
    argv = ["run", element_id, "--preset", "smoke", "--set", f"{name}={value}"]
    assert_one_line_error(capsys, argv, f"{leaf} must be a list of", store=no_compute)


ARGV_CASES = [
    (["run", "lga.fig1", "--set", ""], "must look like key=value"),
    (["run", "lga.fig1", "--set", "=3"], "must look like key=value"),
    (["run", "lga.fig1", "--set", "steps"], "must look like key=value"),
    (["run", "lga.fig1", "--set", " =3"], "must look like key=value"),
    (["run", "lga.fig1", "--set", "stepz=3"], "unknown parameter 'stepz'"),
    (["run", "lga.fig1", "--set", "steps.lr=3"], "unknown parameter 'steps.lr'"),
    (["run", "lga.fig1", "--set", "trial.nope=3"], "unknown parameter 'trial.nope'"),
    (["run", "lga.nope"], "unknown element id 'lga.nope'"),
    (["run", "nonsense"], "unknown element id"),
    (["run", "sgr.tab2"], "preset 'cpu' is not defined for this experiment; choose one of: smoke, paper"),
    (["run", "lga.fig1", "--preset", "huge"], "unknown preset 'huge'"),
    (["run", "lga.fig1", "--preset", ""], "unknown preset"),
    (["run", "lga.fig1", "--device", "tpu"], "unknown device 'tpu'"),
    (["run", "lga.fig1", "--device", ""], "unknown device ''"),
    (["run", "lga.fig1", "--device", "cuda:x"], "unknown device 'cuda:x'"),
    (["run", "lga.fig1", "--device", "CPU"], "unknown device 'CPU'"),
    (["run", "lga.fig1", "--device", "cuda:7"], "cuda:7"),
    (["nope"], "invalid choice"),
    ([], "required"),
    (["run"], "required: id"),
    (["run", "lga.fig1", "--bogus"], "unrecognized arguments"),
    (["run", "lga.fig1", "--preset"], "expected one argument"),
]


@pytest.mark.parametrize("argv, fragment", ARGV_CASES, ids=[" ".join(a) or "(none)" for a, _ in ARGV_CASES])
def test_bad_argument_is_one_line_error_before_compute(no_compute, capsys, argv, fragment):
    if "cuda:7" in argv and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert_one_line_error(capsys, argv, fragment, store=no_compute)


def test_unknown_setting_lists_every_valid_name(no_compute, capsys):
    line = assert_one_line_error(capsys, ["run", "lga.fig5", "--set", "stepz=3"], "choose from")
    for name in settings_fields(EXPERIMENTS["lga.fig5"].config):
        assert name in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is present on this machine")
def test_cuda_without_cuda_is_one_line_error(no_compute, capsys):
    assert_one_line_error(
        capsys, ["run", "isoloss.tab1", "--device", "cuda"], "CUDA is not available", store=no_compute
    )


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5", "2000", "2 threads"])
def test_bad_threads_variable_is_one_line_error(no_compute, capsys, monkeypatch, value):
    monkeypatch.setenv("GRADALIGN_THREADS", value)
    argv = ["run", "lga.fig1", "--preset", "smoke"]
    line = assert_one_line_error(capsys, argv, "GRADALIGN_THREADS must be an integer", store=no_compute)
    assert repr(value) in line


def test_results_root_that_is_a_file(no_compute, capsys, tmp_path):
    existing = tmp_path / "results.json"
    existing.write_text("{}")
    assert_one_line_error(capsys, ["run", "lga.fig1", "--results", str(existing)], "is a file")
    assert_one_line_error(capsys, ["run", "lga.fig1", "--results", str(existing / "below")], "cannot be created")
    assert existing.read_text() == "{}"


def test_results_variable_that_is_a_file(no_compute, capsys, tmp_path, monkeypatch):
    existing = tmp_path / "results.txt"
    existing.write_text("")
    monkeypatch.setenv("GRADALIGN_RESULTS", str(existing))
    assert_one_line_error(capsys, ["run", "lga.fig1"], "is a file")


def test_preset_not_defined_for_the_experiment(no_compute, capsys, monkeypatch):
    exp = EXPERIMENTS["lga.fig1"]
    presets = {name: values for name, values in exp.presets.items() if name != "paper"}
    monkeypatch.setitem(EXPERIMENTS, "lga.fig1", dataclasses.replace(exp, presets=presets))
    assert_one_line_error(
        capsys, ["run", "lga.fig1", "--preset", "paper"], "preset 'paper' is not defined", store=no_compute
    )


def test_bad_override_fails_with_preset_auto(no_compute, capsys):
    assert_one_line_error(
        capsys,
        ["run", "lga.fig1", "--preset", "auto", "--set", "steps=abc"],
        "steps must be an integer",
        store=no_compute,
    )


def test_device_is_checked_even_when_a_record_is_stored(no_compute, capsys, monkeypatch):
    stored = {
        "id": "lga.fig1",
        "preset": "smoke",
        "config_hash": "0" * 12,
        "verdict": {"status": "reproduced"},
        "checks": {},
        "provenance": {"hardware": "CPU", "device": "cpu", "wall_time_s": 1.0},
    }
    monkeypatch.setattr(runner, "stored_record", lambda *args, **kwargs: stored)
    monkeypatch.setattr(runner, "best_stored_preset", lambda *args, **kwargs: "smoke")
    assert_one_line_error(capsys, ["run", "lga.fig1", "--preset", "smoke", "--device", "tpu"], "unknown device")
    assert_one_line_error(capsys, ["run", "lga.fig1", "--preset", "auto", "--device", "cuda:99"], "cuda:99")


def test_first_bad_input_wins_and_nothing_else_is_printed(no_compute, capsys, monkeypatch):
    monkeypatch.setenv("GRADALIGN_THREADS", "0")
    assert_one_line_error(capsys, ["run", "lga.nope", "--device", "tpu", "--set", "x"], "GRADALIGN_THREADS")


# --- the runtime checks behind the CLI -------------------------------------------------------------


@pytest.mark.parametrize("name", ["tpu", "cuda:x", "", "cuda:", "cuda:-1", "gpu", " cpu"])
def test_malformed_device_names(name):
    with pytest.raises(ConfigError, match="choose one of: auto, cpu"):
        check_device(name)
    with pytest.raises(ConfigError):
        select_device(name)


def test_device_beyond_the_count():
    with pytest.raises(ConfigError, match="choose one of"):
        check_device(f"cuda:{torch.cuda.device_count()}")


def test_valid_devices():
    assert select_device("cpu") == torch.device("cpu")
    assert select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert check_device("auto") is None and check_device("cpu") is None


def test_threads_from_env(monkeypatch):
    monkeypatch.delenv("GRADALIGN_THREADS", raising=False)
    assert threads_from_env() == 2
    monkeypatch.setenv("GRADALIGN_THREADS", "3")
    assert threads_from_env() == 3
    monkeypatch.setenv("GRADALIGN_THREADS", "abc")
    with pytest.raises(ConfigError, match=r"^GRADALIGN_THREADS must be an integer >= 1; got 'abc'$"):
        threads_from_env()
    with pytest.raises(ConfigError):
        pin_threads()
    with pytest.raises(ConfigError):
        pin_threads(0)
    assert pin_threads(2) == 2


# --- a closed pipe is not an error ----------------------------------------------------------------


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone: every write raises BrokenPipeError."""

    def __init__(self, fd: int):
        self._fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self._fd


def test_broken_pipe_exits_0_in_process(monkeypatch, capsys, tmp_path):
    with open(tmp_path / "stdout", "w") as handle:
        monkeypatch.setattr(sys, "stdout", _ClosedPipe(handle.fileno()))
        assert main(["list"]) == 0
    assert capsys.readouterr().err == ""


def _gradalign() -> list[str]:
    script = Path(sys.executable).parent / "gradalign"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gradalign"]


def test_list_piped_into_head_exits_0_without_traceback():
    command = " ".join(f"'{part}'" for part in _gradalign()) + " list | head -1"
    unbuffered = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line its own write: head leaves mid-output
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=unbuffered)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr


def test_list_into_a_closed_pipe_exits_0_without_traceback():
    process = subprocess.Popen(_gradalign() + ["list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader leaves before the first line is written
    err = process.stderr.read().decode()
    assert process.wait() == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
