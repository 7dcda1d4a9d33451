"""Guarded torchvision import.

The torchvision 0.28.0 wheel on PyPI is a CUDA build. On a CPU-only torch its import fails because
its meta kernels refer to the operators `torchvision::nms` and `torchvision::qnms`, which its C++
extension would normally define. If (and only if) that happens, we define the two schemas and import
again: transforms, datasets and models then work; the C++ ops themselves (nms, image io) do not.
Where torchvision loads normally, nothing is done.
"""

from __future__ import annotations

import sys

_schemas = None  # keeps the torch.library.Library alive


def import_torchvision():
    global _schemas
    try:
        import torchvision
    except RuntimeError as err:
        if "torchvision::" not in str(err):
            raise
        import torch

        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        _schemas = torch.library.Library("torchvision", "DEF")
        _schemas.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _schemas.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import torchvision
    return torchvision
