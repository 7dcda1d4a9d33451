"""One row of SGR's ImageNet tables (Tables 2 and 5) trained on ImageNet, data-parallel under torchrun, on the
one loop.

The network is cut into K modules (`models.imagenet`), each with its head and its optimizer; a step is the
row's method (`methods.local.LOCAL_METHODS`) on this rank's share of the global batch (`data.imagenet_folder`).
Data parallel for local learning: a method calls each module's `optimizer.step()` itself, after that module's
own backward (several per step), so DDP's single backward hook does not fit; instead every optimizer averages
its parameters' gradients over the ranks just before it steps (`distributed.average_gradients_before_step`),
which is what DDP computes. What a rank computes from its share alone stays per rank, as on the paper's
8 GPUs: BatchNorm statistics, and the δ = ∂L/∂x of each module's mean loss that SGR hands on. The learning rate
follows the row's recipe by epoch (`lr(epoch)`), epochs counted in global batches.
Evaluation: top-1 error of the whole chain on the validation split, each rank a strided share, summed over
ranks. Checkpoints hold the modules, heads, optimizers and the stream's place (`training.distributed`: rank 0
writes, every rank resumes).
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist

from gradalign.data.imagenet_folder import RankStream, rank_indices
from gradalign.params import set_lr
from gradalign.training.distributed import DistributedContext, mean_over_ranks


class ImageNetLocalRun:
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
        eval_batch: int = 256,
    ):
        self.parts, self.heads, self.optimizers, self.step_fn, self.settings = (
            parts,
            heads,
            optimizers,
            step_fn,
            settings,
        )
        self.stream, self.val_images, self.lr, self.context, self.eval_batch = (
            stream,
            val_images,
            lr,
            context,
            eval_batch,
        )
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
        return {"val_error": self.val_error(), "train_loss": sums["loss"] / count}

    @torch.no_grad()
    def val_error(self) -> float:
        """Top-1 error (%) of the chain of modules and the last head on the whole validation split."""
        self.modules.eval()
        indices = list(rank_indices(len(self.val_images), self.context.rank, self.context.world_size))
        loader = torch.utils.data.DataLoader(
            torch.utils.data.Subset(self.val_images, indices),
            batch_size=self.eval_batch,
            num_workers=self.stream.workers,
        )
        counts = torch.zeros(2, dtype=torch.float64, device=self.context.device)  # wrong, seen
        for x, y in loader:
            h = x.to(self.context.device)
            for part in self.parts:
                h = part(h)
            predicted = self.heads[-1](h).argmax(1)
            counts += torch.stack([(predicted != y.to(h.device)).sum(), torch.tensor(len(y), device=h.device)])
        if self.context.world_size > 1:
            dist.all_reduce(counts, op=dist.ReduceOp.SUM)
        self.modules.train()
        return float(100 * counts[0] / counts[1])

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
