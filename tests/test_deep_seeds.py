"""SGR at VGG-57 over seeds (`experiments.sgr.deep_seeds`): when a run leaves chance, and that the study reads the run
keys of Table 7 and of the no-BN study."""

import pytest

from gradalign.experiments.sgr.deep_seeds import BACKLOG_ITEMS, LEFT, SEEDS, left_chance_at, summary


def test_a_run_leaves_chance_at_the_first_epoch_a_quarter_of_the_way_up():
    mark = 10.0 + LEFT * 90.0
    assert mark == pytest.approx(32.5)
    assert left_chance_at([9.0, 20.0, mark, 80.0], [1, 2, 3, 4], 10.0) == 3
    assert left_chance_at([9.0, 20.0, mark - 0.01, 12.0], [1, 2, 3, 4], 10.0) is None  # failing case: never left
    assert left_chance_at([], [], 10.0) is None


def test_bad_histories_are_refused():
    with pytest.raises(ValueError, match="one per evaluation"):
        left_chance_at([10.0, 11.0], [1], 10.0)
    with pytest.raises(ValueError, match="chance must be"):
        left_chance_at([10.0], [1], 100.0)


def test_the_summary_counts_trained_seeds_and_when_they_left():
    rows = [
        {"reading": "with BN", "seed": 0, "final_acc": 76.0, "left_at": 14},
        {"reading": "with BN", "seed": 1, "final_acc": 17.0, "left_at": None},
        {"reading": "with BN", "seed": 2, "status": "not trained"},
        {"reading": "without BN", "seed": 0, "final_acc": 11.3, "left_at": None},
    ]
    text = summary(rows)
    assert "with BN: 1 of 2 trained seeds left chance (at epochs 14); 1 of 3 seeds not trained yet" in text
    assert "without BN: 0 of 1 trained seeds left chance; 0 of 1" in text


def _keys(element, overrides=None):
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    return {u.key for u in units_of(element, get(element).resolve("cpu", overrides or {}))}


def test_the_study_reads_table_7_s_runs_and_the_no_bn_study_s():
    """Seeds 0-2 with BN are Table 7's VGG-57 SGR runs, seed 0 without BN the no-BN study's (same run keys), and the
    backlog items train every seed of both readings."""
    from gradalign.experiments import get
    from gradalign.experiments.sgr import deep_seeds
    from gradalign.training.local import local_unit

    table7 = get("sgr.tab7").resolve("cpu", {})
    bn = [local_unit(table7.spec("vgg57", "sgr", table7.sgr_modules(57), table7.datasets[0], s)).key for s in range(5)]
    assert set(bn[:3]) <= _keys("sgr.tab7") and not set(bn[3:]) & _keys("sgr.tab7")
    assert set(bn) <= _keys(*BACKLOG_ITEMS[0][::2])
    rows = deep_seeds.no_bn_rows(get("sgr.tab7nobn").resolve("cpu", {}), seeds=1)
    assert rows[0]["lr"] == 0.003 and rows[0]["left_at"] is None  # its one run: at chance, at the grid's lowest rate
    assert len(BACKLOG_ITEMS) == 2 and all(o["seeds"] == SEEDS for _, _, o in BACKLOG_ITEMS)


def test_the_view_has_a_row_per_reading_and_seed():
    from gradalign.experiments.sgr.deep_seeds import seeds_view

    frame, text = seeds_view("cpu")
    assert len(frame) == 2 * SEEDS and list(frame["seed"])[:SEEDS] == list(range(SEEDS))
    assert "with BN" in text and "without BN" in text


def test_the_backlog_trains_the_seeds_without_a_record_that_would_shadow_table_7():
    from gradalign.compute.backlog import BACKLOG
    from gradalign.compute.pilots import RERUNS, runs_only
    from gradalign.compute.window_report import purpose

    for item in BACKLOG_ITEMS:
        assert item in BACKLOG and runs_only(*item)
        assert purpose(*item) == "SGR at VGG-57 at 5 seeds: which seeds leave chance"
    assert not runs_only("sgr.tab7", "cpu", {})  # failing case: Table 7's own preset makes its record
    assert purpose("sgr.tab7", "cpu", RERUNS["sgr.tab7"]) == "rerun at the scale its pilots chose"
