"""IsoLoss Table 1's budget pilot (`experiments.isoloss.budget_pilot`): its runs are Table 1's units at 48 epochs,
and its answer says yes only when every arm is above both trivial rows."""

from gradalign.experiments.isoloss.budget_pilot import ARMS, EPOCHS, answer, pilot_rows, pilot_units


def test_the_answer_needs_every_arm_above_both_trivial_rows():
    above = {a: 80.0 for a in ARMS}
    assert answer(above, 78.18, 72.96).startswith("yes")
    assert answer({**above, "L/no_ema": 78.0}, 78.18, 72.96).startswith("no: at 48 epochs 1 of 4")  # below pixels
    assert answer({**above, "iso/ema": 79.0}, 70.0, 79.5).startswith("no")  # below the untrained network
    assert answer({**above, "iso/ema": None}, 78.18, 72.96) == "not answered yet: 3 of 4 runs trained"


def test_the_pilot_s_runs_are_table_1_s_units_at_its_budget():
    from gradalign.experiments import get
    from gradalign.experiments.isoloss.deep_siamese import siamese_units

    units = pilot_units("cpu")
    assert len(units) == len(ARMS) and all("(seed 0)" in u.label for u in units)
    assert all(u.spec["settings"]["epochs"] == EPOCHS for u in units)
    cpu = {u.key for u in siamese_units(get("isoloss.tab1").resolve("cpu", {}), "cpu")}
    assert not {u.key for u in units} & cpu  # other runs than the cpu preset's 16-epoch ones


def test_the_rows_read_seed_0_of_the_record_and_of_the_pilot():
    record = {
        "config": {"datasets": ["fashion_mnist"], "epochs": [16]},
        "metrics": {
            "trivial": {"fashion_mnist": {"raw_pixels": [78.0, 78.0], "random_init": [70.0, 71.0],
                                          "random_init_data_bn": [74.0, 60.0]}},
            **{f"fashion_mnist/{a}": {"probe": [60.0 + i, 0.0]} for i, a in enumerate(ARMS)},
        },
    }  # fmt: skip
    entries = {a: {"value": {"probe_test_acc": 0.79}} for a in ARMS}
    rows, text = pilot_rows(record, entries)
    assert [r["probe at 16 epochs (%)"] for r in rows] == [60.0, 61.0, 62.0, 63.0]
    assert rows[0]["untrained network, better BN reading (%)"] == 74.0 and text.startswith("yes")
    rows, text = pilot_rows(record, {**entries, "L/ema": None})
    assert rows[0]["probe at 48 epochs (%)"] is None and text.startswith("not answered")


def test_a_diverged_arm_answers_no_and_an_edited_record_of_it_is_refused(tmp_path):
    import json

    import pytest

    from gradalign.experiments.isoloss import budget_pilot
    from gradalign.store.atomic import StoredJSONError, content_digest, write_json_atomically

    probes = {**{a: 80.0 for a in ARMS}, "L/no_ema": 63.6}
    assert answer(probes, 78.0, 70.0, ["iso/no_ema"]) == (
        "no: at 48 epochs iso/no_ema diverged (the divergence rule stopped it), and 1 of the 3 other trained arms "
        "are not above both trivial rows"
    )
    assert budget_pilot.diverged(tmp_path) == {}
    document = {"runs": {"iso/no_ema": {"why": "siamese iso no EMA diverged at step 646: readout_test_acc = 0.17"}}}
    path = tmp_path / budget_pilot.DIVERGED
    path.parent.mkdir(parents=True)
    write_json_atomically(path, {**document, "digest": content_digest(document)})
    assert budget_pilot.diverged(tmp_path)["iso/no_ema"]["why"].endswith("0.17")
    edited = json.loads(path.read_text())
    edited["runs"]["iso/no_ema"]["why"] = "fine"
    path.write_text(json.dumps(edited))
    with pytest.raises(StoredJSONError, match="digest"):
        budget_pilot.diverged(tmp_path)
