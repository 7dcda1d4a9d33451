"""The fast path of a training step (book/appendix/design.md, Performance): three switches on top of the fp32 eager
reference.

- `bf16`: the step runs under `torch.autocast(dtype=torch.bfloat16)`: matrix products and convolutions in
  bfloat16, softmax, losses and reductions in float32 (autocast's own op lists decide); parameters, optimizer
  state and the stored weights stay float32. Evaluation stays float32. VAT's power iteration (an input
  perturbation of norm ξ = 1e-6) switches autocast off for itself (`methods.consistency.vat_perturbation`).
- `channels_last`: the model's 4-D weights in NHWC order, the layout of cuDNN's tensor-core convolutions;
  a convolution with NHWC weights returns NHWC activations, so inputs need no conversion.
- `compile`: the model's forward through `torch.compile` (`nn.Module.compile`, which keeps the state-dict keys,
  so checkpoints are unchanged). Steps that differentiate with `torch.func` transforms do not take it (a
  method says so); whether it pays is measured by `gradalign bench wrn_throughput`, not assumed.

With every switch off nothing changes: the reference path is the code without this module, to the last bit.
The switches are a config field (`fast.bf16=true`, ...), in the record's hash and the run keys: never read from
the environment, so a record always names the path it ran.
Data resident on the device and augmentation there belong to the data sets (`data.ssl_data`, `data.crop_flip`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from gradalign.config import Settings


@dataclass(frozen=True)
class FastPath(Settings):
    bf16: bool = False
    channels_last: bool = False
    compile: bool = False

    @property
    def on(self) -> bool:
        return self.bf16 or self.channels_last or self.compile

    def text(self) -> str:
        on = [
            name
            for name, flag in (
                ("bf16 autocast", self.bf16),
                ("channels-last", self.channels_last),
                ("torch.compile", self.compile),
            )
            if flag
        ]
        return ", ".join(on) if on else "fp32 eager"


REFERENCE = FastPath()
"""Every switch off: the fp32 eager reference path."""
ON_CUDA = FastPath(bf16=True, channels_last=True)
"""What the `gpu` presets set (the config field `fast`, in the run keys when on). Compile stays off (our choice)
until `gradalign bench wrn_throughput` on a GPU shows that it pays for its compile time."""


def prepare_model(model: torch.nn.Module, fast: FastPath) -> torch.nn.Module:
    """The model in place, in NHWC order and compiled as `fast` says; returned for chaining."""
    if fast.channels_last:
        model.to(memory_format=torch.channels_last)
    if fast.compile:
        model.compile()
    return model


def autocast(fast: FastPath, device: torch.device | str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device`'s kind when `fast.bf16`; otherwise a context that does nothing."""
    if not fast.bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
