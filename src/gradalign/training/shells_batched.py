"""The supervised arm of LGA's shells study (§3.2, Figures 3-4) for all trials at once (`training.batched`).

Trial k is `shells_trial(datas[k], "supervised", s, seeds[k])` with its training steps batched: the N networks'
parameters stacked (`stack_models`), one `vmap(grad_and_value(CE))` and one `BatchedAdam` step per step for all
of them, each trial on its own data, initial weights (torch.manual_seed(seed)) and minibatches
(IndexStream(n, batch, seed)). What is measured stays per trial, at the same steps and from the same generators:
before step t with (t − 1) % eval_every = 0, the top eigenpair of the test-loss Hessian (Lanczos, seeded
seed + t − 1); after it, the alignment of the update with q1 and the test error and loss, with the divergence stop
of `training.shells`. The curves equal the one-at-a-time ones to float rounding, not bitwise: over 40 steps on one
CPU thread the alignments and eigenvalues of 3 trials agreed to ~1e-7 relative (the single trial's fused Adam
and a batched product round differently; tests/test_shells_batched.py). Over a study's 3,000 steps training
amplifies such differences as it amplifies a change of thread count: at the `cpu` preset single trials' test
losses and eigenvalues moved by up to 4 % relative, the 12-trial means by about 0.1 %. Speed there (2 threads,
measured once): 37 s for the 12 supervised arms batched against about 53 s one after another; the per-trial
Lanczos measurements, not batched, take most of it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import grad_and_value, vmap

from gradalign.analysis.hessian import alignment, model_hessian_top_eigenvector
from gradalign.data.shells import N_CLASSES, ShellsData
from gradalign.methods.divergence import raise_if_not_finite
from gradalign.errors import ConfigError, DivergenceError
from gradalign.models.mlp import relu_mlp
from gradalign.params import flat
from gradalign.progress import progress
from gradalign.training.batched import BatchedAdam, trial_loss, stack_models
from gradalign.training.evaluate import classification_metrics
from gradalign.training.shells import DIVERGED_LOSS, ShellsTrialSettings, final_metrics, validation_metrics
from gradalign.training.streams import IndexStream


def supervised_trials(datas: list[ShellsData], s: ShellsTrialSettings, seeds: list[int]) -> list[dict[str, list]]:
    """Each trial's curves, as `shells_trial(data, "supervised", s, seed)` returns them."""
    if len(datas) != len(seeds) or not datas:
        raise ConfigError(f"need one seed per data set; got {len(datas)} data sets and {len(seeds)} seeds")
    device = datas[0].x_labeled.device
    models = []
    for seed, data in zip(seeds, datas):
        torch.manual_seed(seed)
        models.append(relu_mlp(data.x_labeled.shape[1], 128, 4, N_CLASSES).to(device))
    params, _, base = stack_models(models)
    optimizer = BatchedAdam(params, s.lr)
    gradient_and_loss = vmap(grad_and_value(trial_loss(base)))
    streams = [IndexStream(len(d.x_labeled), s.batch, seed) for d, seed in zip(datas, seeds)]
    xs, ys = torch.stack([d.x_labeled for d in datas]), torch.stack([d.y_labeled for d in datas])
    rows = torch.arange(len(datas), device=device)[:, None]
    names = list(params)
    curves = [{"step": []} for _ in datas]

    def load(k: int) -> torch.nn.Module:
        with torch.no_grad():
            for name, p in models[k].named_parameters():
                p.copy_(params[name][k])
        return models[k]

    def flat_trial(k: int) -> torch.Tensor:
        return flat([params[name][k] for name in names]).clone()

    with progress(None, desc=f"shells supervised x{len(datas)}", total=s.steps) as bar:
        for t in range(1, s.steps + 1):
            measured = (t - 1) % s.eval_every == 0
            if measured and s.alignment:
                tops, before = [], []
                for k, (data, seed) in enumerate(zip(datas, seeds)):
                    raise_if_not_finite("shells supervised", t - 1, {"parameters": flat_trial(k)})
                    x_h, y_h = data.x_test[: s.hessian_points], data.y_test[: s.hessian_points]
                    tops.append(
                        model_hessian_top_eigenvector(
                            load(k),
                            lambda o, y_h=y_h: F.cross_entropy(o, y_h),
                            x_h,
                            iters=s.lanczos_iters,
                            generator=torch.Generator().manual_seed(seed + t - 1),
                        )
                    )
                    before.append(flat_trial(k))
            idx = torch.stack([stream.next() for stream in streams]).to(device)
            grads, loss = gradient_and_loss(params, xs[rows, idx], ys[rows, idx])
            optimizer.step(grads)
            bar.update(1)
            if measured:
                for k, data in enumerate(datas):
                    raise_if_not_finite("shells supervised", t, {"loss": loss[k]})
                    error, test_loss = classification_metrics(load(k), data.x_test, data.y_test)
                    if not test_loss < DIVERGED_LOSS:
                        raise DivergenceError(
                            f"shells supervised (seed {seeds[k]}) diverged at step {t - 1}: test_loss = "
                            f"{test_loss:.3g} (over 100x the chance loss ln {N_CLASSES}); lower the learning rate"
                        )
                    values = {"test_accuracy": 1 - error / 100, "test_loss": test_loss}
                    if s.alignment:
                        eigenvalue, q1 = tops[k]
                        values["alignment"] = float(alignment(flat_trial(k) - before[k], q1))
                        values["eigenvalue"] = float(torch.as_tensor(eigenvalue, dtype=torch.float64))
                    values.update(validation_metrics(models[k], data))
                    curves[k]["step"].append(t - 1)
                    for name, v in values.items():
                        curves[k].setdefault(name, []).append(v)
    for k, data in enumerate(datas):
        curves[k].update(final_metrics(load(k), data))
    return curves
