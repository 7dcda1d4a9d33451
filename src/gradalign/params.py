"""Parameter helpers every method uses: trainable parameters, flat vectors, Adam, random-state replay.

Kept apart from any method so that a baseline never imports the method it is compared with.
"""

from __future__ import annotations

import contextlib

import torch


def trainable(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The parameters that require gradients, by name, in registration order."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def flat(tensors) -> torch.Tensor:
    """One vector from a sequence of tensors (row-major, in order)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten(vector: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Split `vector` into views shaped like the tensors of `like` (the inverse of `flat`)."""
    sizes = [t.numel() for t in like.values()]
    return {name: chunk.view_as(t) for (name, t), chunk in zip(like.items(), vector.split(sizes))}


def adam(params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> torch.optim.Adam:
    """Adam, fused where this torch supports it (a dense update of many rows is ~10x faster fused on a CPU)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def rng_snapshot(device: torch.device):
    """The random state before a forward pass, so that dropout or in-model augmentation can be replayed."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return device, torch.get_rng_state(), cuda


@contextlib.contextmanager
def replayed_rng(snapshot):
    """Run the block from `snapshot`'s random state; the state afterwards is as if it never ran."""
    if snapshot is None:
        yield
        return
    device, cpu, cuda = snapshot
    with torch.random.fork_rng(devices=[device] if cuda is not None else []):
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, device)
        yield


def buffer_copies(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Clones of the model's buffers, for functional calls that must not move BatchNorm statistics."""
    return {name: b.clone() for name, b in model.named_buffers()}
