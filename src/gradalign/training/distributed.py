"""Data-parallel training under torchrun (DistributedDataParallel) on the one loop (`training.loop.train`).

torchrun starts one process per GPU (or per CPU worker) and tells each its place in environment variables;
`init_distributed` reads them, checks them (a one-line `ConfigError` before any compute) and joins the
process group: nccl on CUDA with the device cuda:LOCAL_RANK, gloo on the CPU. A process started without
torchrun's variables is a world of one: no process group, the model is not wrapped, the loop runs as always.

Every rank runs the same run, seeded identically, and only the data is split:

- the batch: every rank draws the same global batch indices from the same seeded `IndexStream` and takes its
  contiguous slice of global_batch / world_size rows (`rank_share`), so the union over ranks is exactly the
  batch one process would draw. Randomness drawn in the step (noise, masks, augmentations) follows the same
  rule: draw it for the global batch from the (identical) global generator and slice it; a mask drawn on each
  rank for its own slice would repeat one pattern on every rank, which one process never does;
- the gradient: each rank's loss is the mean over its slice and DDP averages the gradients over ranks, which
  is the one-process mean over the global batch (equal slices), up to float rounding;
- the step diagnostics the loop sums and checks for divergence, and the values `evaluate` returns, must be
  the same on every rank (`mean_over_ranks`, or an evaluation on the full set): the loop decides its
  divergence stop, best-by-validation and history from them on each rank separately.

Checkpoints (`rank_checkpoint`, used by `train_data_parallel`). The loop writes its checkpoint itself, and
every rank runs the loop, so every rank gets a path: rank 0 the real one, rank r > 0 a scratch file beside
it (`<name>.rank<r>`). Before training, every rank waits until rank 0's file is settled, the other ranks
copy it byte for byte to their scratch path (or delete a stale scratch file when rank 0 has none), and
every rank waits again, so each resumes from rank 0's state before rank 0 writes anything new. This is
correct because the state a checkpoint holds (the run's state, the loop's sums and history, torch's global
random state) is the same on every rank: DDP keeps the parameters equal, the streams and the generator are
seeded alike and drawn alike, the diagnostics are reduced over ranks. `train_data_parallel` checks this at
the start (a digest of the run's state and of the random state, compared over ranks) and refuses a run
seeded per rank. The other ranks do write: a full checkpoint to their scratch file whenever rank 0 writes
its own (the same payload but for the wall time), which costs one checkpoint's disk traffic per rank; the
scratch files are deleted when the call ends, finished or not. Only rank 0's file is ever resumed from.

The time box must not differ between ranks: `max_evals` stops every rank at the same evaluation, but
`time_limit_s` reads each rank's own clock and would let one rank stop while the others wait for it in the
next all-reduce, so `train_data_parallel` refuses it when there is more than one rank.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import torch
import torch.distributed as dist

from gradalign.errors import ConfigError
from gradalign.training.timebox import seconds_left
from gradalign.training import loop

BACKENDS = ("gloo", "nccl")
RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class DistributedContext:
    """This process's place in the world: its rank among world_size, its rank on its machine, its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    has_process_group: bool = False  # this context initialised torch.distributed's default group (and closes it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (nothing to wait for in a world of one)."""
        if not self.has_process_group:
            return
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])  # nccl: on this rank's device, not cuda:0
        else:
            dist.barrier()

    def close(self) -> None:
        """Destroy the process group this context initialised; calling it twice is harmless."""
        if self.has_process_group and dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def torchrun_environment(environ: Mapping[str, str] = os.environ) -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) from torchrun's variables, None when none is set; ConfigError when they
    are incomplete, not integers, inconsistent, or a world of several lacks MASTER_ADDR/MASTER_PORT."""
    given = {name: environ[name] for name in RANK_VARIABLES if environ.get(name, "").strip()}
    if not given:
        return None
    missing = [name for name in RANK_VARIABLES if name not in given]
    if missing:
        raise ConfigError(
            f"torchrun sets {', '.join(RANK_VARIABLES)} together; {', '.join(missing)} missing "
            f"(got {', '.join(f'{k}={v!r}' for k, v in given.items())}); launch with torchrun or unset them"
        )
    values = {}
    for name, raw in given.items():
        if not re.fullmatch(r"\s*\d+\s*", raw):
            raise ConfigError(f"{name} must be a non-negative integer; got {raw!r}")
        values[name] = int(raw)
    rank, world, local = values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]
    if world < 1:
        raise ConfigError(f"WORLD_SIZE must be at least 1; got {world}")
    if rank >= world or local >= world:
        raise ConfigError(f"RANK and LOCAL_RANK must be below WORLD_SIZE={world}; got RANK={rank}, LOCAL_RANK={local}")
    if world > 1:
        port = environ.get("MASTER_PORT", "")
        if not environ.get("MASTER_ADDR", "").strip():
            raise ConfigError("MASTER_ADDR is not set: a world of several processes needs torchrun's rendezvous")
        if not re.fullmatch(r"\s*\d+\s*", port) or not 1 <= int(port) <= 65535:
            raise ConfigError(f"MASTER_PORT must be a port number in [1, 65535]; got {port!r}")
    return rank, world, local


def init_distributed(backend: str | None = None) -> DistributedContext:
    """Join torchrun's process group (nccl and cuda:LOCAL_RANK on CUDA, else gloo and the CPU; `backend`
    forces one, and gloo always means the CPU); without torchrun's variables, a world of one and no group.
    Every check happens before the group is joined."""
    if backend not in (None, *BACKENDS):
        raise ConfigError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)} (or None: automatic)")
    place = torchrun_environment()
    rank, world, local = place if place is not None else (0, 1, 0)
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ConfigError("backend 'nccl' needs CUDA, which is not available here; use 'gloo'")
        if local >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK={local} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    device = torch.device("cuda", local) if backend == "nccl" else torch.device("cpu")
    if world == 1:
        return DistributedContext(0, 1, local, device)
    if dist.is_initialized():
        raise ConfigError("a process group is already initialised in this process; close it before another")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    return DistributedContext(rank, world, local, device, has_process_group=True)


def rank_batch_size(global_batch: int, world_size: int) -> int:
    """Rows per rank; ConfigError unless the global batch splits evenly (unequal slices would weight the
    ranks' rows unequally in DDP's average)."""
    if global_batch < world_size or global_batch % world_size:
        raise ConfigError(
            f"global batch {global_batch} does not split evenly over {world_size} processes; "
            f"use a multiple of {world_size}"
        )
    return global_batch // world_size


def rank_share(global_rows: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """This rank's contiguous slice of a global batch (indices, or anything drawn per row of it)."""
    size = rank_batch_size(len(global_rows), context.world_size)
    return global_rows[context.rank * size : (context.rank + 1) * size]


def mean_over_ranks(value: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """The mean of `value` over ranks, the same on every rank (for step diagnostics); `value` itself in a world
    of one. Sums then divides: gloo has no average."""
    if context.world_size == 1:
        return value
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total / context.world_size


def max_over_ranks(value: torch.Tensor, context: DistributedContext) -> torch.Tensor:
    """The largest `value` over ranks, the same on every rank (e.g. a run's wall time, so that every rank returns
    one result); `value` itself in a world of one."""
    if context.world_size == 1:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value


def data_parallel(model: torch.nn.Module, context: DistributedContext) -> torch.nn.Module:
    """`model` (already on `context.device`) made data-parallel: DDP in a world of several, else `model` itself.
    DDP copies rank 0's parameters to every rank now and averages gradients in `backward`. Keep the bare
    module for `state_dict` so checkpoints carry no `module.` prefix and load in any world size."""
    if context.world_size == 1:
        return model
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def average_gradients_before_step(optimizer: torch.optim.Optimizer, context: DistributedContext) -> None:
    """Make `optimizer.step()` first replace each of its parameters' gradients by their mean over the ranks: DDP's
    average, for methods that step several optimizers after several backward passes (local learning), which
    DDP's one-backward hook does not serve. One all-reduce of the flattened gradients per step; nothing in a
    world of one. Every rank must hold gradients for the same parameters (the same model and method)."""
    if context.world_size == 1:
        return

    def average(opt, args, kwargs) -> None:
        grads = [p.grad for group in opt.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= context.world_size
        for g, mean in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(mean.view_as(g))

    optimizer.register_step_pre_hook(average)


def scratch_checkpoint(path: Path, rank: int) -> Path:
    """Where rank `rank` > 0 lets the loop write: a private file beside rank 0's, deleted after training."""
    return path.with_name(f"{path.name}.rank{rank}")


@contextlib.contextmanager
def rank_checkpoint(path: Path | None, context: DistributedContext) -> Iterator[Path | None]:
    """The checkpoint path this rank hands the loop: `path` on rank 0 (and in a world of one); on rank r > 0
    a scratch file that starts as a copy of rank 0's file, so every rank resumes rank 0's state. Waits for
    every rank before the copy (rank 0's file is settled) and after it (no rank writes before all have read)."""
    if path is None or context.world_size == 1:
        yield path
        return
    path = Path(path)
    scratch = scratch_checkpoint(path, context.rank) if not context.is_main else None
    context.barrier()
    if scratch is not None:
        if path.exists():
            shutil.copyfile(path, scratch)
        else:
            scratch.unlink(missing_ok=True)  # a stale scratch of an earlier launch must not be resumed
    context.barrier()
    try:
        yield path if scratch is None else scratch
    finally:
        if scratch is not None:
            scratch.unlink(missing_ok=True)


def check_ranks_agree(run, context: DistributedContext) -> None:
    """ConfigError on every rank unless the run's state and torch's global random state are the same on all
    ranks: rank 0's checkpoint stands for every rank only then (a rank seeded with seed + rank is refused)."""
    if context.world_size == 1:
        return
    digest = _state_digest({"run": run.state_dict(), "rng": torch.get_rng_state()})
    spread = torch.tensor([digest, -digest], dtype=torch.int64, device=context.device)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)  # (max, -min) over ranks
    if spread[0] != -spread[1]:
        raise ConfigError(
            "the ranks start from different states (run state or global random state): seed every rank "
            "identically and split only the data (rank_share)"
        )


def _state_digest(state) -> int:
    """A 56-bit digest of a nested state (dicts, lists, tensors, numbers), equal for equal states."""
    digest = hashlib.sha256()

    def visit(value) -> None:
        if isinstance(value, Mapping):
            for key in sorted(value, key=str):
                digest.update(repr(key).encode())
                visit(value[key])
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, torch.Tensor):
            values = value.detach().cpu().contiguous()
            digest.update(f"{tuple(values.shape)} {values.dtype}".encode())
            digest.update(values.reshape(-1).view(torch.uint8).numpy().tobytes() if values.numel() else b"")
        else:
            digest.update(repr(value).encode())

    visit(state)
    return int.from_bytes(digest.digest()[:7], "big")


def train_data_parallel(
    run: loop.Run, steps: int, *, context: DistributedContext, checkpoint: Path | None = None, **loop_options
) -> loop.LoopResult:
    """`loop.train` on every rank: the ranks checked to agree, the checkpoint written by rank 0 and resumed by
    all (`rank_checkpoint`); `time_limit_s` refused in a world of several (use `max_evals`)."""
    if context.world_size > 1 and loop_options.get("time_limit_s") is not None:
        raise ConfigError(
            "time_limit_s reads each rank's own clock, so the ranks could stop at different steps; "
            "use max_evals with several processes"
        )
    if context.world_size > 1 and seconds_left() is not None:  # the loop would read the box on each rank's clock
        raise ConfigError("--time-limit reads each rank's own clock; run without it under torchrun")
    check_ranks_agree(run, context)
    with rank_checkpoint(checkpoint, context) as path:
        return loop.train(run, steps, checkpoint=path, **loop_options)
