"""Nothing is stored that did not happen (issue 25, items 1 and 2).

- Divergence (`divergence`, applied by the one loop at every evaluation): a NaN, an exploded loss, or a metric
  back at chance once training started stops the run with one line naming the step and the quantity; nothing
  is cached or recorded. One diverging experiment per part, at smoke scale, through the command line.
- A record without checks is refused (`experiments.base.outcome`).
- The time box (`timebox`): each part's experiment stops by it, checkpointed, records nothing, and the same
  command resumes to the record of a run never stopped, whose wall time sums every part (`runner.PartsLedger`);
  an experiment that cannot stop by it refuses `--time-limit` before any compute.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from gradalign.records import runner
from gradalign.training import timebox
from gradalign.cli import main
from gradalign.methods.divergence import (
    ChanceLevel,
    accuracy_chance,
    error_chance,
    raise_if_at_chance,
    raise_if_exploded,
)
from gradalign.errors import ConfigError, DivergenceError
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.base import check, outcome
from gradalign.records.results import ResultStore
from gradalign.training import ssl as ssl_training

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("GRADALIGN_THREADS", "1")
    torch.set_num_threads(1)


# ---- the rules -------------------------------------------------------------------------------------------


def test_a_non_finite_value_or_an_exploded_loss_is_a_divergence_and_other_large_values_are_not():
    with pytest.raises(DivergenceError, match=r"^run diverged at step 7: test_loss = nan; "):
        raise_if_exploded("run", 7, {"test_loss": math.nan})
    with pytest.raises(DivergenceError, match=r"^run diverged at step 7: by_module = inf; "):
        raise_if_exploded("run", 7, {"by_module": [1.0, None, math.inf]})
    with pytest.raises(DivergenceError, match=r"^run diverged at step 3: val_loss = 2\.4e\+15 \(exploded"):
        raise_if_exploded("run", 3, {"val_loss": 2.4e15})
    raise_if_exploded("run", 3, {"val_loss": 9.9e5, "lr": 1e6, "sgr": 1e9, "note": None, "flag": True})


def test_back_at_chance_only_once_training_started():
    acc = accuracy_chance("test_acc", 10)
    assert (acc.level, acc.perfect) == (10.0, 100.0)
    raise_if_at_chance("run", 4, acc, 11.0, [12.0, 30.0])  # never came halfway from chance: a short run
    raise_if_at_chance("run", 3, acc, 10.0, [36.5, 51.7])  # a quarter of the way, then at chance once: not yet
    with pytest.raises(DivergenceError, match="test_acc = 10, back at chance"):  # twice in a row (a BP-free pilot)
        raise_if_at_chance("run", 4, acc, 10.0, [36.5, 51.7, 10.0])
    raise_if_at_chance("run", 4, acc, 10.0, [20.0, 28.0, 10.0])  # never came a quarter of the way
    raise_if_at_chance("run", 4, acc, 40.0, [80.0])  # worse, not at chance
    with pytest.raises(DivergenceError, match=r"^run diverged at step 4: test_acc = 11, back at chance \(10; "):
        raise_if_at_chance("run", 4, acc, 11.0, [None, 12.0, 70.0])
    err = error_chance("val_error", 10)
    raise_if_at_chance("run", 2, err, 90.0, [89.0])
    with pytest.raises(DivergenceError, match="val_error = 90"):
        raise_if_at_chance("run", 2, err, 90.0, [20.0])
    probe = accuracy_chance("probe_test_acc", 10, percent=False, started=True)  # beats chance untrained
    raise_if_at_chance("run", 2, probe, 0.5)
    with pytest.raises(DivergenceError, match="probe_test_acc = 0.1094, back at chance"):
        raise_if_at_chance("run", 2, probe, 0.1094)
    assert ChanceLevel("x", 50.0, 100.0).at_chance(55.0) and not ChanceLevel("x", 50.0, 100.0).at_chance(56.0)


# ---- diverging runs, one per part, through the command line ---------------------------------------------


def _run_cli(tmp_path, monkeypatch, capsys, *args) -> tuple[int, str]:
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    status = main(["run", *args, "--preset", "smoke", "--results", str(tmp_path / "results")])
    return status, capsys.readouterr().err


def _stored(tmp_path) -> list:
    """Every record and every finished run-cache entry under tmp_path."""
    return [*(tmp_path / "results").rglob("*.json"), *(tmp_path / "cache").glob("runs/*/*.json")]


@pytest.mark.parametrize(
    "element_id, settings, message",
    [
        (  # LGA's test loss reached 2.4e15 and was stored
            "lga.fig5",
            ['methods=["lga"]', "labels=[50]", "lga.lr=1e6"],
            r"LGA diverged at step \d+: val_loss = [0-9.e+]+ \(exploded",
        ),
        ("metagrad.tab4", ["protocol.lr=1e6"], r"diverged at step \d+: test_loss = nan"),
        (  # a collapse is a Siamese run's result (training.siamese.first_collapse); an exploding loss stops it
            "isoloss.tab1",
            ["siamese.lr=1e30"],
            r"Siamese training diverged at step \d+: the (previous loss|projector correlation) = ",
        ),
        (  # every tuning run of Figure 2's layer-wise arm diverged: it had fallen through to a KeyError
            "sgr.fig2",
            ["lrs=[1e6]"],
            r"Layer-wise diverged at every rate of its tuning grid \(1e\+06\); lower the rates",
        ),
        ("sgr.eq5-6", ["lr=1e6"], r"Algorithm 1 \(sgr\) diverged at step \d+: local losses = [0-9.e+]+ \(exploded"),
        ("sgr.prop35", ["eta=1e6"], r"diverged at step 1: loss L2' without SGR = [0-9.e+]+ \(exploded"),
    ],
)
def test_a_diverging_run_stops_in_one_line_and_stores_nothing(
    element_id, settings, message, tmp_path, monkeypatch, capsys
):
    sets = [arg for setting in settings for arg in ("--set", setting)]
    status, err = _run_cli(tmp_path, monkeypatch, capsys, element_id, *sets)
    assert status == 2 and err.startswith("gradalign: error:") and err.count("\n") == 1, err
    assert "lower" in err
    assert __import__("re").search(message, err), err
    assert _stored(tmp_path) == []


def test_a_local_tables_divergence_is_its_result_and_a_pilots_stops(monkeypatch):
    """Table 7's "fail" and a local method's final run in Tables 3, 6, 7: a run that diverges is stored at chance;
    a pilot's run (validation split) stops."""
    from gradalign.methods.local import LOCAL_METHODS, LocalSettings
    from gradalign.training import local as tl

    def nan_step(modules, heads, optimizers, x, y, settings):
        return {"loss": torch.tensor(float("nan")), "acc": torch.tensor(0.0)}

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (32, 1, 12, 12), generator=g, dtype=torch.uint8)
    test = torch.randn(16, 1, 12, 12, generator=g)
    data = tl.LocalData(images, torch.arange(32) % 10, test, torch.arange(16) % 10, (0.5,), (0.3,))

    def spec(method, modules, validation=0):
        return tl.LocalRunSpec(
            network="resnet32",
            method=LocalSettings(method=method, modules=modules),
            protocol=tl.SGRProtocol(epochs=1, batch_size=16),
            width=0.125,
            validation=validation,
        )

    for method, modules in (("global_bp", 1), ("sgr", 3)):
        monkeypatch.setitem(LOCAL_METHODS, method, nan_step)
    assert "diverged at step 2" in tl.train_local(spec("global_bp", 1), data=data)["diverged"]
    stored = tl.train_local(spec("sgr", 3), data=data)
    assert "SGR K=3 resnet32 seed 0 diverged at step 2: loss = nan" in stored["diverged"]
    assert stored["final_test_acc"] == 10.0
    with pytest.raises(DivergenceError, match="SGR K=3 resnet32 seed 0 diverged at step 2: loss = nan"):
        tl.train_local(spec("sgr", 3, validation=8), data=data)


def test_a_local_table_whose_runs_diverge_is_assembled_with_them_at_chance(tmp_path, monkeypatch, capsys):
    """Table 3 at a rate of 1e6: every run diverges, each is stored at chance, and the record says how many."""
    status, err = _run_cli(tmp_path, monkeypatch, capsys, "sgr.tab3", "--set", "protocol.lr=1e6")
    assert status == 0, err
    record = next((tmp_path / "results").rglob("sgr.tab3/smoke-*.json"))
    table = __import__("json").loads(record.read_text())["metrics"]["table"]
    summaries = [s for by_net in table.values() for by_method in by_net.values() for s in by_method.values()]
    assert summaries and all(s["diverged"] == s["n"] and s["mean"] == 10.0 for s in summaries)


# ---- a record with no checks ---------------------------------------------------------------------------


def test_an_outcome_without_checks_is_refused():
    with pytest.raises(ConfigError, match="no check of the paper's claims"):
        outcome({}, {"accuracy": 90.0})
    one = outcome({"c": check(True, 1.0, "rule", "claim")})
    assert one["checks"] and one["verdict"]


def test_sgr_table3_with_only_sgr_is_refused_not_recorded(tmp_path, monkeypatch, capsys):
    """It read "reproduced qualitatively at reduced scale" with zero checks."""
    status, err = _run_cli(
        tmp_path, monkeypatch, capsys, "sgr.tab3", "--set", 'methods=["sgr"]', "--set", 'networks=["resnet32"]'
    )
    assert status == 2 and err.startswith("gradalign: error:") and "no check" in err and err.count("\n") == 1
    assert not list((tmp_path / "results").rglob("*.json"))


# ---- the time box ----------------------------------------------------------------------------------------


def test_every_time_boxed_experiment_exists_and_others_refuse_the_box_before_any_compute(tmp_path, monkeypatch, capsys):
    assert timebox.TIME_BOXED <= set(EXPERIMENTS)

    def no_compute(*args, **kwargs):
        raise AssertionError("computed under a time box it cannot honour")

    monkeypatch.setattr(runner, "pin_threads", no_compute)  # the first step of a computation
    for element_id in ("lga.fig1", "sgr.prop35", "metagrad.thm1", "lga.fig3"):
        status, err = _run_cli(tmp_path, monkeypatch, capsys, element_id, "--time-limit", "5")
        assert status == 2 and err.count("\n") == 1 and f"{element_id} computes in one piece" in err, err
    assert not list(tmp_path.rglob("*.json"))
    with timebox.time_box(1.0):
        timebox.check_honoured("sgr.tab3")  # no error
    timebox.check_honoured("lga.fig1")  # outside a box: nothing to refuse


def _numbers(record: dict) -> dict:
    """What training computed: the checks' values and the curves, without wall times."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "seconds" not in k}
        return value

    return {"checks": strip(record["checks"]), "curves": strip(record["curves"])}


@pytest.mark.parametrize(
    "element_id, overrides",
    [
        ("lga.fig5", {"methods": ("supervised", "lga"), "labels": (50,)}),
        ("metagrad.tab4", {}),
        ("isoloss.tab1", {"epochs": (2,), "seeds": 1, "train_subset": 256, "siamese.probe_iterations": 20}),
        ("sgr.tab3", {"networks": ("resnet32",), "seeds": 1}),
    ],
)
def test_a_boxed_run_stops_records_nothing_and_resumes_to_the_record_of_a_run_never_stopped(
    element_id, overrides, tmp_path, monkeypatch
):
    boxed = ResultStore(tmp_path / "boxed-results")
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "boxed"))
    with timebox.time_box(10.0), monkeypatch.context() as patch:
        for module in (timebox, ssl_training):  # the LGA runs read the box through their own name
            patch.setattr(module, "seconds_left", lambda: 1e-9)  # nearly spent: one window, then stop
        with pytest.raises(timebox.TimeBoxSpent, match=r"stopped after (step|epoch) 2? ?\d* ?of \d+, checkpointed"):
            runner.run(element_id, "smoke", overrides, store=boxed)
    assert list((tmp_path / "boxed").rglob("*.pt"))  # the interrupted run's checkpoint
    assert not list(boxed.root.rglob("*.json"))  # no record
    (ledger,) = (tmp_path / "boxed" / "parts").rglob("*.json")
    first = json.loads(ledger.read_text())
    assert first["parts"] == 1 and first["seconds"] > 0
    resumed = runner.run(element_id, "smoke", overrides, store=boxed)
    assert resumed["provenance"]["parts"] == 2 and resumed["provenance"]["wall_time_s"] >= first["seconds"]
    assert not ledger.exists()
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "whole"))
    whole = runner.run(element_id, "smoke", overrides, store=ResultStore(tmp_path / "whole-results"))
    assert "parts" not in whole["provenance"]
    assert _numbers(resumed) == _numbers(whole)


def test_the_command_box_is_refused_under_torchrun_with_several_processes():
    """The loop would read each rank's own clock, and one rank could stop while the others wait for it."""
    from gradalign.training import loop
    from gradalign.training.distributed import DistributedContext, train_data_parallel

    second = DistributedContext(rank=1, world_size=2, local_rank=1, device=torch.device("cpu"))
    with timebox.time_box(5.0), pytest.raises(ConfigError, match="run without it under torchrun"):
        train_data_parallel(None, 4, context=second, eval_at=loop.every(2, 4), name="x")
