"""λ at the full budget (`sgr.lamfull`): the choice on validation, the term ratio in each reduction, the claim and the
mechanism precondition, each fed a case where it must fail, and the runs it shares with Table 3."""

from __future__ import annotations

import pytest

from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.experiments.sgr.lambda_study import (
    choose_reading,
    input_features,
    lambda_checks,
    lambda_mechanism,
    term_ratio,
)


def test_the_choice_takes_the_best_validation_accuracy_and_the_smaller_lambda_on_a_tie():
    assert choose_reading({"mean λ=1": 80.0, "mean λ=100": 81.5, "sum λ=1": 79.0}) == "mean λ=100"
    assert choose_reading({"mean λ=1000": 81.5, "mean λ=100": 81.5}) == "mean λ=100"
    assert choose_reading({"sum λ=1": 81.5, "mean λ=1": 81.5}) == "mean λ=1"


def _run(term: float, by_module: list[float]) -> dict:
    return {"diverged": None, "history": {"sgr": [9.0, term], "sgr_by_module": [[0.0] * 3, by_module]}}


def test_the_term_ratio_converts_layerwise_to_the_sum_module_by_module():
    """Layer-wise's mean-reduced term of modules 2 and 3 (0.2, 0.4) at D = (10, 100): 0.3 in the mean, (2 + 40) / 2
    = 21 in the sum."""
    ref = [_run(0.0, [None, 0.2, 0.4])]
    assert term_ratio([_run(0.15, [])], ref, [10, 100], "mean") == pytest.approx(0.5)
    assert term_ratio([_run(10.5, [])], ref, [10, 100], "sum") == pytest.approx(0.5)
    assert term_ratio([], ref, [10, 100], "mean") is None
    diverged = {"diverged": "NaN at step 3", "history": {"sgr": [9.0], "sgr_by_module": []}}  # no term kept
    assert term_ratio([_run(0.15, [])], [*ref, diverged], [10, 100], "mean") == pytest.approx(0.5)


def test_input_features_are_each_modules_input_size():
    cfg = get("sgr.lamfull").resolve("smoke", {})
    features = input_features(cfg, "resnet32")
    assert len(features) == cfg.modules - 1 and all(isinstance(d, int) and d > 0 for d in features)


def _arm(values: list[float]) -> dict:
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    return {"mean": mean, "std": std, "n": len(values), "values": values}


def _rows(sgr: list[float], layerwise: list[float], ratio: float | None) -> dict:
    row = {"sgr": _arm(sgr), "layerwise": _arm(layerwise), "term_ratio": ratio}
    return {"resnet32": {"mean λ=100": row}}


def test_the_claim_passes_on_a_clear_win_and_fails_on_a_clear_loss():
    chosen = {"resnet32": "mean λ=100"}
    win = lambda_checks(_rows([85.1, 85.3, 85.0], [80.1, 80.4, 80.2], 0.2), chosen, 16)
    assert win["sgr_beats_layerwise_resnet32"]["passed"]
    loss = lambda_checks(_rows([75.1, 75.3, 75.0], [80.1, 80.4, 80.2], 0.2), chosen, 16)
    assert not loss["sgr_beats_layerwise_resnet32"]["passed"]
    assert loss["sgr_beats_layerwise_resnet32"]["value"]["decision"] == "loses"


def test_the_mechanism_fails_where_the_term_did_not_fall_or_was_not_measured():
    chosen = {"resnet32": "mean λ=100"}
    assert lambda_mechanism(_rows([1, 2, 3], [1, 2, 3], 0.3), chosen)["passed"]
    assert not lambda_mechanism(_rows([1, 2, 3], [1, 2, 3], 0.9), chosen)["passed"]
    assert not lambda_mechanism(_rows([1, 2, 3], [1, 2, 3], None), chosen)["passed"]


def test_the_study_reads_table_3s_layerwise_and_its_calibrated_sgr_runs():
    from gradalign.experiments.units import units_of

    study = get("sgr.lamfull").resolve("cpu", {})
    keys = {u.key for u in units_of("sgr.lamfull", study)}
    table3 = {u.key for u in units_of("sgr.tab3", get("sgr.tab3").resolve("cpu", {})) if "Reforward" not in u.label}
    assert table3 <= keys
    assert len(keys) == 2 * 1 + 2 * 3 + 2 * 4 * 3  # Table 3's reading's choice, layer-wise's, SGR's at 4 readings


def test_outside_table_3s_reading_the_first_seeds_comparison_run_is_the_choice_run_and_comes_first():
    from gradalign.experiments.units import units_of
    from gradalign.training.local_heldout import RUN_KIND as HELDOUT

    study = get("sgr.lamfull").resolve("cpu", {})
    units = units_of("sgr.lamfull", study)
    kinds = [u.kind for u in units]
    assert kinds[:2] == ["sgr.local", "sgr.local"] and kinds[2:8] == [HELDOUT] * 6 and HELDOUT not in kinds[8:]
    assert {u.spec["seed"] for u in units[2:8]} == {study.seed} and all(u.spec["held_out"] == 1000 for u in units[2:8])
    assert all(u.spec["validation"] == 1000 for u in units[:2])  # Table 3's reading: runs of their own
    first_seed_plain = [u for u in units if u.kind != HELDOUT and u.spec["seed"] == study.seed]
    plain_at_new = [u for u in first_seed_plain if u.spec["method"].get("lam", 1000.0) != 1000.0]
    assert plain_at_new == []  # no reading other than Table 3's trains its first seed twice


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"mean_lams": [0.0]}, "mean_lams"),
        ({"validation": 0}, "validation"),
        ({"lam": 1.0}, "not used"),
        ({"chosen": [["resnet32", "mean λ=1"]]}, "chosen"),  # a network without its reading
        ({"chosen": [["resnet32", "mean λ=7"], ["plainnet32", "mean λ=1"]]}, "chosen"),  # not a reading of the study
    ],
)
def test_bad_study_settings_are_refused_before_any_compute(overrides, message):
    with pytest.raises(ConfigError, match=message):
        get("sgr.lamfull").resolve("smoke", overrides)


def test_at_half_the_budget_the_study_compares_b_s_choice_and_trains_no_choice_run_nor_other_reading():
    """`half_budget`: B/2 is given B's choice, so a check keeps its name only for the same reading (a choice made again
    at B/2 could differ under that name); its units are the chosen readings' and layer-wise's, nothing else."""
    from gradalign.experiments.claim_budget import half_overrides
    from gradalign.experiments.sgr.lambda_study import half_budget
    from gradalign.experiments.units import units_of

    study = get("sgr.lamfull")
    record = {
        "config": study.resolve("cpu", {}).to_dict(),
        "metrics": {"chosen": {"resnet32": "mean λ=1", "plainnet32": "mean λ=1000"}},
    }
    given = half_budget(record)
    half = study.resolve("cpu", {**half_overrides(record["config"]), **given})
    assert half.protocol.epochs == 30 and half.chosen_readings() == {
        "resnet32": ("mean", 1.0),
        "plainnet32": ("mean", 1000.0),
    }
    units = units_of("sgr.lamfull", half)
    assert not any(u.spec.get("validation") for u in units)  # no choice run
    sgr = {
        (u.spec["network"], u.spec["method"]["lam"], u.spec["method"]["reduction"])
        for u in units
        if u.spec["method"]["method"] == "sgr"
    }
    assert sgr == {("resnet32", 1.0, "mean"), ("plainnet32", 1000.0, "mean")}
    assert len(units) == 2 * 3 + 2 * 3  # layer-wise's 6 and the two chosen readings' 3 seeds each


def test_a_diverged_choice_run_scores_chance_is_kept_and_is_not_trained_again(store, monkeypatch):
    """`choice` fed runs that diverge: Table 3's reading's own choice run raises (kept as a result, never trained
    again); a first-seed comparison run stores its divergence as its result. Both score chance, never chosen over a
    trained reading, and the page's cell for each says so."""
    from gradalign.errors import DivergenceError
    from gradalign.experiments.diverged_runs import diverged
    from gradalign.experiments.sgr.lambda_study import choice
    from gradalign.store import run_unit

    cfg = get("sgr.lamfull").resolve("smoke", {})
    calls = []

    def run(self, root=None):
        calls.append(self.key)
        if self.spec["network"] == "resnet32" and self.spec.get("validation"):  # Table 3's reading's own run
            raise DivergenceError("sgr diverged at epoch 1: loss is not finite")
        if self.spec["network"] == "plainnet32":  # a comparison run's divergence is its result
            return {"final_val_acc": 10.0, "final_test_acc": 10.0, "diverged": "loss is not finite"}
        return {"final_val_acc": 50.0 + len(calls), "final_test_acc": 1.0, "diverged": None}

    monkeypatch.setattr(run_unit.Unit, "run", run)
    val_acc, failed = choice(cfg, "cpu")
    assert val_acc["resnet32"]["mean λ=1000"] == 10.0 and len(diverged("sgr.lamfull")) == 1
    assert val_acc["resnet32"]["mean λ=1"] > 50.0  # its first seed's comparison run, scored on the held-out images
    assert failed == {"resnet32": ["mean λ=1000"], "plainnet32": ["mean λ=1", "sum λ=1"]}  # the page marks them
    assert choose_reading(val_acc["resnet32"]) != "mean λ=1000"
    trained = len(calls)
    again, failed_again = choice(cfg, "cpu")
    assert again["plainnet32"] == val_acc["plainnet32"] and failed_again == failed
    assert again["resnet32"]["mean λ=1000"] == 10.0 and len(calls) == trained + 2 * len(cfg.readings()) - 1


def test_once_its_record_is_stored_the_study_s_half_budget_is_queued_right_after_it_as_runs_only(store, monkeypatch):
    """The B/2 runs wait on B's choice: nothing is queued before the record exists; after it, the runs at half the
    epochs with B's choice given, runs only (the budget rule reads them when the record is assessed)."""
    from gradalign.compute.backlog import full_backlog
    from gradalign.compute.backlog import BACKLOG
    from gradalign.compute.pilots import runs_only
    from gradalign.compute.window_report import purpose
    from gradalign.records import runner

    assert full_backlog() == BACKLOG  # an empty store: no record, no choice
    record = {
        "id": "sgr.lamfull",
        "config": get("sgr.lamfull").resolve("cpu", {}).to_dict(),
        "metrics": {"chosen": {"resnet32": "mean λ=100", "plainnet32": "sum λ=1"}},
    }
    monkeypatch.setattr(
        runner, "stored_record", lambda e, p, o=None, store=None: record if e == "sgr.lamfull" else None
    )
    backlog = full_backlog()
    at = backlog.index(("sgr.lamfull", "cpu", {}))
    item = backlog[at + 1]
    assert item == (
        "sgr.lamfull",
        "cpu",
        {"protocol.epochs": 30, "chosen": [["resnet32", "mean λ=100"], ["plainnet32", "sum λ=1"]]},
    )
    assert runs_only(*item) and "B's choice given" in purpose(*item) and len(backlog) == len(BACKLOG) + 1


def _row(diff: float, decision: str, ratio: float | None) -> dict:
    return {"difference": {"diff": diff, "decision": decision}, "term_ratio": ratio}


def _metrics(chosen_row: dict, other_row: dict, chosen: str = "mean λ=1") -> dict:
    rows = {"resnet32": {"mean λ=1": chosen_row, "mean λ=1000": other_row}}
    accs = {"resnet32": {"mean λ=1": 83.5, "mean λ=1000": 74.0}}
    return {"chosen": {"resnet32": chosen}, "rows": rows, "table3_reading": "mean λ=1000", "validation_acc": accs}


def _checks(passed: bool, full: str, half: str | None, stable: bool = True) -> dict:
    """The record's check of the chosen reading after `records.assess`: with its budget check once B/2 is in."""
    check = {"passed": passed}
    if half is not None:
        row = {"full": full, "half": half, "diff_half": 1.1, "stable": stable}
        check["budget"] = {"stable": stable, "comparisons": {"": row}, "budgets": ["60 epochs", "30 epochs"]}
    return {"sgr_beats_layerwise_resnet32": check}


def test_in_words_says_whether_the_chosen_readings_term_acts_and_gives_the_validation_accuracies():
    from gradalign.book.lambda_words import in_words

    inert = in_words(_metrics(_row(-0.4, "within noise", 0.98), _row(-5.9, "loses", 0.02)))
    assert inert[0].startswith(
        "ResNet-32: validation chose mean λ=1 (validation: mean λ=1 83.50 %, mean λ=1000 74.00 %)"
    )
    assert "Its term does not act (ratio 0.98 > 0.5): the mechanism precondition is unmet" in inert[0]
    assert "validation chose the reading whose term acts least" in inert[0] and "by construction" not in inert[0]
    acting = in_words(_metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.3)))  # the failing case
    assert "does not act" not in acting[0] and "acts least" not in acting[0]
    unmeasured = in_words(_metrics(_row(+1.2, "beats", None), _row(+0.9, "beats", 0.02)))
    assert "term ratio was not measured" in unmeasured[0] and "does not act" not in unmeasured[0]


def test_in_words_says_the_half_budget_is_pending_until_its_runs_are_in_and_then_gives_it():
    from gradalign.book.lambda_words import in_words

    metrics = _metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.02))
    pending = in_words(metrics)
    assert "+1.20 points at the full budget (beats); at half the budget its runs are not all in yet" in pending[0]
    assert pending[1].endswith("whether they are rerun waits for the chosen readings' runs at half the budget.")
    unstable = in_words(metrics, _checks(False, "beats", "within noise", stable=False))
    assert "at 60 epochs (beats), +1.10 at 30 epochs (within noise): not budget-stable, so not decided" in unstable[0]
    assert unstable[1].endswith("so they are not rerun.")


def test_in_words_waits_for_half_the_budget_only_where_a_rerun_is_still_possible_and_reads_every_budget_shape():
    from gradalign.book.lambda_words import in_words

    inert = in_words(_metrics(_row(+0.3, "within noise", 1.01), _row(-5.9, "loses", 0.02)))  # no B/2 runs yet
    assert "its runs are not all in yet" in inert[0] and inert[1].endswith("so they are not rerun.")
    acting = _metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.3))
    why = {"sgr_beats_layerwise_resnet32": {"passed": False, "budget": {"stable": False, "why": "no decision at 30"}}}
    assert "+1.20 points at the full budget (beats); no decision at 30." in in_words(acting, why)[0]
    part = {"stable": False, "comparisons": {"": {"stable": False}}, "budgets": ["60 epochs", "30 epochs"]}
    missing = in_words(acting, {"sgr_beats_layerwise_resnet32": {"passed": False, "budget": part}})
    assert "(beats); not decided at half the budget" in missing[0]  # a comparison missing at B/2: no KeyError
    table3 = in_words(_metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.3), "mean λ=1000"))
    assert "rerun there" not in table3[-1]
    table3_rows = {"resnet32": {"mean λ=1000": _row(+1.2, "beats", 0.1)}}
    wins = {**_metrics(_row(0, "", 0), _row(0, "", 0), "mean λ=1000"), "rows": table3_rows}
    assert in_words(wins, _checks(True, "beats", "beats"))[1].endswith(
        "where SGR beats layer-wise at both budgets: no rerun is needed."
    )


def test_tables_3_and_6_are_rerun_only_where_the_chosen_reading_wins_at_both_budgets_with_its_term_acting():
    from gradalign.book.lambda_words import in_words

    acting_win = _metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.02))
    both = in_words(acting_win, _checks(True, "beats", "beats"))
    assert "the same decision at both budgets" in both[0]
    assert both[1].endswith(
        "at mean λ=1, chosen on validation, SGR beats layer-wise at both budgets with its term "
        "acting, so Tables 3 and 6 are to be rerun there."
    )
    inert_win = in_words(
        _metrics(_row(+1.2, "beats", 0.98), _row(-5.9, "loses", 0.02)), _checks(True, "beats", "beats")
    )
    assert "so they are not rerun" in inert_win[1]  # the failing cases: a term that does not act,
    at_b_only = in_words(acting_win, _checks(True, "beats", None))
    assert "rerun there" not in at_b_only[1]  # the full budget alone,
    table3 = in_words(_metrics(_row(+1.2, "beats", 0.1), _row(-5.9, "loses", 0.02), chosen="mean λ=1000"))
    assert "rerun there" not in table3[-1]  # and Table 3's own reading


def test_a_win_at_a_reading_validation_did_not_choose_grounds_no_rerun():
    from gradalign.book.lambda_words import in_words

    words = in_words(_metrics(_row(-0.4, "within noise", 0.3), _row(+2.0, "beats", 0.02)), _checks(False, "x", "x"))
    assert "SGR beats layer-wise at mean λ=1000 at the full budget: a reading validation did not choose" in words[0]
    assert "rerun there" not in words[1] and words[1].endswith("so they are not rerun.")


def test_each_arm_keeps_its_seeds_values_so_the_budget_check_pairs_them():
    from gradalign.experiments.claim_budget import change
    from gradalign.experiments.rules import decide
    from gradalign.experiments.sgr.local_runs import summary_with_values

    def runs(accs):
        return [
            {
                "final_test_acc": a,
                "diverged": None,
                "history": {},
                "train_seconds": 1.0,
                "epoch_seconds": [1.0],
                "epochs_done": 1,
            }
            for a in accs
        ]

    arm = summary_with_values
    full = decide(arm(runs([84.0, 85.0, 86.0])), arm(runs([80.0, 81.5, 82.0])), higher_is_better=True)
    half = decide(arm(runs([82.0, 83.0, 84.0])), arm(runs([78.0, 79.5, 80.0])), higher_is_better=True)
    assert full["values_a"] == [84.0, 85.0, 86.0] and half["values_b"] == [78.0, 79.5, 80.0]
    assert change(full, half)["paired"]  # per seed: the same differences at both budgets, so SE 0
    unpaired = change({**full, "values_a": None}, half)
    assert not unpaired["paired"] and unpaired["se"] > 0  # the failing case: no values, Welch's SEs


def test_the_committed_choice_is_the_records_once_every_choice_run_is_committed(monkeypatch):
    """Read from the committed runs (never trained): the reading with the best validation accuracy per network; None
    while a run it reads is missing."""
    from gradalign.experiments.sgr import lambda_study
    from gradalign.store import run_unit

    study = get("sgr.lamfull").resolve("cpu", {})
    made = lambda_study.committed_choice(study)
    assert made is not None and set(made["chosen"]) == set(study.networks)
    for net, accs in made["validation_acc"].items():
        assert len(accs) == 4 and made["chosen"][net] == choose_reading(accs)
    first = lambda_study.choice_units(study)[0]
    read = run_unit.read_entry
    monkeypatch.setattr(run_unit, "read_entry", lambda folder, u: None if u.key == first.key else read(folder, u))
    assert lambda_study.committed_choice(study) is None
    given = get("sgr.lamfull").resolve("cpu", {"chosen": [["resnet32", "mean λ=1"], ["plainnet32", "mean λ=1"]]})
    assert lambda_study.choice_units(given) == [] and lambda_study.committed_choice(given) is None


def test_where_the_whole_split_trains_every_reading_gets_its_own_choice_run():
    from gradalign.experiments.units import units_of
    from gradalign.training.local_heldout import RUN_KIND as HELDOUT

    paper = get("sgr.lamfull").resolve("paper", {})
    assert paper.n_train == 0
    units = units_of("sgr.lamfull", paper)
    assert HELDOUT not in {u.kind for u in units}
    assert sum(u.spec.get("validation", 0) > 0 for u in units) == len(paper.networks) * len(paper.readings())


def test_the_interim_answer_reads_the_records_own_runs_at_both_budgets_and_waits_for_every_one(monkeypatch):
    """`book.lambda_interim.interim` from the committed runs: each chosen reading's SGR and layer-wise values at both
    budgets are those runs' final test accuracies (the full budget's first seed: the run that also scored the choice,
    as the record reads it), its checks carry the record's budget check, and it is None while one run is missing."""
    from gradalign.book.lambda_interim import interim, interim_rows
    from gradalign.experiments.claim_budget import half_overrides
    from gradalign.experiments.units import units_of
    from gradalign.store import run_unit
    from gradalign.store.store_root import results_root

    exp = get("sgr.lamfull")
    full = exp.resolve("cpu", {})
    result = interim()
    assert result is not None, "the chosen readings' runs at both budgets are committed (2026-11-28)"
    chosen = result["metrics"]["chosen"]
    halved = exp.resolve("cpu", {**half_overrides(full.to_dict()), "chosen": [[n, r] for n, r in chosen.items()]})
    for cfg, rows in ((full, result["metrics"]["rows"]), (halved, result["half_metrics"]["rows"])):
        for net, name in chosen.items():
            units = [
                u
                for u in units_of("sgr.lamfull", cfg)
                if u.spec["network"] == net
                and u.spec["method"]["method"] == "sgr"
                and f"{u.spec['method']['reduction']} λ={u.spec['method']['lam']:g}" == name
            ]
            values = [run_unit.read_entry(results_root() / "runs", u)["value"]["final_test_acc"] for u in units]
            assert len(units) == 3 and rows[net][name]["sgr"]["values"] == values
            assert rows[net][name]["layerwise"]["n"] == 3
    assert all(c["budget"]["budgets"] == list(result["budgets"]) for c in result["checks"].values())
    assert len(interim_rows(result)) == 2 * len(chosen)
    last = units_of("sgr.lamfull", halved)[-1]  # one run at half the budget not committed: no interim answer
    read = run_unit.read_entry
    monkeypatch.setattr(run_unit, "read_entry", lambda folder, u: None if u.key == last.key else read(folder, u))
    assert interim() is None
