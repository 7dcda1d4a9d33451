"""A local run that also scores held-out training images (`training.local_heldout`): its training is the plain run's,
bit for bit; it adds the held-out accuracy; and it refuses a spec where holding images out would change training."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.methods.local import LocalSettings
from gradalign.training import local as tl
from gradalign.training.local_heldout import RUN_KIND, heldout_unit, train_heldout


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _spec(**kw) -> tl.LocalRunSpec:
    protocol = tl.SGRProtocol(epochs=2, batch_size=16)
    method = LocalSettings(method="sgr", modules=3)
    return tl.LocalRunSpec(network="resnet32", method=method, protocol=protocol, width=0.125, **{"n_train": 48, **kw})


def test_the_training_is_the_plain_runs_and_the_held_out_images_are_scored_too():
    spec = _spec(n_test=64)
    plain = tl.train_local(spec, "cpu")
    both = train_heldout(spec, 40, "cpu")
    for name in ("test_acc", "test_loss", "train_loss", "train_acc", "sgr"):
        assert both["history"][name] == plain["history"][name], name
    assert both["final_test_acc"] == plain["final_test_acc"]
    held = tl.train_local(replace(spec, validation=40), "cpu")  # the choice run it replaces: same images scored
    assert both["history"]["val_acc"] == held["history"]["test_acc"] and len(both["history"]["val_acc"]) == 2
    assert both["final_val_acc"] == held["final_test_acc"]


@pytest.mark.parametrize(
    "spec, validation",
    [(_spec(n_train=0), 40), (_spec(validation=40), 40), (_spec(), 0)],
    ids=["whole training split", "spec already held out", "nothing held out"],
)
def test_a_spec_where_holding_out_would_change_training_is_refused(spec, validation):
    with pytest.raises(ConfigError):
        if spec.n_train:
            heldout_unit(spec, validation)
        train_heldout(spec, validation, "cpu")


def test_its_entries_are_of_their_own_kind_keyed_apart_from_the_plain_run():
    unit, plain = heldout_unit(_spec(), 40), tl.local_unit(_spec())
    assert unit.kind == RUN_KIND != plain.kind and unit.key != heldout_unit(_spec(), 41).key
    assert unit.spec == {**plain.spec, "held_out": 40}


def test_it_is_sized_and_measured_as_the_plain_run_it_extends():
    from gradalign.compute.gpu_sizing import group_key
    from gradalign.compute.window_measure import unit_throughput

    unit, plain = heldout_unit(_spec(), 40), tl.local_unit(_spec())
    assert group_key(unit.kind, unit.spec) == group_key(plain.kind, plain.spec)
    assert group_key(unit.kind, unit.spec) != group_key(plain.kind, {**plain.spec, "n_train": 64})
    value = {"train_seconds": 2.0, "epochs_done": 2, "steps_per_epoch": 3}
    assert unit_throughput(unit.kind, unit.spec, value) == unit_throughput(plain.kind, plain.spec, value) is not None
