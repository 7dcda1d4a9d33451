"""The smaller items of issue 48 (item 7) and two frozen fixes of issue 44 (item 3), each with a passing and a failing
case: ASCII digits only in GRADALIGN_THREADS; one rule for an empty folder variable (the data loaders refuse an empty
GRADALIGN_DATA as the commands do) and no partial file from an unpacking that fails; a resumed run says so; a run
entry's wall time covers every sitting; the time box stops a run between evaluations; one checkpoint validation."""

import errno
import gzip
import json
import shutil
import time

import pytest

from gradalign.records import runner
from gradalign.training import timebox
from gradalign.cli import main
from gradalign.data import fashion_mnist, image_sets, imagenet_folder, ssl_data  # noqa: F401 (ssl_data: see below)
from gradalign.errors import ConfigError
from gradalign.store.run_unit import Unit, committed_runs, read_entry
from gradalign.runtime import threads_from_env
from gradalign.training import checkpoint as checkpoint_module
from test_loop import STEPS, FakeRun, Interrupted, assert_same_result, train

# ssl_data is imported here, not first inside a `no_compute` test: that fixture patches image_sets.load_image_set
# before it imports ssl_data, which would then bind the forbidden loader for good (and the LGA run below fail).

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")


def _one_line(capsys, code: int, fragment: str) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradalign: error: ") and fragment in lines[0], captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


# ---- GRADALIGN_THREADS: ASCII digits only ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["２", "1２", "٢", "८", "\u30002"]
)  # full-width, Arabic-Indic, Devanagari, ideographic space
def test_threads_in_other_digits_are_one_line_and_nothing_computed(no_compute, capsys, monkeypatch, value):
    monkeypatch.setenv("GRADALIGN_THREADS", value)
    line = _one_line(capsys, main(["run", "lga.fig1", "--preset", "smoke"]), "GRADALIGN_THREADS must be an integer")
    assert repr(value) in line
    assert not list(no_compute.root.rglob("*.json"))


@pytest.mark.parametrize("value, threads", [("2", 2), (" 3 ", 3), ("+4", 4)])
def test_threads_in_ascii_digits_are_taken(monkeypatch, value, threads):
    monkeypatch.setenv("GRADALIGN_THREADS", value)
    assert threads_from_env() == threads


# ---- one rule for an empty folder variable ------------------------------------------------------------------------

LOADERS = {
    "data_root": lambda: fashion_mnist.data_root(),
    "fashion_mnist": lambda: fashion_mnist.load_fashion_mnist(),
    "cifar10": lambda: image_sets.load_image_set("cifar10", "test"),
    "svhn": lambda: image_sets.load_image_set("svhn", "test"),
    "imagenet": lambda: imagenet_folder.imagenet_root(),
}


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_the_data_loaders_refuse_an_empty_data_variable_in_one_line(monkeypatch, loader, value):
    monkeypatch.setenv("GRADALIGN_DATA", value)
    with pytest.raises(ConfigError, match=r"^GRADALIGN_DATA is set but empty; give it a folder, or unset it") as err:
        LOADERS[loader]()
    assert "\n" not in str(err.value)


def test_the_data_root_is_the_variable_or_the_given_root(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADALIGN_DATA", str(tmp_path / "d"))
    assert fashion_mnist.data_root() == tmp_path / "d"
    assert imagenet_folder.imagenet_root() == tmp_path / "d" / "imagenet"
    monkeypatch.setenv("GRADALIGN_DATA", "")
    assert fashion_mnist.data_root(tmp_path / "given") == tmp_path / "given"  # a root given: the variable unread
    assert imagenet_folder.imagenet_root(str(tmp_path / "in")) == tmp_path / "in"
    monkeypatch.delenv("GRADALIGN_DATA")
    assert fashion_mnist.data_root().name == "data"


@pytest.mark.parametrize("variable", ["GRADALIGN_DATA", "GRADALIGN_RESULTS", "GRADALIGN_CACHE"])
def test_every_folder_variable_follows_the_same_rule_in_the_commands(no_compute, capsys, monkeypatch, variable):
    monkeypatch.setenv(variable, " ")
    _one_line(capsys, main(["run", "lga.fig5", "--preset", "smoke"]), f"{variable} is set but empty")


def _debian_files(folder):
    folder.mkdir()
    for name in fashion_mnist.FILES:
        (folder / f"{name}.gz").write_bytes(gzip.compress(name.encode() * 64))
    return folder


def test_unpacking_that_fails_leaves_no_partial_file(tmp_path, monkeypatch):
    source, root = _debian_files(tmp_path / "debian"), tmp_path / "data"
    copy = shutil.copyfileobj

    def full_disk(src, dst, *args):
        dst.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    with pytest.raises(OSError, match="No space left"):
        fashion_mnist.prepare_fashion_mnist(root, source=source)
    raw = fashion_mnist.raw_dir(root)
    assert raw.is_dir() and not list(raw.iterdir())  # neither a .tmp nor a cut file
    monkeypatch.setattr(shutil, "copyfileobj", copy)
    assert fashion_mnist.prepare_fashion_mnist(root, source=source) == raw  # the same call, with room: done
    assert sorted(p.name for p in raw.iterdir()) == sorted(fashion_mnist.FILES)


def test_a_cut_gzip_is_one_line_and_leaves_no_partial_file(tmp_path):
    source, root = _debian_files(tmp_path / "debian"), tmp_path / "data"
    packed = (source / f"{fashion_mnist.FILES[1]}.gz").read_bytes()
    (source / f"{fashion_mnist.FILES[1]}.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(fashion_mnist.MalformedDataError, match="is not a whole gzip file"):
        fashion_mnist.prepare_fashion_mnist(root, source=source)
    assert not list(fashion_mnist.raw_dir(root).glob("*.tmp"))


# ---- a resumed run says so ----------------------------------------------------------------------------------------


def test_a_resumed_run_says_where_it_resumed_once(tmp_path, capsys):
    path = tmp_path / "run.pt"
    train(FakeRun(), tmp_path / "fresh.pt")
    assert "resumed" not in capsys.readouterr().err  # a run from scratch says nothing
    with pytest.raises(Interrupted):
        train(FakeRun(interrupt_at=7), path)  # checkpointed after step 6
    capsys.readouterr()
    train(FakeRun(), path)
    err = capsys.readouterr().err
    assert err.count("resumed from step") == 1 and "fake resumed from step 6 of 10 (3 evaluations done" in err


# ---- a run entry's wall time covers every sitting -----------------------------------------------------------------

SLEEP = 0.03


class Killed(BaseException):
    """Stands for a kill between two checkpoints (a KeyboardInterrupt, a SIGTERM)."""


def _compute(interrupt_at, checkpoint):
    run = FakeRun(interrupt_at=interrupt_at, sleep=SLEEP)
    try:
        out = train(run, checkpoint)
    except Interrupted:
        raise Killed from None
    return {"history": out.history, "device": "cpu"}


def _unit(interrupt_at=None) -> Unit:
    import functools

    return Unit("fake", "test.sittings", {"run": 1}, 1, functools.partial(_compute, interrupt_at))


def test_a_killed_and_resumed_runs_entry_counts_both_sittings(tmp_path):
    committed, cache = tmp_path / "runs", tmp_path / "cache"
    with committed_runs(committed, write=True):
        with pytest.raises(Killed):
            _unit(interrupt_at=7).run(cache)  # steps 1-6 checkpointed, then killed
        assert read_entry(committed, _unit()) is None
        begun = time.perf_counter()
        value = _unit().run(cache)  # steps 7-10
        second = time.perf_counter() - begun
    provenance = read_entry(committed, _unit())["provenance"]
    assert provenance["parts"] == 2
    assert provenance["wall_time_s"] >= STEPS * SLEEP  # all ten steps' sleeps, six of them in the killed sitting
    assert provenance["wall_time_s"] > second  # more than the last sitting took
    assert value["history"]["step"] == [2, 4, 6, 8, 10]


def test_a_run_in_one_sitting_has_its_own_wall_time_and_no_parts(tmp_path):
    with committed_runs(tmp_path / "runs", write=True):
        begun = time.perf_counter()
        _unit().run(tmp_path / "cache")
        whole = time.perf_counter() - begun
    provenance = read_entry(tmp_path / "runs", _unit())["provenance"]
    assert "parts" not in provenance and STEPS * SLEEP <= provenance["wall_time_s"] <= whole
    kinds = {"cpu_kind", "machine_kind"}
    assert set(provenance) == {"hardware", "device", "torch", "git_commit", "wall_time_s", "date"} | kinds


# ---- the time box stops a run between evaluations -----------------------------------------------------------------


class SteppedRun(FakeRun):
    resumes_between_evaluations = True


def _first_eval_at_the_end(t: int) -> bool:
    return t == STEPS


def test_the_time_box_stops_a_run_before_its_first_evaluation_and_it_resumes_bitwise(tmp_path, monkeypatch):
    reference = SteppedRun()
    ref_out = train(reference, eval_at=_first_eval_at_the_end)
    path = tmp_path / "run.pt"
    stopped = SteppedRun(sleep=SLEEP)
    stop = r"time box: fake stopped after step \d of 10, checkpointed"
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr(timebox, "seconds_left", lambda: 2.5 * SLEEP)  # the box closes in step 3
        with pytest.raises(timebox.TimeBoxSpent, match=stop) as err:
            train(stopped, path, eval_at=_first_eval_at_the_end)
    step = int(str(err.value).split("after step ")[1].split()[0])  # 3 on an idle machine, sooner on a busy one
    assert stopped.evaluations == [] and path.exists()  # stopped at the first step past the box, before evaluating
    assert checkpoint_module.load_checkpoint(path, "fake run, seed 0")["loop"]["step"] == step
    resumed = SteppedRun()
    out = train(resumed, path, eval_at=_first_eval_at_the_end)
    assert_same_result(out, ref_out, resumed, reference)
    assert resumed.evaluations == reference.evaluations  # the one evaluation, with the sums of all ten steps


def test_a_run_that_cannot_resume_between_evaluations_is_stopped_only_at_one(tmp_path, monkeypatch):
    run = FakeRun(sleep=SLEEP)  # no resumes_between_evaluations: the old rule, an evaluation or checkpoint
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr(timebox, "seconds_left", lambda: 2.5 * SLEEP)
        out = train(run, tmp_path / "run.pt", eval_at=_first_eval_at_the_end)
    assert out.complete and [e[0] for e in run.evaluations] == [STEPS]


def test_a_run_not_stopped_is_unchanged_by_the_deadline(tmp_path, monkeypatch):
    reference = SteppedRun()
    ref_out = train(reference)
    run = SteppedRun()
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr(timebox, "seconds_left", lambda: 3600.0)
        out = train(run, tmp_path / "run.pt")
    assert_same_result(out, ref_out, run, reference)


def test_lga_fig5_stops_at_its_first_step_past_the_box_not_at_its_first_evaluation(tmp_path, monkeypatch, store):
    from gradalign.training import ssl as ssl_training

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    with timebox.time_box(10.0), monkeypatch.context() as patch:
        for module in (timebox, ssl_training):
            patch.setattr(module, "seconds_left", lambda: 1e-9)
        with pytest.raises(timebox.TimeBoxSpent, match=r"\(seed \d+\) stopped after step 1 of \d+, checkpointed"):
            runner.run("lga.fig5", "smoke", {"methods": ("supervised",), "labels": (50,)}, store=store)
    assert list((tmp_path / "cache").rglob("*.pt")) and not list(store.root.rglob("*.json"))


def test_ssl_and_semimeta_runs_resume_between_evaluations_and_others_do_not():
    from gradalign.training.local import LocalRun
    from gradalign.training.semimeta import SemiMetaRun
    from gradalign.training.siamese import SiameseRun
    from gradalign.training.ssl import SSLRun

    assert SSLRun.resumes_between_evaluations and SemiMetaRun.resumes_between_evaluations
    assert not any(getattr(run, "resumes_between_evaluations", False) for run in (LocalRun, SiameseRun))


# ---- one checkpoint validation ------------------------------------------------------------------------------------


def test_carried_checkpoints_are_checked_by_the_loaders_own_validation(tmp_path):
    from gradalign.compute import window_carry

    assert window_carry.checkpoint_problem is checkpoint_module.checkpoint_problem
    path = checkpoint_module.save_checkpoint(tmp_path / "run.pt", "run-a", {"loop": {"step": 3}})
    raw = path.read_bytes()
    assert checkpoint_module.checkpoint_problem(raw) is None
    assert checkpoint_module.load_checkpoint(path, "run-a")["loop"]["step"] == 3
    head, _, payload = raw.partition(b"\n")
    twice = head[:-1] + b', "format": 2}\n' + payload  # a key twice: refused by both, not only by the loader
    cases = {
        "cut short": raw[:-5],
        "edited": raw[:-1] + bytes([raw[-1] ^ 1]),
        "no header": b"\x80\x02garbage",
        "a key twice": twice,
        "header not an object": b"[1]\n" + payload,
    }
    for what, damaged in cases.items():
        problem = checkpoint_module.checkpoint_problem(damaged)
        assert problem and "\n" not in problem, what
        (tmp_path / "damaged.pt").write_bytes(damaged)
        with pytest.warns(checkpoint_module.CheckpointWarning, match=problem.split(" (")[0]):
            assert checkpoint_module.load_checkpoint(tmp_path / "damaged.pt", "run-a") is None, what
    assert json.loads(head)["fingerprint"] == "run-a"
