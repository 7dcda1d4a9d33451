from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pytest

from gradalign.records import runner
from gradalign.config import (
    PRESETS,
    Config,
    Settings,
    config_digest,
    require,
    resolve,
    settings_fields,
)
from gradalign.errors import ConfigError
from gradalign.compute.overrides import parse_override
from gradalign.experiments import EXPERIMENTS
from gradalign.book.notebook import resolve_preset


def _forbid_compute(monkeypatch, element_id):
    exp = EXPERIMENTS[element_id]

    def boom(cfg, device):
        raise AssertionError("compute started before validation")

    monkeypatch.setitem(EXPERIMENTS, element_id, type(exp)(**{**exp.__dict__, "run": boom}))


@pytest.mark.parametrize(
    "element_id, preset, overrides, message",
    [
        ("lga.nope", "cpu", {}, "unknown element id 'lga.nope'; choose one of: lga.alg1"),
        ("sgr.unbuilt", "cpu", {}, "not built yet"),
        ("lga.fig1", "huge", {}, "unknown preset 'huge'; choose one of: smoke, cpu, gpu, paper"),
        ("lga.fig1", "cpu", {"steps": 0}, "steps must be >= 1"),
        ("lga.fig1", "cpu", {"alpha_w": -1.0}, "alpha_w must be > 0"),
        ("lga.fig1", "cpu", {"lambda_u": [2.0, 1.0]}, "must be strictly increasing"),
        ("lga.fig1", "cpu", {"stepz": 3}, "unknown parameter 'stepz'"),
        ("lga.prop2-3", "cpu", {"n_u": 2}, "n_u must be >= m"),
    ],
)
def test_bad_input_is_one_line_error_before_compute(store, monkeypatch, element_id, preset, overrides, message):
    if element_id == "sgr.unbuilt":  # every element is registered now: unregister one to see the refusal
        element_id = "sgr.tab2"
        monkeypatch.delitem(EXPERIMENTS, element_id)
    if element_id in EXPERIMENTS:
        _forbid_compute(monkeypatch, element_id)
    with pytest.raises(ConfigError) as err:
        runner.run(element_id, preset, overrides, store=store)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert not store.root.exists()


def test_every_experiment_resolves_every_preset():
    """Every preset, except that an experiment not run here may define `paper` alone (and must define it)."""
    for exp in EXPERIMENTS.values():
        assert "paper" in exp.presets
        for preset in PRESETS if exp.status != "not run here" else exp.presets:
            cfg = exp.resolve(preset)
            assert len(cfg.digest(exp.version)) == 12


def test_digest_changes_with_config_and_version():
    exp = EXPERIMENTS["lga.fig1"]
    a = exp.resolve("cpu")
    assert a.digest(1) != exp.resolve("cpu", {"steps": 999}).digest(1)
    assert a.digest(1) != a.digest(2)
    assert a.digest(1) == exp.resolve("cpu", {"lambda_l": list(a.lambda_l)}).digest(1)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("steps=10", ("steps", 10)),
        ("lambda_l=[0.5,1]", ("lambda_l", [0.5, 1])),
        ("flag=true", ("flag", True)),
        ("lr=2.5", ("lr", 2.5)),
        ('name="x"', ("name", "x")),
        ("name=x", ("name", "x")),
        ("name=a=b", ("name", "a=b")),
        ("trial.lr=3e-4", ("trial.lr", 3e-4)),
        (" steps = 10", ("steps", 10)),
        ("steps=", ("steps", "")),
        ("lr=NaN", ("lr", "NaN")),  # JSON's non-standard words stay text: the type check rejects them
        ("lr=Infinity", ("lr", "Infinity")),
        ("lr=-Infinity", ("lr", "-Infinity")),
        ("lambda_l=[1, NaN]", ("lambda_l", "[1, NaN]")),
    ],
)
def test_overrides_parse_json_values(text, parsed):
    assert parse_override(text) == parsed


@pytest.mark.parametrize("text", ["steps", "", "=3", " =3", "   "])
def test_malformed_override_is_one_line_error(text):
    with pytest.raises(ConfigError, match="must look like key=value") as err:
        parse_override(text)
    assert "\n" not in str(err.value)


def test_environment_overrides_notebook_preset(monkeypatch):
    monkeypatch.setenv("GRADALIGN_PRESET", "smoke")
    assert resolve_preset("cpu") == "smoke"
    monkeypatch.setenv("GRADALIGN_PRESET", "bogus")
    with pytest.raises(ConfigError, match="unknown preset 'bogus'"):
        resolve_preset("cpu")


# --- typed settings: a small config with every kind of field ---------------------------------------


@dataclass(frozen=True)
class Trial(Settings):
    lr: float = 1e-3
    steps: int = 10
    name: str = "adam"
    nesterov: bool = False

    def validate(self) -> None:
        require(self, "lr", self.lr > 0, "must be > 0")


@dataclass(frozen=True)
class Demo(Config):
    trial: Trial = Trial()
    other: Trial = Trial(lr=0.5, steps=3)  # a default that differs from Trial's own
    head: Trial | None = None
    labels: tuple[int, ...] = (10, 20)
    column: tuple[str, int, float] = ("a", 1, 0.5)
    columns: tuple[tuple[str, int], ...] = (("a", 1),)
    anything: tuple = (1, "x")
    limit: int | None = None
    mode: Literal["fast", "slow"] = "fast"
    hook: Callable[[int], int] | None = None  # not checked

    def validate(self) -> None:
        super().validate()
        require(self, "trial.steps", self.trial.steps <= 1000, "must be <= 1000")


DEMO_PRESETS = {
    "smoke": {"trial.steps": 2, "other": {"lr": 0.25}},
    "cpu": {"trial": {"lr": 0.01, "name": "sgd"}},
    "gpu": {"trial": Trial(lr=0.02)},
    "paper": {"labels": [10]},
}


@pytest.mark.parametrize(
    "cls, values, message",
    [
        (Trial, {"steps": True}, "Trial.steps must be an integer; got True"),
        (Trial, {"steps": 2.0}, "Trial.steps must be an integer; got 2.0"),
        (Trial, {"steps": "3"}, "Trial.steps must be an integer; got '3'"),
        (Trial, {"steps": None}, "Trial.steps must be an integer; got None"),
        (Trial, {"lr": True}, "Trial.lr must be a finite number; got True"),
        (Trial, {"lr": "0.1"}, "Trial.lr must be a finite number; got '0.1'"),
        (Trial, {"lr": math.nan}, "Trial.lr must be a finite number; got nan"),
        (Trial, {"lr": math.inf}, "Trial.lr must be a finite number; got inf"),
        (Trial, {"lr": -math.inf}, "Trial.lr must be a finite number; got -inf"),
        (Trial, {"lr": 10**400}, "Trial.lr must be a finite number"),
        (Trial, {"name": 3}, "Trial.name must be a string; got 3"),
        (Trial, {"nesterov": 1}, "Trial.nesterov must be true or false; got 1"),
        (Trial, {"nesterov": "true"}, "Trial.nesterov must be true or false; got 'true'"),
        (Demo, {"labels": 5}, "Demo.labels must be a list of integers; got 5"),
        (Demo, {"labels": "ab"}, "Demo.labels must be a list of integers; got 'ab'"),
        (Demo, {"labels": [1, "x"]}, "Demo.labels must be a list of integers; got [1, 'x']"),
        (Demo, {"labels": [1, True]}, "Demo.labels must be a list of integers; got [1, True]"),
        (Demo, {"column": ("a", 1)}, "Demo.column must be a list of 3 items (a string, an integer, a finite number)"),
        (Demo, {"column": ["a", "b", 0.5]}, "Demo.column must be a list of 3 items"),
        (Demo, {"column": ["a", 1, math.nan]}, "Demo.column must be a list of 3 items"),
        (Demo, {"columns": [["a", "b"]]}, "Demo.columns must be a list of items that are each a list of 2 items"),
        (Demo, {"anything": 3}, "Demo.anything must be a list; got 3"),
        (Demo, {"limit": 1.5}, "Demo.limit must be an integer or null; got 1.5"),
        (Demo, {"limit": True}, "Demo.limit must be an integer or null; got True"),
        (Demo, {"mode": "medium"}, 'Demo.mode must be one of "fast", "slow"; got \'medium\''),
        (Demo, {"trial": 3}, "Demo.trial must be a Trial (a dict of its fields); got 3"),
        (Demo, {"head": "x"}, "Demo.head must be a Trial (a dict of its fields) or null; got 'x'"),
        (Demo, {"trial": {"lr": "x"}}, "Demo.trial: Trial.lr must be a finite number; got 'x'"),
        (
            Demo,
            {"trial": {"nope": 1}},
            "Demo.trial: unknown parameter 'nope' for Trial; choose from: lr, steps, name, ",
        ),
        (Demo, {"seed": 0.5}, "Demo.seed must be an integer; got 0.5"),
    ],
)
def test_type_rules(cls, values, message):
    with pytest.raises(ConfigError) as err:
        cls(**values)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_range_rules_run_after_the_type_rules():
    with pytest.raises(ConfigError, match=r"^Trial.lr must be > 0; got -1.0$"):
        Trial(lr=-1)
    with pytest.raises(ConfigError, match=r"^Demo.seed must be >= 0; got -1$"):
        Demo(seed=-1)
    with pytest.raises(ConfigError, match=r"^Demo.trial: Trial.lr must be > 0; got -2.0$"):
        Demo(trial={"lr": -2})
    with pytest.raises(ConfigError, match=r"^Demo.trial.steps must be <= 1000; got 5000$"):
        Demo(trial={"steps": 5000})


def test_accepted_values_are_converted():
    assert Trial(lr=1).lr == 1.0 and isinstance(Trial(lr=1).lr, float)
    demo = Demo(
        labels=[1, 2],
        column=["b", 2, 3],
        columns=[["b", 2]],
        anything=[1, [2, [3]]],
        limit=4,
        head={"lr": 0.1},
        trial={"steps": 7},
        mode="slow",
        hook=len,
    )
    assert demo.labels == (1, 2) and demo.column == ("b", 2, 3.0) and isinstance(demo.column[2], float)
    assert demo.columns == (("b", 2),) and demo.anything == (1, (2, (3,)))
    assert demo.head == Trial(lr=0.1) and demo.trial == Trial(steps=7) and demo.limit == 4 and demo.hook is len
    assert Demo(limit=None, head=None).head is None
    hash(demo.trial)  # frozen and hashable after conversion


def test_to_dict_nests_and_lists():
    values = Demo(head={"lr": 0.1}).to_dict()
    assert values["trial"] == {"lr": 1e-3, "steps": 10, "name": "adam", "nesterov": False}
    assert values["head"]["lr"] == 0.1 and values["labels"] == [10, 20] and values["columns"] == [["a", 1]]
    assert Demo().digest(1) == config_digest(Demo().to_dict(), 1)


def test_digest_function_is_unchanged():
    """Stored records are keyed by this hash: changing it orphans every record."""
    assert config_digest({"seed": 0, "trial": {"lr": 0.5}}, 3) == "e1f73128de25"


def test_settings_fields_are_dotted_leaves():
    assert settings_fields(Demo) == [
        "seed",
        "trial.lr",
        "trial.steps",
        "trial.name",
        "trial.nesterov",
        "other.lr",
        "other.steps",
        "other.name",
        "other.nesterov",
        "head.lr",
        "head.steps",
        "head.name",
        "head.nesterov",
        "labels",
        "column",
        "columns",
        "anything",
        "limit",
        "mode",
        "hook",
    ]


def test_dotted_overrides_apply_field_by_field_on_the_preset():
    cfg = resolve(Demo, DEMO_PRESETS, "cpu", {"trial.lr": 3e-4})
    assert cfg.trial == Trial(lr=3e-4, name="sgd")  # the preset's name kept, Trial's steps default
    cfg = resolve(Demo, DEMO_PRESETS, "cpu", {"trial": {"steps": 5}})
    assert cfg.trial == Trial(lr=0.01, steps=5, name="sgd")
    cfg = resolve(Demo, DEMO_PRESETS, "smoke", {"other.steps": 4})
    assert cfg.trial == Trial(steps=2) and cfg.other == Trial(lr=0.25, steps=4)  # other's own default kept
    cfg = resolve(Demo, DEMO_PRESETS, "gpu", {"trial.name": "sgd"})
    assert cfg.trial == Trial(lr=0.02, name="sgd")
    cfg = resolve(Demo, DEMO_PRESETS, "cpu", {"trial": Trial(lr=0.7)})  # an instance replaces the whole field
    assert cfg.trial == Trial(lr=0.7)
    cfg = resolve(Demo, DEMO_PRESETS, "cpu", {"head.lr": 0.1, "labels": [1], "seed": 3})
    assert cfg.head == Trial(lr=0.1) and cfg.labels == (1,) and cfg.seed == 3
    assert resolve(Demo, DEMO_PRESETS, "paper") == Demo(labels=(10,))


@pytest.mark.parametrize(
    "overrides", [{"nope": 1}, {"trial.nope": 1}, {"seed.x": 1}, {"trial": {"nope": 1}}, {"trial.lr.x": 1}, {"": 1}]
)
def test_unknown_dotted_name_lists_every_valid_name(overrides):
    with pytest.raises(ConfigError, match="unknown parameter") as err:
        resolve(Demo, DEMO_PRESETS, "cpu", overrides)
    assert str(err.value).endswith("choose from: " + ", ".join(settings_fields(Demo)))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"trial.lr": "abc"}, "Demo.trial: Trial.lr must be a finite number; got 'abc'"),
        ({"trial.lr": "NaN"}, "Demo.trial: Trial.lr must be a finite number; got 'NaN'"),
        ({"trial.steps": True}, "Demo.trial: Trial.steps must be an integer; got True"),
        ({"trial.steps": 5000}, "Demo.trial.steps must be <= 1000"),
        ({"labels": [1.5]}, "Demo.labels must be a list of integers"),
    ],
)
def test_resolve_checks_types_and_ranges(overrides, message):
    with pytest.raises(ConfigError) as err:
        resolve(Demo, DEMO_PRESETS, "cpu", overrides)
    assert str(err.value).startswith(message)


def test_existing_configs_accept_lists_for_bare_tuples():
    exp = EXPERIMENTS["lga.tab1"]
    cfg = exp.resolve("smoke", {"columns": [["fashion_mnist", "cifar", 100, 200]]})
    assert cfg.columns == (("fashion_mnist", "cifar", 100, 200),)
    assert all(isinstance(name, str) for name in settings_fields(exp.config))


# ---- issue 25: upper bounds of sizes, a --set given twice ----------------------------------------------------


def test_every_preset_of_every_experiment_is_within_the_size_bounds():
    for element_id, exp in EXPERIMENTS.items():
        for preset in exp.presets:
            exp.resolve(preset)  # raises a ConfigError naming the field if a preset broke a bound


@dataclass(frozen=True)
class _Sized(Config):
    dataset: str = "cifar10"
    steps: int = 10
    width: float = 1.0
    hidden: int = 8
    n_train: int = 0
    n_test: int = 0
    n_validation: int = 0
    n_labeled: int = 10
    n_unlabeled: int = 0
    draws: tuple[int, ...] = (1, 2)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"steps": 10**12}, "_Sized.steps must be <= 1,000,000,000"),
        ({"seed": 10**23}, "_Sized.seed must be <= 2,147,483,647"),
        ({"width": 16.5}, "_Sized.width must be <= 16 (parameters grow as width²)"),
        ({"hidden": 100_000}, "_Sized.hidden must be <= 16,384"),
        ({"draws": (1, 10**8)}, "_Sized.draws must be <= 10,000,000"),
        ({"n_train": 50_001}, "_Sized.n_train must be <= 50,000 (the 50,000 images in cifar10's training split"),
        ({"n_test": 10_001}, "_Sized.n_test must be <= 10,000 (the 10,000 images in cifar10's test split"),
        ({"n_validation": 50_000}, "_Sized.n_validation must be <= 49,999"),
        ({"n_validation": 5000, "n_unlabeled": 44_991}, "_Sized.n_unlabeled must be <= 44,990"),
        ({"dataset": "svhn", "n_test": 26_033}, "_Sized.n_test must be <= 26,032"),
    ],
)
def test_sizes_beyond_their_bound_are_refused(values, message):
    with pytest.raises(ConfigError) as err:
        _Sized(**values)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_sizes_at_their_bound_are_accepted():
    _Sized(steps=10**9, seed=2**31 - 1, width=16.0, hidden=16_384, n_train=50_000, n_test=10_000)
    _Sized(n_validation=5000, n_unlabeled=44_990)
    _Sized(dataset="stl10", n_train=5000, n_test=8000)
    _Sized(dataset="imagenet", n_train=10**6)  # a data set without a size here: only the generic bound


def test_a_setting_given_twice_is_refused():
    from gradalign.compute.overrides import parse_overrides

    assert parse_overrides(["steps=5", "trial.lr=0.1"]) == {"steps": 5, "trial.lr": 0.1}
    with pytest.raises(ConfigError, match=r"^--set steps is given twice \(50 and 60\); give each setting once$"):
        parse_overrides(["steps=50", "steps=60"])
    with pytest.raises(ConfigError, match="--param slurm_qos is given twice"):
        parse_overrides(["slurm_qos=a", " slurm_qos =b"], "--param")
