"""Activation memory of one training step: global BP against local learning with K modules (SGR, Table 5).

What is counted (our convention). Backpropagation keeps, from the forward pass until the backward pass
uses them, the tensors each operation saves for its gradient (a conv its input, a ReLU its output, BN its
input and batch statistics, ...). `saved_activation_bytes` records them with
`torch.autograd.graph.saved_tensors_hooks` while `fn()` runs and adds up their storages:
  - each storage is counted once (keyed by its data pointer): a ReLU's output that the next conv saves
    again, or a view of a saved tensor, costs nothing more;
  - the storages of the tensors passed as `exclude` (the model's parameters and buffers, e.g. a
    Linear's transposed weight or BN's running statistics) are not counted: they exist whatever the
    training scheme;
  - everything else saved is counted, the input batch included when a layer saves it (under local
    learning each module saves its own input, which is the previous module's detached output);
  - tensors not saved for backward (gradients, optimizer state, the stored δ of SGR, temporaries of a
    kernel) are not counted. All saved tensors are held until `fn` returns, so the total is the saved
    memory at the moment the backward pass would begin: the peak of the saved tensors of that graph.

One training step (`step_activation_memory`):
  - global BP (K = 1): the whole network's graph is alive at once; peak = saved bytes of model + loss;
  - local learning with K modules: module k runs on the detached output of module k − 1 with its own
    local head (the last module with the network's own classifier), steps, and its graph is freed before
    module k + 1 runs (DGL / Algorithm 1 order). The peak is the max over modules of the saved bytes of
    module + head + loss. With `method="sgr"` the module's objective is Eq. 5 as `methods.sgr.module_step`
    builds it: its input gradient is taken with `create_graph=True`, and the graph of that gradient is
    counted too.
`cuda_step_peak_bytes` runs the same step for real on a GPU and reads `torch.cuda.max_memory_allocated`
(activations, gradient buffers during backward and kernel workspaces: everything above the parameters,
their gradients and the batch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gradalign.errors import ConfigError
from gradalign.methods.sgr import module_step
from gradalign.models.imagenet import UnitNetwork, balanced_boundaries, local_heads, split_units, stage_boundaries
from gradalign.models.local_heads import local_head
from gradalign.models.resnet_cifar import CifarResNet, module_channels, split_into_modules
from gradalign.models.vgg_deep import DeepVGG, vgg_module_channels, vgg_modules

METHODS = ("local", "sgr")
"""local: each module trained on its local loss only (layer-wise); sgr: Eq. 5 with the input gradient's graph."""

SGR_LAMBDA = 1.0  # App. E's CIFAR default; the memory does not depend on its value (only on λ ≠ 0)


def _conv_heads(channels: Callable) -> Callable:
    def heads(model: nn.Module, modules: int, kind: str, classes: int) -> list[nn.Module]:
        return [local_head(kind, c, classes) for c in channels(model, modules)[:-1]]

    return heads


def _unit_heads(model: UnitNetwork, modules: int, kind: str, classes: int) -> list[nn.Module]:
    return local_heads(model, modules, classes)  # the head follows the output's layout (`models.imagenet`)


SPLITTERS: dict[type, tuple[Callable, Callable]] = {
    CifarResNet: (split_into_modules, _conv_heads(module_channels)),
    DeepVGG: (vgg_modules, _conv_heads(vgg_module_channels)),
    UnitNetwork: (split_units, _unit_heads),
}
"""For each network family: (its K feature modules, its K − 1 local heads of a kind). The ImageNet networks
(`UnitNetwork`) take their cuts from `models.imagenet.set_boundaries` and their heads from their layouts."""


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    return str(t.device), t.untyped_storage().data_ptr()


def measure_saved(fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> tuple[int, Any]:
    """(bytes of the storages saved for backward while `fn()` runs, the value `fn` returned); see the module."""
    skip = {_storage_key(t) for t in exclude}
    seen: dict[tuple[str, int], torch.Tensor] = {}  # holds every saved storage until fn returns: no address reuse

    def pack(t: torch.Tensor) -> torch.Tensor:
        t = t.detach()  # a saved output kept with its grad_fn would make a cycle that is never freed
        if t.numel() and _storage_key(t) not in skip:
            seen.setdefault(_storage_key(t), t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    total = sum(t.untyped_storage().nbytes() for t in seen.values())
    return total, result


def saved_activation_bytes(fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the tensors autograd saves for backward while running `fn()`, each storage once, the
    storages of `exclude` (parameters, buffers) left out."""
    return measure_saved(fn, exclude)[0]


def _state_of(*modules: nn.Module) -> list[torch.Tensor]:
    return [t for m in modules for t in (*m.parameters(), *m.buffers())]


def _classes(model: nn.Module) -> int:
    return model.head[-1].out_features


def local_step_plan(model: nn.Module, modules: int, head: str) -> tuple[list[nn.Module], list[nn.Module]]:
    """The K feature modules and the K heads of a local step: `head`-kind local heads, then the model's own."""
    if type(model) not in SPLITTERS:
        raise ConfigError(f"no local split for {type(model).__name__}; known: {[c.__name__ for c in SPLITTERS]}")
    split, local = SPLITTERS[type(model)]
    return list(split(model, modules)), [*local(model, modules, head, _classes(model)), model.head]


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ConfigError(f"unknown method {method!r}; choose one of {METHODS}")


def run_local_step(
    model: nn.Module,
    modules: int,
    batch: torch.Tensor,
    labels: torch.Tensor,
    head: str,
    method: str,
    run_module: Callable[[Callable[[], Any], list[torch.Tensor]], Any],
    heads: list[nn.Module] | None = None,
) -> list[Any]:
    """One training step of K modules; `run_module(fn, state)` runs module k (fn returns its objective and
    the next input and δ) and returns what it measured. K = 1 is global BP through the whole network."""
    _check_method(method)
    feature_modules, planned = local_step_plan(model, modules, head)
    heads = planned if heads is None else heads
    for h in heads:
        h.to(device=batch.device, dtype=batch.dtype).train()
    measured, x, delta = [], batch, None
    for k, (module, classifier) in enumerate(zip(feature_modules, heads)):
        loss_of = lambda out, c=classifier: F.cross_entropy(c(out), labels)  # noqa: E731

        def fn(module=module, loss_of=loss_of, x=x, delta=delta, first=k == 0):
            if method == "sgr" and not first:
                objective, step = module_step(module, loss_of, x, delta, SGR_LAMBDA)
                return objective, step.output, step.delta_out
            out = module(x.detach())  # layer-wise, and SGR's first module (no δ before it)
            return loss_of(out), out, None

        result = run_module(fn, _state_of(module, classifier))
        measured.append(result[0])
        x, delta = result[1], result[2]
    return measured


def step_activation_memory(
    model: nn.Module,
    modules: int,
    batch: torch.Tensor,
    labels: torch.Tensor | None = None,
    head: str = "belilovsky",
    method: str = "local",
) -> dict:
    """Saved bytes of one training step of `model` split into K = `modules` modules (K = 1: global BP).

    Returns {"peak_bytes": max over modules, "per_module_bytes": [...], "modules": K, "method", "head"}.
    """
    labels = torch.zeros(batch.shape[0], dtype=torch.long, device=batch.device) if labels is None else labels
    model.train()

    def run_module(fn, state):
        saved, (objective, out, delta) = measure_saved(fn, state)
        if delta is None and method == "sgr":  # δ of this module for the next one (outside the measured part)
            delta = torch.autograd.grad(objective, out, retain_graph=True)[0]
        return saved, out.detach(), None if delta is None else delta.detach()

    per_module = run_local_step(model, modules, batch, labels, head, method, run_module)
    return {
        "modules": modules,
        "method": method,
        "head": head,
        "peak_bytes": max(per_module),
        "per_module_bytes": per_module,
    }


def cuda_step_peak_bytes(
    model: nn.Module,
    modules: int,
    batch: torch.Tensor,
    labels: torch.Tensor | None = None,
    head: str = "belilovsky",
    method: str = "local",
) -> int:
    """torch.cuda.max_memory_allocated during one real step (forward and backward of each module in turn),
    minus what was allocated before it (parameters, their gradients, the batch). Needs a CUDA batch."""
    if batch.device.type != "cuda":
        raise ConfigError(f"cuda_step_peak_bytes needs a batch on a CUDA device, got {batch.device}")
    labels = torch.zeros(batch.shape[0], dtype=torch.long, device=batch.device) if labels is None else labels
    model.train()
    _check_method(method)
    heads = local_step_plan(model, modules, head)[1]

    def run_module(fn, state):
        objective, out, delta = fn()
        if delta is None and method == "sgr":
            delta = torch.autograd.grad(objective, out, retain_graph=True)[0]
        objective.backward()
        return 0, out.detach(), None if delta is None else delta.detach()

    run_local_step(model, modules, batch, labels, head, method, run_module, heads)  # creates every .grad
    for p in [*model.parameters(), *(q for h in heads for q in h.parameters())]:
        if p.grad is not None:
            p.grad.zero_()
    torch.cuda.synchronize(batch.device)
    before = torch.cuda.memory_allocated(batch.device)
    torch.cuda.reset_peak_memory_stats(batch.device)
    run_local_step(model, modules, batch, labels, head, method, run_module, heads)
    torch.cuda.synchronize(batch.device)
    return int(torch.cuda.max_memory_allocated(batch.device) - before)


# --- the cuts of the ImageNet networks (`models.imagenet`), which need the measurement above -----------------


def unit_costs(model: UnitNetwork, sample: torch.Tensor, input_gradient_graph: bool = False) -> list[int]:
    """Each unit's saved-for-backward bytes on `sample` (train mode, one unit at a time, its input detached).
    `input_gradient_graph`: also the graph of the unit's input gradient taken with `create_graph=True` (of a
    stand-in scalar, the mean square of the output), as an SGR module keeps it."""

    def run(unit, x):
        x = x.detach().requires_grad_(input_gradient_graph)
        out = unit(x)
        if input_gradient_graph:
            torch.autograd.grad(out.square().mean(), x, create_graph=True)
        return out.detach()

    model.train()
    costs, x = [], sample
    for unit in model.units:
        saved, x = measure_saved(lambda unit=unit, x=x: run(unit, x), [*unit.parameters(), *unit.buffers()])
        costs.append(saved)
    return costs


def set_boundaries(
    model: UnitNetwork, modules: int, rule: str, sample: torch.Tensor | None = None, method: str = "local"
) -> tuple[int, ...]:
    """Fix the cuts of a K-module split: `rule` "stages" (Table 2) or "memory" (Table 5: the cuts of least
    peak for `method`, "local" or "sgr", from the unit costs on `sample`)."""
    if rule == "stages":
        ends = stage_boundaries(model)
        if len(ends) != modules - 1:
            raise ConfigError(f"{model.name} has {len(ends) + 1} stages; a split by stages gives K = {len(ends) + 1}")
    elif rule == "memory":
        if sample is None:
            raise ConfigError("a split by memory needs a sample batch to measure the units on")
        if method not in ("local", "sgr"):
            raise ConfigError(f"unknown method {method!r} for a split by memory; choose 'local' or 'sgr'")
        costs = unit_costs(model, sample)
        later = unit_costs(model, sample, input_gradient_graph=True) if method == "sgr" else None
        ends = balanced_boundaries(costs, modules, later)
    else:
        raise ConfigError(f"unknown split rule {rule!r}; choose 'stages' or 'memory'")
    model.boundaries[modules] = tuple(ends)
    return model.boundaries[modules]
