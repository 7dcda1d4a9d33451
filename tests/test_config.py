import pytest

from gradalign import runner
from gradalign.config import PRESETS, parse_override
from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.notebook import resolve_preset


def _forbid_compute(monkeypatch, element_id):
    exp = EXPERIMENTS[element_id]

    def boom(cfg, device):
        raise AssertionError("compute started before validation")

    monkeypatch.setitem(EXPERIMENTS, element_id, type(exp)(**{**exp.__dict__, "run": boom}))


@pytest.mark.parametrize("element_id, preset, overrides, message", [
    ("lga.nope", "cpu", {}, "unknown element id 'lga.nope'; choose one of: lga.alg1"),
    ("sgr.tab3", "cpu", {}, "not built yet"),
    ("lga.fig1", "huge", {}, "unknown preset 'huge'; choose one of: smoke, cpu, gpu, paper"),
    ("lga.fig1", "cpu", {"steps": 0}, "steps must be >= 1"),
    ("lga.fig1", "cpu", {"alpha_w": -1.0}, "alpha_w must be > 0"),
    ("lga.fig1", "cpu", {"lambda_u": [2.0, 1.0]}, "must be strictly increasing"),
    ("lga.fig1", "cpu", {"stepz": 3}, "unknown parameter 'stepz'"),
    ("lga.prop2-3", "cpu", {"n_u": 2}, "n_u must be >= m"),
])
def test_bad_input_is_one_line_error_before_compute(store, monkeypatch, element_id, preset, overrides, message):
    if element_id in EXPERIMENTS:
        _forbid_compute(monkeypatch, element_id)
    with pytest.raises(ConfigError) as err:
        runner.run(element_id, preset, overrides, store=store)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert not store.root.exists()


def test_every_experiment_resolves_every_preset():
    for exp in EXPERIMENTS.values():
        for preset in PRESETS:
            cfg = exp.resolve(preset)
            assert len(cfg.digest(exp.version)) == 12


def test_digest_changes_with_config_and_version():
    exp = EXPERIMENTS["lga.fig1"]
    a = exp.resolve("cpu")
    assert a.digest(1) != exp.resolve("cpu", {"steps": 999}).digest(1)
    assert a.digest(1) != a.digest(2)
    assert a.digest(1) == exp.resolve("cpu", {"lambda_l": list(a.lambda_l)}).digest(1)


def test_overrides_parse_json_values():
    assert parse_override("steps=10") == ("steps", 10)
    assert parse_override("lambda_l=[0.5,1]") == ("lambda_l", [0.5, 1])
    with pytest.raises(ConfigError):
        parse_override("steps")


def test_environment_overrides_notebook_preset(monkeypatch):
    monkeypatch.setenv("GRADALIGN_PRESET", "smoke")
    assert resolve_preset("cpu") == "smoke"
    monkeypatch.setenv("GRADALIGN_PRESET", "bogus")
    with pytest.raises(ConfigError, match="unknown preset 'bogus'"):
        resolve_preset("cpu")
