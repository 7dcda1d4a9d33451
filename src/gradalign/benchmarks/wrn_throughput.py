"""Training throughput of WRN-28-2 (the network of LGA's §4 benchmark): the fast path against a plain fp32 eager
loop fed by a CPU data loader.

Every variant trains the same network with the same step: cross entropy on a batch of 32 x 32 RGB images, Adam
(`params.adam`, lr 3e-3), after the standard augmentation (zero-pad 4, random 32 x 32 crop, horizontal flip) and
per-channel normalisation.
- `eager` (the reference): uint8 images in host memory; a `torch.utils.data.DataLoader` with `workers` worker
  processes (pinned memory on CUDA) augments and normalises each image on the CPU; every batch is copied to the
  device; fp32, NCHW, no compile. This is the loop a plain PyTorch script writes.
- `device_data`: the images resident on the device as uint8, each batch indexed, augmented (`data.crop_flip`) and
  normalised there, one seeded generator; otherwise as `eager`.
- `bf16_channels_last`: `device_data` plus bf16 autocast and channels-last (`training.fast.ON_CUDA`, the default of
  runs on a GPU).
- `compiled`: that plus `torch.compile` (the whole fast path). Compilation happens in the warm-up steps, whose
  time is reported apart (`compile_seconds`); the throughput is that of the compiled steps after it.
`fast_over_eager` is the fastest of the last three over `eager` (`fastest` names it): the fast path uses a switch
where it pays on the device measured. Images per second: `batch * steps / seconds`, the median of `repeats`
timings of `steps` steps each, the variants interleaved within each repeat so that machine load hits them alike,
after `warmup` steps of each. The images are random uint8 (throughput does not depend on content, and no data set
is needed).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from gradalign.benchmarks.timing import timed
from gradalign.data.augment import normalise
from gradalign.data.crop_flip import crop_flip
from gradalign.models.wrn import WideResNet
from gradalign.params import adam
from gradalign.training.fast import ON_CUDA, REFERENCE, FastPath, autocast, prepare_model

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)  # CIFAR-10's, rounded; any fixed values do here
PAD, LR = 4, 3e-3


class CropFlipImages(torch.utils.data.Dataset):
    """uint8 (N, 3, H, W) images, augmented one at a time on the CPU as a data-loader worker does."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        x = self.images[i].float().div(255)
        h, w = x.shape[1:]
        x = F.pad(x, (PAD, PAD, PAD, PAD))
        dy, dx = torch.randint(0, 2 * PAD + 1, (2,)).tolist()
        x = x[:, dy : dy + h, dx : dx + w]
        if torch.rand(()) < 0.5:
            x = x.flip(-1)
        return normalise(x[None], MEAN, STD)[0], self.labels[i]


def _forever(loader):
    while True:
        yield from loader


class _Variant:
    """One way of training: its model, optimizer and batch source; `steps(k)` runs k training steps."""

    def __init__(self, fast: FastPath, device: torch.device, images, labels, batch: int, workers: int, seed: int):
        torch.manual_seed(seed)
        self.fast, self.device = fast or REFERENCE, device
        self.model = prepare_model(WideResNet(10, 3).to(device), self.fast).train()
        self.optimizer = adam(self.model.parameters(), LR)
        if fast is None:  # the eager reference with its CPU data loader
            loader = torch.utils.data.DataLoader(
                CropFlipImages(images, labels),
                batch_size=batch,
                shuffle=True,
                drop_last=True,
                num_workers=workers,
                pin_memory=device.type == "cuda",
                persistent_workers=workers > 0,
                generator=torch.Generator().manual_seed(seed),
            )
            self.batches = _forever(loader)
        else:
            self.images, self.labels = images.to(device), labels.to(device)
            self.generator = torch.Generator(device=device).manual_seed(seed)
            self.batch = batch
            self.batches = None

    def _next(self):
        if self.batches is not None:
            x, y = next(self.batches)
            return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        i = torch.randint(0, len(self.images), (self.batch,), generator=self.generator, device=self.device)
        x = crop_flip(self.images[i].float().div_(255), PAD, True, self.generator)
        return normalise(x, MEAN, STD), self.labels[i]

    def steps(self, k: int) -> None:
        for _ in range(k):
            x, y = self._next()
            with autocast(self.fast, self.device):
                loss = F.cross_entropy(self.model(x), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()


def measure_wrn_throughput(
    device="cpu",
    batch: int = 128,
    steps: int = 10,
    warmup: int = 3,
    repeats: int = 3,
    n_images: int = 5000,
    image: int = 32,
    workers: int = 2,
    compile_model: bool = True,
    seed: int = 0,
) -> dict:
    """Images per second of each variant (module docstring) and their ratios to `eager`."""
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n_images, 3, image, image), dtype=torch.uint8, generator=generator)
    labels = torch.randint(0, 10, (n_images,), generator=generator)
    fast = {
        "eager": None,
        "device_data": REFERENCE,
        "bf16_channels_last": ON_CUDA,
        **({"compiled": FastPath(bf16=True, channels_last=True, compile=True)} if compile_model else {}),
    }
    variants, warmup_seconds = {}, {}
    for name, path in fast.items():
        variants[name] = _Variant(path, device, images, labels, batch, workers, seed)
        begun = time.perf_counter()
        timed(lambda v=variants[name]: v.steps(warmup), device)
        warmup_seconds[name] = time.perf_counter() - begun
    seconds = {name: [] for name in variants}
    for _ in range(repeats):
        for name, variant in variants.items():
            seconds[name].append(timed(lambda v=variant: v.steps(steps), device))
    rate = {name: batch * steps / statistics.median(s) for name, s in seconds.items()}
    out = {
        "images_per_second": {name: round(r, 2) for name, r in rate.items()},
        "device_data_over_eager": rate["device_data"] / rate["eager"],
        "bf16_channels_last_over_eager": rate["bf16_channels_last"] / rate["eager"],
        "warmup_seconds": {name: round(s, 3) for name, s in warmup_seconds.items()},
        "sizes": {
            "batch": batch,
            "steps": steps,
            "warmup": warmup,
            "repeats": repeats,
            "image": image,
            "workers": workers,
            "n_images": n_images,
        },
    }
    if compile_model:
        out["compiled_over_eager"] = rate["compiled"] / rate["eager"]
        out["compiled_over_uncompiled"] = rate["compiled"] / rate["bf16_channels_last"]
        out["compile_seconds"] = round(warmup_seconds["compiled"] - warmup_seconds["bf16_channels_last"], 3)
    fastest = max((name for name in rate if name != "eager"), key=rate.__getitem__)
    out["fastest"] = fastest  # the fast path is its switches where they pay: the best variant on this device
    out["fast_over_eager"] = rate[fastest] / rate["eager"]
    return out
