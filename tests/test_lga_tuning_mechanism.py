"""`book.lga_tuning_mechanism`: Eq. 2's ε-dominated share of every LGA candidate of `lga.tune`, from committed runs."""

import math

import pandas as pd

from gradalign.book.lga_tuning_mechanism import mechanism_reading, mechanism_table, run_mechanism


def test_a_runs_share_is_averaged_over_its_evaluations_and_read_at_the_last_and_a_missing_one_is_none():
    value = {"history": {"eps_dominated": [0.2, math.nan, 0.6], "alignment": [-0.5, 0.1]}}
    got = run_mechanism(value)
    assert got["eps_dominated_mean"] == 0.4 and got["eps_dominated_last"] == 0.6
    assert math.isclose(got["alignment_mean"], -0.2)
    assert run_mechanism({"history": {"alignment": [0.3]}})["eps_dominated_mean"] is None  # trained before it was
    assert run_mechanism({}) == {"eps_dominated_mean": None, "eps_dominated_last": None, "alignment_mean": None}


def test_the_reading_names_the_range_and_the_chosen_candidates_share_and_says_when_none_is_recorded():
    column = "ε-dominated share, mean over training"
    table = pd.DataFrame(
        [
            {"candidate": 0, "labels": "250", column: "not recorded"},
            {"candidate": 1, "labels": "250", column: "0.100"},
            {"candidate": 2, "labels": "250", column: "0.900"},
        ]
    )
    tuning = pd.DataFrame(
        [
            {"method": "LGA", "candidate": 2, "chosen at 250": "yes"},
            {"method": "VAT", "candidate": 1, "chosen at 250": "yes"},  # another method's choice is not LGA's
        ]
    )
    text = mechanism_reading(table, tuning)
    assert "from 0.100 to 0.900" in text and "chose candidate 2, with a share of 0.900" in text
    assert "Over the 2 LGA runs" in text
    none = table.assign(**{column: "not recorded"})
    assert mechanism_reading(none, tuning) == "No LGA candidate of the study has recorded the ε-dominated share yet."


def test_the_committed_table_reads_the_runs_the_tuning_table_reads():
    """Each candidate's validation accuracy here is the one the tuning table shows for LGA at that label count."""
    from gradalign.experiments.lga.ssl_tuning import tuning_view

    table, tuning = mechanism_table(), tuning_view()
    lga = tuning[tuning["method"] == "LGA"].set_index("candidate")
    assert len(table) == 2 * len(lga)
    for _, row in table.iterrows():
        shown = lga.loc[row["candidate"], f"validation accuracy, {row['labels']} labels (%)"]
        assert row["validation accuracy (%)"] == shown


def test_a_candidate_not_trained_or_diverged_says_so_and_a_cosine_near_zero_is_never_negative_zero(
    tmp_path, monkeypatch
):
    """An empty store: every candidate "not trained", but one whose run diverged (kept as a result, without an
    entry) "diverged", as the tuning table says it; and `_cell` prints -0.0004 as +0.000."""
    from gradalign.book import lga_tuning_mechanism
    from gradalign.experiments import diverged_runs
    from gradalign.experiments.lga.ssl_tuning import candidate_unit, candidates, cpu_config

    cfg = cpu_config()
    first = candidates(cfg, "lga")[1]
    key = candidate_unit(cfg, "lga", 1, first, cfg.labels[0]).key
    monkeypatch.setattr(diverged_runs, "diverged", lambda element_id, root=None: {key: {"why": "loss nan"}})
    table = mechanism_table(tmp_path)
    states = table.set_index(["candidate", "labels"])["validation accuracy (%)"]
    assert states[(1, f"{cfg.labels[0]:,}")] == "diverged"
    assert set(states.drop((1, f"{cfg.labels[0]:,}"))) == {"not trained"}
    assert mechanism_reading(table, pd.DataFrame(columns=["method"])).startswith("No LGA candidate")
    assert lga_tuning_mechanism._cell(-0.0004, "alignment_mean") == "+0.000"
    assert lga_tuning_mechanism._cell(0.97551, "eps_dominated_mean") == "0.976"
