"""ImageNet runs, data-parallel under torchrun, on the one loop: a row of SGR's Tables 2 and 5
(`ImageNetLocalRun`) and a column of the meta-gradient paper's Table 3 (`ImageNetSemiMetaRun`).

The network is cut into K modules (`models.imagenet`), each with its head and its optimizer; a step is the
row's method (`methods.local.LOCAL_METHODS`) on this rank's share of the global batch (`data.imagenet_folder`).
Data parallel for local learning: a method calls each module's `optimizer.step()` itself, after that module's
own backward (several per step), so DDP's single backward hook does not fit; instead every optimizer averages
its parameters' gradients over the ranks just before it steps (`distributed.average_gradients_before_step`),
which is what DDP computes. What a rank computes from its share alone stays per rank, as on the paper's
8 GPUs: BatchNorm statistics, and the δ = ∂L/∂x of each module's mean loss that SGR hands on. The learning rate
follows the row's recipe by epoch (`lr(epoch)`), epochs counted in global batches.
Evaluation (`top_errors`): top-1 and top-5 error on the validation split, each rank a strided share, summed over
ranks. Checkpoints hold the networks, optimizers and the streams' places (`training.distributed`: rank 0
writes, every rank resumes).

The SemiMeta run is the same arrangement for one network and one optimizer: a labeled and an unlabeled stream,
`methods.semimeta.semimeta_step` (its meta passes, mixup's λ and BatchNorm statistics per rank), the gradient
averaged before the step. Its mixup λ comes from torch's global generator, which every rank seeds alike: each
rank draws the same λ sequence for its own rows (one process would draw different λ for those rows).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from gradalign.data.imagenet_folder import RankStream, rank_indices
from gradalign.methods.semimeta import semimeta_step
from gradalign.params import set_lr
from gradalign.training import loop
from gradalign.training.checkpoint import fingerprint
from gradalign.training.distributed import DistributedContext, max_over_ranks, mean_over_ranks, train_data_parallel


class ImageNetLocalRun:
    """One row of SGR's tables: K modules with their heads and optimizers, stepped by the row's method."""

    def __init__(
        self,
        parts: list[torch.nn.Module],
        heads: list[torch.nn.Module],
        optimizers: list[torch.optim.Optimizer],
        step_fn: Callable,
        settings,
        stream: RankStream,
        val_images,
        lr: Callable[[float], float],
        context: DistributedContext,
    ):
        self.parts, self.heads, self.optimizers, self.step_fn, self.settings = (
            parts,
            heads,
            optimizers,
            step_fn,
            settings,
        )
        self.stream, self.val_images, self.lr, self.context = stream, val_images, lr, context
        self.modules = torch.nn.ModuleList([*parts, *heads])

    def step(self, t: int) -> dict[str, torch.Tensor]:
        epoch = (t - 1) / self.stream.batches_per_epoch
        for optimizer in self.optimizers:
            set_lr(optimizer, self.lr(epoch))
        x, y = self.stream.next()
        device = self.context.device
        out = self.step_fn(self.parts, self.heads, self.optimizers, x.to(device), y.to(device), self.settings)
        return {"loss": mean_over_ranks(out["loss"].detach(), self.context)}

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict[str, float]:
        top1, _ = top_errors(self.modules, self.chain, self.val_images, self.context, self.stream.workers)
        return {"val_error": top1, "train_loss": sums["loss"] / count}

    def chain(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            x = part(x)
        return self.heads[-1](x)

    def state_dict(self) -> dict:
        return {
            "modules": self.modules.state_dict(),
            "optimizers": [o.state_dict() for o in self.optimizers],
            "stream": self.stream.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.modules.load_state_dict(state["modules"])
        for optimizer, saved in zip(self.optimizers, state["optimizers"]):
            optimizer.load_state_dict(saved)
        self.stream.load_state_dict(state["stream"])


class ImageNetSemiMetaRun:
    """One column of Table 3: `model` trained by `semimeta_step` (the variant in `settings`) on a labeled and an
    unlabeled stream; `lr(epoch)` and `ramp(epoch)` give the schedule, epochs counted over the labeled stream."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        settings,
        labeled: RankStream,
        unlabeled: RankStream,
        val_images,
        classes: int,
        lr: Callable[[float], float],
        ramp: Callable[[float], float],
        context: DistributedContext,
    ):
        self.model, self.optimizer, self.settings, self.labeled, self.unlabeled = (
            model,
            optimizer,
            settings,
            labeled,
            unlabeled,
        )
        self.val_images, self.classes, self.lr, self.ramp, self.context = val_images, classes, lr, ramp, context

    def step(self, t: int) -> dict[str, torch.Tensor]:
        epoch = (t - 1) / self.labeled.batches_per_epoch
        lr = self.lr(epoch)
        set_lr(self.optimizer, lr)
        (x_l, y_l), (x_u, _) = self.labeled.next(), self.unlabeled.next()
        device = self.context.device
        x_l, y_l, x_u = x_l.to(device), y_l.to(device), x_u.to(device)
        out = semimeta_step(
            self.model, self.optimizer, x_l, y_l, x_u, lr, self.ramp(epoch), self.settings, self.classes
        )
        return {"loss": mean_over_ranks(out["loss"], self.context)}

    def evaluate(self, t: int, sums: dict[str, float], count: int, last) -> dict[str, float]:
        top1, top5 = top_errors(self.model, self.model, self.val_images, self.context, self.labeled.workers)
        return {"top1_error": top1, "top5_error": top5, "train_loss": sums["loss"] / count}

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "labeled": self.labeled.state_dict(),
            "unlabeled": self.unlabeled.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.labeled.load_state_dict(state["labeled"])
        self.unlabeled.load_state_dict(state["unlabeled"])


def train_epochs(
    run, epochs: int, per_epoch: int, context: DistributedContext, checkpoint, spec: dict, name: str
) -> tuple[dict, float]:
    """`epochs` epochs of `per_epoch` steps on every rank, evaluated after each (`train_data_parallel`, checkpoint
    keyed by `spec`): the history, and the slowest rank's training seconds, the same on every rank so that every
    rank returns one result (one run-cache entry)."""
    steps = epochs * per_epoch
    out = train_data_parallel(
        run,
        steps,
        context=context,
        checkpoint=checkpoint,
        run_fingerprint=fingerprint(spec),
        eval_at=loop.every(per_epoch, steps),
        name=name,
    )
    seconds = max_over_ranks(torch.tensor(out.train_seconds, dtype=torch.float64, device=context.device), context)
    return out.history, float(seconds)


@torch.no_grad()
def top_errors(
    module: torch.nn.Module, forward: Callable, val_images, context: DistributedContext, workers: int, batch: int = 256
) -> tuple[float, float]:
    """(top-1, top-5) error (%) of `forward` on the whole validation split, `module` in eval mode meanwhile; each
    rank scores its strided share and the counts are summed over ranks (top-5 is top-k for k = classes < 5)."""
    module.eval()
    indices = list(rank_indices(len(val_images), context.rank, context.world_size))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.Subset(val_images, indices), batch_size=batch, num_workers=workers
    )
    counts = torch.zeros(3, dtype=torch.float64, device=context.device)  # top-1 wrong, top-5 wrong, seen
    for x, y in loader:
        logits = forward(x.to(context.device))
        y = y.to(logits.device)
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        wrong1, wrong5 = (top[:, 0] != y).sum(), (~(top == y[:, None]).any(1)).sum()
        counts += torch.stack([wrong1, wrong5, torch.tensor(len(y), device=y.device)]).double()
    if context.world_size > 1:
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    module.train()
    return float(100 * counts[0] / counts[2]), float(100 * counts[1] / counts[2])
