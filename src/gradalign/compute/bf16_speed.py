"""Whether the fast path's bf16 autocast runs natively on this CPU (`gradalign sweep` says so before it submits).

Kept apart from `training.fast`, whose definitions every training record's code fingerprint reads: a note on speed
changes no number, and a new definition there would ask every such record for a new smoke canary.
"""

from __future__ import annotations

import torch

from gradalign.training.fast import FastPath


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
