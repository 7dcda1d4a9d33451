"""A local-learning run that also scores held-out training images: one run serving a choice and a comparison.

The λ study (`experiments.sgr.lambda_study`) chooses a reading of λ on validation with the first seed's run at the
full budget, then compares every reading at 3 seeds on the test split. The first seed's comparison run and its choice
run train the same images (`local_data` draws the training subset as the first `n_train` of one permutation, with or
without held-out images after it), in the same batches and steps: only what they score differs. This run scores
both: the test split, as the comparison run (`test_acc`, its divergence a result as there), and, at every epoch,
`validation` training images held out after the training subset (`val_acc`; `final_val_acc` at the end, chance where
the run diverged). Scoring is in eval mode without gradients and draws no random number, so the training is the plain
run's step for step (tested bitwise against it).

Its entries are of their own kind (`RUN_KIND`), keyed by the plain run's spec and the held-out count, so that no
reader of `sgr.local` entries meets a field it does not know.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from gradalign.errors import ConfigError
from gradalign.store.run_unit import Unit
from gradalign.training.evaluate import classification_metrics
from gradalign.training.local import RUN_VERSION, LocalRun, LocalRunSpec, train_local
from gradalign.training.local_data import local_data

RUN_KIND = "sgr.local-heldout"


class HeldOutAlso(LocalRun):
    """`LocalRun` whose evaluation also scores the held-out images `held` = (normalised images, labels)."""

    def __init__(self, spec: LocalRunSpec, data, device, held: tuple[torch.Tensor, torch.Tensor]):
        super().__init__(spec, data, device)
        self.held = held

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict:
        out = super().evaluate(t, sums, count, last)
        error, _ = classification_metrics(self.model, *self.held)
        return {**out, "val_acc": 100.0 - error}


def train_heldout(spec: LocalRunSpec, validation: int, device, checkpoint: Path | None = None, **kwargs) -> dict:
    """`training.local.train_local`'s run of `spec` (`spec.validation` must be 0: it scores the test split), also
    scored on the `validation` training images held out after its training subset; its value adds `final_val_acc`."""
    from gradalign.data.image_sets import image_set_info

    if spec.validation or validation < 1:
        raise ConfigError(f"a held-out-also run needs spec.validation = 0 and validation >= 1; got {validation}")
    device = torch.device(device)
    plain = local_data(spec.dataset, spec.n_train, spec.n_test, device, spec.data_seed, pad_to=spec.pad_to)
    split = local_data(spec.dataset, spec.n_train, spec.n_test, device, spec.data_seed, validation, spec.pad_to)
    if not torch.equal(plain.images, split.images):  # n_train = 0 (the whole split) holds nothing back
        raise ConfigError(f"{spec.title}: its training images differ once {validation:,} are held out; give n_train")
    make_run = functools.partial(HeldOutAlso, held=(split.test_x, split.test_y))
    out = train_local(spec, device, checkpoint, data=plain, make_run=make_run, **kwargs)
    chance = 100.0 / image_set_info(spec.dataset).num_classes
    out["final_val_acc"] = out["history"]["val_acc"][-1] if out["diverged"] is None else chance
    return out


def heldout_unit(spec: LocalRunSpec, validation: int, device=None) -> Unit:
    """The run as a run-cache unit (kind `RUN_KIND`). `device`: where it trains; None: chosen where it runs."""
    if spec.validation or validation < 1:
        raise ConfigError(f"a held-out-also run needs spec.validation = 0 and validation >= 1; got {validation}")
    key = {**spec.to_dict(), "held_out": validation}
    label = f"{spec.title} (+{validation:,} held out)"
    return Unit(label, RUN_KIND, key, RUN_VERSION, functools.partial(_train_unit, spec, validation, device))


def _train_unit(spec: LocalRunSpec, validation: int, device, checkpoint: Path) -> dict:
    from gradalign.runtime import select_device

    return train_heldout(spec, validation, select_device() if device is None else device, checkpoint)
