"""IsoLoss Table 1's budget pilot (`experiments.isoloss.budget_pilot`): its runs are Table 1's units at each
candidate's overrides, and its answer says yes only when every arm is above both trivial rows on the same images."""

import pytest

from gradalign.experiments.isoloss.budget_pilot import ARMS, CANDIDATES, answer, pilot_columns, pilot_units

EPOCHS_48, ALL_IMAGES, BOTH = CANDIDATES


def test_the_answer_needs_every_arm_above_both_trivial_rows():
    above = {a: 80.0 for a in ARMS}
    assert answer(above, 78.18, 72.96).startswith("yes: with 48 epochs, 5,000 images")
    assert answer({**above, "L/ema": 78.0}, 78.18, 72.96).startswith("no: with 48 epochs, 5,000 images, 1 of the 3")
    assert answer({**above, "L/ema": 78.0, "iso/ema": None}, 78.18, 72.96).endswith("(1 not trained yet)")
    assert answer({**above, "L/no_ema": 10.0}, 78.18, 72.96).startswith("yes")  # the claimed loss of accuracy
    assert answer({**above, "iso/ema": 79.0}, 70.0, 79.5).startswith("no")  # below the untrained network
    assert answer({**above, "iso/ema": None}, 78.18, 72.96, at="x") == (
        "not answered yet with x: 2 of the 3 runs the claims need trained"
    )


@pytest.mark.parametrize("candidate", CANDIDATES, ids=lambda c: c.name)
def test_each_candidate_s_runs_are_table_1_s_units_at_its_overrides(candidate):
    from gradalign.experiments import get
    from gradalign.experiments.isoloss.deep_siamese import siamese_units

    units = pilot_units("cpu", candidate)
    assert len(units) == len(ARMS) and all("(seed 0)" in u.label for u in units)
    cpu = {u.key for u in siamese_units(get("isoloss.tab1").resolve("cpu", {}), "cpu")}
    assert not {u.key for u in units} & cpu  # other runs than the cpu preset's 16-epoch ones on 5,000 images


def test_the_candidates_change_only_their_budget():
    assert all(u.spec["settings"]["epochs"] == 48 and u.spec["train_subset"] == 5000 for u in pilot_units("cpu"))
    assert all(
        u.spec["settings"]["epochs"] == 16 and u.spec["train_subset"] == 0 for u in pilot_units("cpu", ALL_IMAGES)
    )
    assert all(u.spec["settings"]["epochs"] == 48 and u.spec["train_subset"] == 0 for u in pilot_units("cpu", BOTH))
    assert not EPOCHS_48.own_images and ALL_IMAGES.own_images and BOTH.own_images  # the probe: other images
    assert len({c.folder for c in CANDIDATES}) == len(CANDIDATES)  # each its own diverged runs


RECORD = {
    "config": {"datasets": ["fashion_mnist"], "epochs": [16], "train_subset": 5000},
    "metrics": {
        "trivial": {"fashion_mnist": {"raw_pixels": [78.0, 78.0], "random_init": [70.0, 71.0],
                                      "random_init_data_bn": [74.0, 60.0]}},
        **{f"fashion_mnist/{a}": {"probe": [60.0 + i, 0.0]} for i, a in enumerate(ARMS)},
    },
}  # fmt: skip


def test_the_columns_read_seed_0_of_the_record_and_of_each_candidate():
    entries = {a: {"value": {"probe_test_acc": 0.79}} for a in ARMS}
    stored = {"rows": {"raw_pixels": [84.0], "random_init": [75.0], "random_init_data_bn": [80.0]}}
    columns, answers = pilot_columns(RECORD, [(EPOCHS_48, entries, {}, None), (ALL_IMAGES, entries, {}, stored)])
    record, first, second = columns.values()
    assert [record[a] for a in ARMS] == [60.0, 61.0, 62.0, 63.0] and record["raw pixels"] == 78.0
    assert first["untrained network, better BN reading"] == 74.0  # the record's rows: the same images
    assert second["raw pixels"] == 84.0 and second["untrained network, better BN reading"] == 80.0
    assert answers[0].startswith("yes") and answers[1].startswith("no: with 16 epochs, all 60,000 images, 3 of the 3")


def test_a_candidate_on_its_own_images_is_not_answered_without_its_trivial_rows():
    entries = {a: {"value": {"probe_test_acc": 0.99}} for a in ARMS}
    columns, answers = pilot_columns(RECORD, [(ALL_IMAGES, entries, {}, None)])
    assert columns[ALL_IMAGES.name]["raw pixels"] == "not computed"
    assert answers == [
        "not answered yet with 16 epochs, all 60,000 images: the trivial rows on its images are not computed"
    ]
    _, answers = pilot_columns(RECORD, [(EPOCHS_48, {**entries, "L/ema": None}, {}, None)])
    assert answers[0].startswith("not answered yet")


@pytest.mark.parametrize("candidate", CANDIDATES, ids=lambda c: c.name)
def test_a_diverged_arm_answers_no_and_an_edited_record_of_it_is_refused(tmp_path, candidate):
    import json

    from gradalign.experiments.isoloss import budget_pilot
    from gradalign.store.atomic import StoredJSONError, content_digest, write_json_atomically

    probes = {**{a: 80.0 for a in ARMS}, "L/ema": 63.6}
    assert answer(probes, 78.0, 70.0, ["iso/no_ema"]) == (
        "no: with 48 epochs, 5,000 images, iso/no_ema diverged (the divergence rule stopped it), and 1 of the 2 "
        "other trained arms the claims need are not above both trivial rows"
    )
    assert answer({**probes, "L/ema": 80.0}, 78.0, 70.0, ["L/no_ema"]).startswith("yes")  # L may collapse
    assert answer({**probes, "L/ema": 80.0}, 78.0, 70.0, ["L/no_ema"]).endswith("as two claims say it loses accuracy")
    assert budget_pilot.diverged(tmp_path, candidate) == {}
    document = {"runs": {"iso/no_ema": {"why": "siamese iso no EMA diverged at step 646: readout_test_acc = 0.17"}}}
    path = tmp_path / candidate.folder / "diverged.json"
    path.parent.mkdir(parents=True)
    write_json_atomically(path, {**document, "digest": content_digest(document)})
    assert budget_pilot.diverged(tmp_path, candidate)["iso/no_ema"]["why"].endswith("0.17")
    edited = json.loads(path.read_text())
    edited["runs"]["iso/no_ema"]["why"] = "fine"
    path.write_text(json.dumps(edited))
    with pytest.raises(StoredJSONError, match="digest"):
        budget_pilot.diverged(tmp_path, candidate)


def test_stored_trivial_rows_cut_short_are_refused(tmp_path):
    from gradalign.experiments.isoloss.budget_pilot import stored_trivial
    from gradalign.store.atomic import StoredJSONError, content_digest, write_json_atomically

    assert stored_trivial(tmp_path) is None
    document = {"rows": {"raw_pixels": [84.0], "random_init": [75.0], "random_init_data_bn": [80.0]}}
    path = tmp_path / ALL_IMAGES.folder / "trivial.json"
    path.parent.mkdir(parents=True)
    write_json_atomically(path, {**document, "digest": content_digest(document)})
    assert stored_trivial(tmp_path)["rows"]["raw_pixels"] == [84.0]
    path.write_text(path.read_text()[:40])
    with pytest.raises(StoredJSONError):
        stored_trivial(tmp_path)


@pytest.fixture
def fake_arms(monkeypatch, tmp_path):
    """The pilot with one candidate whose units only note their arm when run; returns the list they note to, and
    the names of the arms to show as committed already (read, not trained)."""
    from gradalign.experiments.isoloss import budget_pilot

    trained, committed = [], set()

    class Fake:
        def __init__(self, arm):
            self.arm, self.label = arm, arm

        def run(self):
            trained.append(self.arm)

    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path))
    monkeypatch.setattr(budget_pilot, "CANDIDATES", (EPOCHS_48,))
    monkeypatch.setattr(budget_pilot, "pilot_units", lambda device, candidate: [Fake(a) for a in ARMS])
    monkeypatch.setattr("gradalign.store.run_unit.read_entry", lambda runs, u: {} if u.arm in committed else None)
    return trained, committed


def test_a_second_process_takes_the_arms_in_reverse_and_skips_what_is_done(fake_arms):
    from gradalign.experiments.isoloss import budget_pilot

    trained, committed = fake_arms
    committed.add("L/ema")
    budget_pilot.train(echo=lambda _: None, reverse=True)
    assert trained == ["iso/no_ema", "iso/ema", "L/no_ema"]  # L/ema: committed already, read, not trained


def test_a_cell_shows_a_missing_run_in_words_never_nan():
    from gradalign.experiments.isoloss.budget_pilot import cell

    assert [cell(None), cell(float("nan")), cell(77.494), cell("diverged at step 646")] == [
        "not trained",
        "not trained",
        "77.49",
        "diverged at step 646",
    ]


def test_a_collapsed_run_shows_its_probe_and_where_it_collapsed():
    entries = {a: {"value": {"probe_test_acc": 0.85, "collapsed": None}} for a in ARMS}
    entries["L/no_ema"] = {
        "value": {"probe_test_acc": 0.4, "collapsed": "siamese L no EMA collapsed at step 702: readout_test_acc = 0.1"}
    }
    stored = {"rows": {"raw_pixels": [84.0], "random_init": [75.0], "random_init_data_bn": [80.0]}}
    columns, answers = pilot_columns(RECORD, [(ALL_IMAGES, entries, {}, stored)])
    assert columns[ALL_IMAGES.name]["L/no_ema"] == "40.00 (collapsed at step 702)"
    assert columns[ALL_IMAGES.name]["L/ema"] == 85.0
    assert answers[0].startswith("yes")  # the collapse is L without EMA's: the claimed effect


def test_an_order_trains_those_arms_in_that_order_and_a_wrong_one_is_refused_before_any_training(fake_arms):
    from gradalign.experiments.isoloss import budget_pilot

    trained, _ = fake_arms
    budget_pilot.train(echo=lambda _: None, order=("iso/ema", "L/ema"))
    assert trained == ["iso/ema", "L/ema"]
    for wrong in [(), ("L/ema", "L/ema"), ("iso/none",)]:
        with pytest.raises(ValueError, match="order"):
            budget_pilot.train(echo=lambda _: None, order=wrong)
    assert trained == ["iso/ema", "L/ema"]


def test_the_step_is_read_from_a_divergence_or_collapse_line_and_another_line_is_refused():
    from gradalign.experiments.isoloss.budget_pilot import step_of

    assert step_of("siamese L no EMA diverged at step 702: readout_test_acc = 0.109, back at chance") == "step 702"
    assert step_of("siamese iso no EMA collapsed at step 646: readout_test_acc = 0.17") == "step 646"
    with pytest.raises(ValueError, match="step N"):
        step_of("siamese L no EMA stopped early")
