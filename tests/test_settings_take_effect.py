"""Every setting takes effect, or is refused (issue 26, item 2).

For every registered experiment and every settable field (dotted names included), the test changes the field
to another valid value and checks that either the run keys change (the keys of the experiment's units, for an
experiment that stores its runs as units; else the record's config hash, which keys its one-piece computation)
or the change is refused with "not used by this experiment" before any compute. A field whose change leaves the
unit keys as they were would label a record with settings it did not run with.

A one-piece experiment's key is its config hash, which every field changes; for those the computation is
checked instead: run once at `smoke` on a config that records which fields are read, every field the run never
reads must be refused.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

import pytest

from gradalign.config import ConfigError, Settings, settings_fields
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.units import UNITS, units_of

NOT_USED = "not used by this experiment"


def _preset(exp) -> str:
    return "smoke" if "smoke" in exp.presets else next(iter(exp.presets))


def _value(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _hint(cfg, dotted: str):
    *owners, name = dotted.split(".")
    for part in owners:
        cfg = getattr(cfg, part)
    return typing.get_type_hints(type(cfg)).get(name)


def _candidates(exp, cfg, dotted: str) -> list:
    """Other values to try for `dotted`: a small step from the current one, then the other presets' values."""
    value, hint = _value(cfg, dotted), _hint(cfg, dotted)
    out: list = []
    if value is None:  # an optional setting left to its default (e.g. the data set's): try a value of its type
        kinds = typing.get_args(hint)
        out += [
            v
            for kind, values in ((bool, [True, False]), (float, [0.1, 0.5]), (int, [1, 2]))
            if kind in kinds
            for v in values
        ]
    elif isinstance(value, bool):
        out.append(not value)
    elif isinstance(value, int):
        out += [value + 1, value - 1, value * 2, 1]
    elif isinstance(value, float):
        out += [value * 1.5, value * 0.5, value + 0.1, 0.1, 0.5]
    elif isinstance(value, tuple) and len(value) > 1:
        out += [value[:-1], value[1:]]
    elif isinstance(value, str) and typing.get_origin(hint) is typing.Literal:
        out += [a for a in typing.get_args(hint) if a != value]
    for preset in exp.presets:
        try:
            other = _value(exp.resolve(preset), dotted)
        except ConfigError:
            continue
        if dataclasses.is_dataclass(other):
            continue
        out.append(list(other) if isinstance(other, tuple) else other)
    if isinstance(value, str):
        out += ["jvp", "fd", "svhn", "cifar10", "wrn28_2", "small_cnn", "sgr", "bp", "vgg11", "resnet32"]
    return [v for v in out if v != value and v != (list(value) if isinstance(value, tuple) else value)]


def run_keys(exp, cfg) -> set:
    """What identifies the computation: its units' keys, or the config hash of a one-piece experiment."""
    if exp.id in UNITS:
        return {(unit.kind, unit.key) for unit in units_of(exp.id, cfg)}
    return {cfg.digest(exp.version)}


def silently_ignored(exp) -> tuple[list[str], int]:
    """The dotted fields of `exp` that no valid other value changes the run keys of, and that are not refused;
    and how many fields were tried (changed to some valid value, or refused)."""
    preset = _preset(exp)
    base = exp.resolve(preset)
    keys = run_keys(exp, base)
    ignored, tried = [], 0
    for dotted in settings_fields(exp.config):
        valid = []
        for candidate in _candidates(exp, base, dotted):
            try:
                changed = exp.resolve(preset, {dotted: candidate})
            except ConfigError as err:
                if NOT_USED in str(err):
                    valid = None
                    break
                continue  # not a valid value here: try the next
            valid.append(candidate)
            if run_keys(exp, changed) != keys:
                break
        else:
            if valid:
                ignored.append(f"{dotted} (tried {', '.join(map(repr, valid))})")
        tried += valid is None or bool(valid)
    return ignored, tried


RECORD_LEVEL = {"isoloss.tab1": {"bench_dims"}, "sgr.tab7nobn": {"seeds", "sgr_split", "lam"}}
"""Fields of experiments with units that the record computes with itself, beside its units (the DirectPred cost
sweep; the no-BN study's deepest arms, whose rate its sweep chooses: λ is SGR's alone there, the sweep's keys
carry `vgg_without_bn.UNUSED_LAM`): they change the record's hash and computation, not the units' keys. Each is
checked to be read; that λ moves SGR's own key is `test_vgg_without_bn`'s."""


@pytest.mark.parametrize("element_id", sorted(EXPERIMENTS))
def test_every_setting_changes_the_run_keys_or_is_refused(element_id, monkeypatch, tmp_path):
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    exp = EXPERIMENTS[element_id]
    ignored, tried = silently_ignored(exp)
    ignored = [i for i in ignored if i.split(" ")[0] not in RECORD_LEVEL.get(element_id, set())]
    assert not ignored, f"{element_id}: changing these leaves its run keys as they were: {', '.join(ignored)}"
    assert tried >= len(settings_fields(exp.config)) // 2, f"{element_id}: only {tried} fields could be changed"


def _traced(settings: Settings, read: set, prefix: str = "") -> Settings:
    """A copy of `settings` (nested settings too) whose field reads are added to `read` as dotted names."""
    values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    values = {k: _traced(v, read, f"{prefix}{k}.") if isinstance(v, Settings) else v for k, v in values.items()}
    instance = _tracing_class(type(settings))(**values)
    object.__setattr__(instance, "_read", (read, prefix))
    return instance


@functools.cache
def _tracing_class(cls: type) -> type:
    names = {f.name for f in dataclasses.fields(cls)}

    def __getattribute__(self, name):
        if name in names and "_read" in object.__getattribute__(self, "__dict__"):
            read, prefix = object.__getattribute__(self, "_read")
            read.add(prefix + name)
        return object.__getattribute__(self, name)

    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (cls,), {"__getattribute__": __getattribute__}))


ONE_PIECE = sorted(
    i for i, e in EXPERIMENTS.items() if i not in UNITS and "smoke" in e.presets and e.status != "not run here"
)
TRACED = ONE_PIECE + sorted(RECORD_LEVEL)


SMALLER = {
    "sgr.prop35": {"draws": 10},
    "sgr.mem": {"imagenet_networks": ["resnet18"], "vgg_depth": 12},
    "isoloss.tab1": {"train_subset": 128, "test_subset": 64, "siamese.probe_iterations": 20},
    "isoloss.fig2": {"steps": 30},
    "isoloss.fig3": {"steps": 30},
    "sgr.tab7nobn": {"n_train": 64, "validation": 64},
    "sgr.lam": {"n_train": 64, "validation": 64},
    "metagrad.thm1": {"draws": 4},
}
"""The slowest traced runs (ten seconds and more each at smoke), made smaller in counts only (draws, steps, images,
networks of the same code path): which fields a run reads does not depend on how many it makes. Each is a valid
smoke override (resolved below, so a refused one fails here)."""


@pytest.mark.parametrize("element_id", TRACED)
def test_a_one_piece_experiment_reads_every_setting_it_does_not_refuse(element_id, tmp_path, monkeypatch):
    """(and an experiment with units reads its record-level fields)"""
    from gradalign.runtime import pin_threads, seed_everything

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path))
    exp = EXPERIMENTS[element_id]
    cfg = exp.resolve("smoke", SMALLER.get(element_id, {}))
    read: set[str] = set()
    traced = _traced(cfg, read)
    read.clear()
    pin_threads()
    seed_everything(cfg.seed)
    exp.run(traced, "cpu")
    refused = set(exp.unused(cfg)) if exp.unused else set()
    unread = [n for n in settings_fields(exp.config) if n not in read and n not in refused]
    assert not unread, f"{element_id} never reads {', '.join(unread)}: refuse them or use them"
