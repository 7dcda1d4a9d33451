"""The pilots (`gradalign.compute.pilots`): their runs are the elements' own runs under the candidate settings, and
a page reads them from the committed entries only, each judged by its element's finished-learning rule."""

from __future__ import annotations

import pytest

from gradalign.compute import pilots
from gradalign.experiments import reference
from gradalign.store.run_unit import write_entry


def test_lga_pilot_shares_its_supervised_run_with_the_reference():
    units = pilots.PILOTS["lga.fig7"].units(pilots.PILOTS["lga.fig7"])
    assert len(units) == 4 and sum("supervised" in u.label for u in units) == 1
    reference_seed0 = reference._units(reference.config("cpu"), 1000)[0]
    assert reference_seed0.key in {u.key for u in units}


def test_metagrad_pilot_tries_dropout_off_and_on():
    pilot = pilots.PILOTS["metagrad.tab4"]
    units = pilot.units(pilot)
    assert units[0].spec["dropout"] == 0.0  # off
    assert units[1].spec.get("dropout", 0.5) == 0.5  # the paper's rate (stored runs keep their keys: not written)
    assert len({u.key for u in units}) == 2 and all(u.spec["protocol"]["steps"] == 4000 for u in units)


def test_stored_reads_committed_entries_and_judges_each_run(tmp_path, monkeypatch):
    monkeypatch.setattr(pilots, "_committed", lambda: tmp_path)
    pilot = pilots.PILOTS["sgr.tab3"]
    layerwise, reforward, sgr = pilot.units(pilot)
    flat = [50.0, 70.0, 75.0, 76.0, 76.2, 76.3, 76.3, 76.4, 76.4, 76.5]  # +0.2 over the last 20 %: finished
    rising = [50.0, 60.0, 65.0, 68.0, 70.0, 71.0, 72.0, 73.0, 74.0, 75.5]  # +2.5: still learning
    for unit, curve in ((layerwise, flat), (sgr, rising)):
        value = {"history": {"epoch": list(range(1, 11)), "test_acc": curve}}
        write_entry(tmp_path, unit, value, {"hardware": "test", "wall_time_s": 1.0})
    rows = {r["label"]: r for r in pilots.stored("sgr.tab3")}
    assert rows[layerwise.label]["finished"] is True and rows[sgr.label]["finished"] is False
    assert rows[reforward.label] == {"label": reforward.label, "arm": "Reforward", "key": reforward.key, "done": False}
    assert rows[sgr.label]["arm"] == "SGR"


def test_unknown_pilot_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        pilots.main(["nope"])
    assert "unknown pilot(s) nope" in capsys.readouterr().err


def test_table7_pilot_is_seed_0_of_its_settings_and_closed_before_its_last_runs():
    from gradalign.experiments import get
    from gradalign.experiments.sgr.local_runs import CALIBRATED
    from gradalign.experiments.units import units_of
    from gradalign.compute.backlog import BACKLOG

    pilot = pilots.PILOTS["sgr.tab7"]
    units = pilot.units(pilot)
    assert len(units) == 9  # global BP, SGR and layer-wise (the term's reference) at depths 12, 37 and 57
    assert all(u.spec["protocol"]["epochs"] == 30 and u.spec["seed"] == 0 for u in units)
    sgr = [u for u in units if u.spec["method"]["method"] == "sgr"]
    assert len(sgr) == 3 and all(u.spec["method"]["lam"] == CALIBRATED["lam"] for u in sgr)
    three_seeds = units_of("sgr.tab7", get("sgr.tab7").resolve("cpu", {**pilot.overrides, "seeds": 3}))
    assert {u.key for u in units} < {u.key for u in three_seeds}
    assert "sgr.tab7" in pilots.ON_GPU and "sgr.tab7" in pilots.CLOSED  # answered before its last runs:
    assert ("sgr.tab7", "cpu", pilot.overrides) not in BACKLOG  # not trained further
    assert ("sgr.tab7", "cpu", pilots.RERUNS["sgr.tab7"]) in BACKLOG  # its rerun at sgr.lam7's λ is
    assert pilots.is_pilot("sgr.tab7", "cpu", pilot.overrides)  # a window commits its runs, assembles no record
    assert not pilots.is_pilot("sgr.tab7", "gpu", pilot.overrides)
    assert not pilots.is_pilot("sgr.tab7", "cpu", pilots.RERUNS["sgr.tab7"])  # a rerun's record is the point


def test_pilots_over_the_budget_train_here_only_when_asked(monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(pilots, "compute", lambda names, jobs: asked.append(names))
    with pytest.raises(SystemExit):  # a closed pilot is not trained, even when asked to
        pilots.main(["sgr.tab7", "--anyway"])
    assert "closed, its remaining runs are not trained" in capsys.readouterr().err
    monkeypatch.setattr(pilots, "CLOSED", {})  # were it open: a GPU pilot, trained here only when asked to
    pilots.main([])
    assert asked[-1] == [n for n in pilots.PILOTS if n not in pilots.ON_GPU] and "sgr.tab7" not in asked[-1]
    with pytest.raises(SystemExit):
        pilots.main(["sgr.tab7"])
    assert "over the two-core budget" in capsys.readouterr().err
    pilots.main(["sgr.tab7", "--anyway"])
    assert asked[-1] == ["sgr.tab7"]


def test_a_gpu_pilot_page_points_to_the_backlog_or_says_why_it_closed(tmp_path, monkeypatch, capsys):
    from gradalign.book.page_helpers import pilot_view

    monkeypatch.setattr(pilots, "_committed", lambda: tmp_path)  # nothing committed
    pilot_view("sgr.tab7", "epoch", "test accuracy (%)")
    out = capsys.readouterr().out
    assert "Not committed yet (9 of 9)" in out and "Closed before these runs" in out and "GPU backlog" not in out
    assert "python -m gradalign.compute.pilots" not in out
    assert "Global BP, VGG-12" in out and "SGR, VGG-57" in out  # each arm names its depth
    monkeypatch.setattr(pilots, "CLOSED", {})  # a GPU pilot still open: its runs wait in the backlog
    pilot_view("sgr.tab7", "epoch", "test accuracy (%)")
    out = capsys.readouterr().out
    assert "GPU backlog" in out and "Closed" not in out and "python -m gradalign.compute.pilots" not in out


def test_an_elements_runs_so_far_compare_only_arms_with_every_seed(tmp_path, monkeypatch):
    import IPython.display

    from gradalign.experiments import get
    from gradalign.experiments.units import units_of
    from gradalign.book.page_helpers import rerun_view

    monkeypatch.setattr(pilots, "_committed", lambda: tmp_path)
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "home"))  # its windows/: none yet
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda x: shown.append(getattr(x, "data", x)))
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: None)
    units = units_of("sgr.tab6", get("sgr.tab6").resolve("cpu"))
    k16 = [u for u in units if u.spec["method"]["modules"] == 16]

    def commit(method, finals, term):
        for unit, final in zip([u for u in k16 if u.spec["method"]["method"] == method], finals):
            history = {"epoch": [1, 2, 3, 4, 5], "test_acc": [50.0, 70.0, 80.0, 80.1, final], "sgr": [1.0] * 4 + [term]}
            write_entry(tmp_path, unit, {"history": history}, {"hardware": "test", "wall_time_s": 60.0})

    commit("greedy", [80.0, 80.5, 81.0], 1.0)
    commit("sgr", [82.0, 82.5], 0.3)  # two of three seeds: shown, not compared
    rerun_view("sgr.tab6", "greedy")
    assert "5 of 39 runs committed" in shown[0] and not any("From the arms" in str(s) for s in shown)
    commit("sgr", [82.0, 82.5, 83.0], 0.3)
    shown.clear()
    rerun_view("sgr.tab6", "greedy")
    interim = next(s for s in shown if "From the arms" in str(s))
    assert "K = 16: SGR − Greedy = +2.00 ± 0.41 SE points (SGR above Greedy, Welch's t at 5 %)" in interim
    assert "SGR's term / Greedy's = 0.30 (the precondition asks ≤ 0.5: met)" in interim
    commit("sgr", [80.0, 80.5, 81.0], 0.9)  # no gain, and the term did not fall
    shown.clear()
    rerun_view("sgr.tab6", "greedy")
    interim = next(s for s in shown if "From the arms" in str(s))
    assert (
        "(SGR within noise of Greedy, Welch's t at 5 %)" in interim
        and "= 0.90 (the precondition asks ≤ 0.5: not met)" in interim
    )
    bp = [u for u in units if u.spec["method"]["method"] == "global_bp"]  # no SGR term at K = 1
    for unit in bp:
        history = {"epoch": [1, 2, 3, 4, 5], "test_acc": [50.0, 70.0, 80.0, 80.1, 85.0], "sgr": [None] * 5}
        write_entry(tmp_path, unit, {"history": history}, {"hardware": "test", "wall_time_s": 60.0})
    shown.clear()
    rerun_view("sgr.tab6", "layerwise")  # no layer-wise arm in Table 6: nothing to compare with
    assert not any("From the arms" in str(s) for s in shown) and not any("Diverged" in str(s) for s in shown)


def test_a_rerun_or_budget_check_trains_here_only_its_uncommitted_named_runs_in_their_order(
    tmp_path, monkeypatch, capsys
):
    trained = []
    monkeypatch.setattr(pilots, "train_units", lambda units, jobs: trained.append([u.label for u in units]))
    monkeypatch.setattr(pilots, "_committed", lambda: tmp_path / "runs")
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))  # a run in this machine's cache is still trained
    units = pilots.rerun_units("sgr.tab7")
    assert len(units) == 27 and all(
        u.spec["protocol"]["epochs"] == pilots.RERUNS["sgr.tab7"]["protocol.epochs"] for u in units
    )
    pilots.main(["--rerun", "sgr.tab7", "--only", "SGR K=35", "Global BP K=1 vgg12"])
    assert trained[-1] == [f"SGR K=35 vgg37 seed {s}" for s in range(3)] + [
        f"Global BP K=1 vgg12 seed {s}" for s in range(3)
    ]
    for unit in units[:2]:  # committed: not trained again, and a prefix naming only committed runs is no error
        write_entry(tmp_path / "runs", unit, {"history": {}}, {"hardware": "test", "wall_time_s": 1.0})
    pilots.main(["--rerun", "sgr.tab7", "--only", units[0].label, units[1].label, units[2].label])
    assert trained[-1] == [units[2].label]
    pilots.main(["--rerun", "sgr.tab7"])
    assert trained[-1] == [u.label for u in units[2:]]
    pilots.main(["--budget", "sgr.tab6", "--only", "Greedy K=3", "Greedy"])  # a run two prefixes name: once
    assert len(trained[-1]) == 9 and len(set(trained[-1])) == 9 and trained[-1][0].startswith("Greedy K=3")
    for argv, message in [
        (["--rerun", "sgr.tab7", "--only", "Nope"], "--only 'Nope' names no run"),
        (["--rerun", "sgr.tab4"], "--rerun takes elements among"),
        (["--only", "SGR"], "--only applies to --budget or --rerun"),
        (["--rerun", "sgr.tab7", "--budget", "sgr.tab7"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit):
            pilots.main(argv)
        assert message in capsys.readouterr().err
    assert len(trained) == 4  # nothing trained on a refused command
    with pytest.raises(ValueError, match="no pending rerun"):
        pilots.rerun_units("sgr.tab4")


def test_the_fits_pilot_chooses_the_first_candidate_whose_every_run_fits():
    """Candidates in FITS_GRID's order: the first has a mixup arm at 17 % labeled-set error (it does not fit), the
    second a run not committed yet (undecided), the third fits everywhere: it is the answer."""
    from gradalign.compute.metagrad_pilots import FITS_GRID, fits_answer, fits_name

    names = [fits_name(*c) for c in FITS_GRID]
    arms = ("Labeled only", "Meta only", "Mixup only", "Meta + mixup")

    def runs(errors):
        return [{"arm": a, "done": e is not None, "labeled_error": e} for a, e in zip(arms, errors)]

    table = {names[0]: runs([3.4, 3.0, 16.8, 4.0]), names[1]: runs([3.0, 3.0, 4.0, None]), names[2]: runs([1.0] * 4)}
    stored = lambda name: table.get(name, runs([None] * 4))  # noqa: E731
    answer = fits_answer(stored)
    assert [r["fits"] for r in answer["rows"][:3]] == [False, False, True]
    assert answer["chosen"] == names[2] and answer["rows"][1]["done"] == 3
    table[names[2]] = runs([1.0, 1.0, 5.5, 1.0])
    assert fits_answer(stored)["chosen"] == "none yet"


def test_the_fits_pilots_over_the_cpu_budget_are_a_gpu_windows():
    from gradalign.compute.metagrad_pilots import FITS_GRID, fits_name

    for candidate in FITS_GRID:
        name = fits_name(*candidate)
        assert name in pilots.PILOTS and (name in pilots.ON_GPU) == (candidate[0] > 0.125)
        assert len(pilots.PILOTS[name].units(pilots.PILOTS[name])) == 4  # Table 4's four arms, one seed
