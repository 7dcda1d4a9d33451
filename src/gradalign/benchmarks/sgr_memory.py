"""Activation memory of one SGR step against one global-BP step on ResNet-32 (Yang et al. 2024, §4.2 and
Table 5's memory column): the bytes autograd saves for backward (`analysis.activation_memory`), at K = 16 and
K = 2 on the same model and batch; on CUDA also the peak of `torch.cuda.max_memory_allocated` during a real step.
"""

from __future__ import annotations

import torch


def measure_sgr_memory(device="cpu", batch: int = 128, size: int = 32, channels: int = 3, splits=(16, 2)) -> dict:
    from gradalign.analysis.activation_memory import cuda_step_peak_bytes, step_activation_memory
    from gradalign.models.resnet_cifar import resnet32

    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = resnet32(10, channels).to(device)
    x = torch.randn(batch, channels, size, size, generator=gen).to(device)
    y = torch.randint(10, (batch,), generator=gen).to(device)
    saved = {"global_bp": step_activation_memory(model, 1, x, y)["peak_bytes"]}
    for k in splits:
        saved[f"sgr_k{k}"] = step_activation_memory(model, k, x, y, method="sgr")["peak_bytes"]
    out = {
        "saved_bytes": saved,
        **{f"sgr_k{k}_over_global_bp": saved[f"sgr_k{k}"] / saved["global_bp"] for k in splits},
        "setting": {"model": "ResNet-32", "batch": batch, "input": [channels, size, size], "head": "belilovsky"},
        "memory_method": "bytes of the tensors saved for backward (saved_tensors_hooks), peak over the modules",
        "device": str(device),
    }
    if device.type == "cuda":
        peak = {"global_bp": cuda_step_peak_bytes(model, 1, x, y)}
        for k in splits:
            peak[f"sgr_k{k}"] = cuda_step_peak_bytes(model, k, x, y, method="sgr")
        out["cuda_peak_bytes"] = peak
        out.update({f"cuda_sgr_k{k}_over_global_bp": peak[f"sgr_k{k}"] / peak["global_bp"] for k in splits})
    return out
