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


def native_bf16_cpu() -> bool:
    """Whether this CPU runs bf16 natively (oneDNN's own test)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def slow_bf16(fast: FastPath, device: torch.device | str) -> str | None:
    """Why `fast`'s bf16 autocast will be slow on `device`, in a line, or None. On a CPU without native bf16 (oneDNN
    needs AVX512-BF16 or AMX for it) oneDNN emulates bf16: measured on an AVX2 EPYC, 2026-11-28, a `lga.tune` LGA step
    took 2.1 s under bf16 autocast against 0.37 s in fp32, and about 0.1 s on the CPU that trained the committed runs.
    The path stays what the run's key names (fp32 would be another run); the line says what it costs here."""
    if not fast.bf16 or torch.device(device).type != "cpu" or native_bf16_cpu():
        return None
    return (
        "bf16 autocast on a CPU without native bf16 (no AVX512-BF16 or AMX): oneDNN emulates it, several times "
        "slower than fp32 (a LGA step: 2.1 s against 0.37 s on an AVX2 EPYC); a GPU or a CPU with native bf16 trains "
        "these runs far faster"
    )


def autocast(fast: FastPath, device: torch.device | str) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device`'s kind when `fast.bf16`; otherwise a context that does nothing. Warns once per
    process where bf16 is emulated (`slow_bf16`)."""
    if not fast.bf16:
        return contextlib.nullcontext()
    why = slow_bf16(fast, device)
    if why:
        import warnings

        warnings.warn(why, RuntimeWarning, stacklevel=2)
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
