"""IsoLoss part, Table 1's trivial rows: what the runs' own linear probe reads from representations nobody trained.

The leading alternative explanation of Table 1 at a reduced scale (issue 47): the self-supervised features are no
better than raw pixels or an untrained network. Each row goes through the same probe as the runs
(`training.evaluate.linear_probe`, with the runs' L2 penalty and iterations; it standardises the features with the
training mean and std itself), fit on the same labelled training images and tested on the same test images
(`deep_siamese.pretraining_data`):

- `raw_pixels`: the pixels, normalised as the network's input is (the training set's channel mean and std), flat;
- `random_init`: the backbone every arm of a seed starts from (`training.siamese.SiameseRun`: the same network, width
  and seeded initialisation), its BatchNorm at its initial running statistics (mean 0, variance 1), in eval mode;
- `random_init_data_bn`: that backbone with BatchNorm at the data's statistics, accumulated over the training images
  in train mode, batch by batch (the runs' batch size, full batches) as a cumulative average, then in eval mode.

Each row is in percent, one value per seed of the runs. Raw pixels depend on no seed (the probe is deterministic):
their one accuracy stands for every seed, so Welch's t treats the row as a constant.
"""

from __future__ import annotations

import torch
from torch import nn

from gradalign.data.augment import SimCLRAugment, normalise
from gradalign.data.image_tensors import as_uint8_nchw, channel_stats, check_image_sets
from gradalign.training.evaluate import linear_probe
from gradalign.training.siamese import SiameseRun, SiameseSettings

ROWS = {
    "raw_pixels": "raw pixels",
    "random_init": "random VGG11, BN at its initial statistics",
    "random_init_data_bn": "random VGG11, BN at the data's statistics",
}
"""The trivial rows, in the order the page shows them, and their names in words."""


def trivial_rows(
    train_images, train_labels, test_images, test_labels, settings: list[SiameseSettings], device="cpu"
) -> dict[str, list[float]]:
    """{row: linear-probe test accuracy (%) per seed} for every row of `ROWS`; `settings`: one per seed, as the runs
    of that seed use them (width, projector, seed, probe L2 and iterations; the loss and the EMA play no part)."""
    device = torch.device(device)
    train_images, test_images = as_uint8_nchw(train_images), as_uint8_nchw(test_images)
    train_labels, test_labels = torch.as_tensor(train_labels).long(), torch.as_tensor(test_labels).long()
    check_image_sets(train_images, train_labels, test_images, test_labels)
    mean, std = channel_stats(train_images)
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    images, labels = train_images.to(device), train_labels.to(device)
    tests, test_labels = test_images.to(device), test_labels.to(device)
    labelled = labels >= 0

    def probe(train_features, test_features, s: SiameseSettings) -> float:
        return 100 * linear_probe(
            train_features, labels[labelled], test_features, test_labels, s.probe_l2, s.probe_iterations
        )

    def pixels(x: torch.Tensor) -> torch.Tensor:
        return normalise(x.float() / 255, mean, std).flatten(1)

    raw = probe(pixels(images[labelled]), pixels(tests), settings[0])
    rows: dict[str, list[float]] = {"raw_pixels": [raw] * len(settings), "random_init": [], "random_init_data_bn": []}
    for s in settings:
        augment = SimCLRAugment(mean, std, crop_scale=(s.crop_scale_min, 1.0))
        run = SiameseRun(s, images, labels, tests, test_labels, classes, augment, mean, std, device)
        rows["random_init"].append(probe(run.features(images[labelled]), run.features(tests), s))
        data_statistics(run.net.backbone, images, mean, std, s.batch_size)
        rows["random_init_data_bn"].append(probe(run.features(images[labelled]), run.features(tests), s))
    return rows


@torch.no_grad()
def data_statistics(backbone: nn.Module, images: torch.Tensor, mean, std, batch_size: int) -> None:
    """Set every BatchNorm of `backbone` to the statistics of `images` (uint8, normalised with `mean`, `std` as the
    network's input is): running statistics reset, then accumulated in train mode over full batches of
    `batch_size` with a cumulative average (momentum None), the backbone left in eval mode. No weight changes."""
    norms = [m for m in backbone.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    backbone.train()
    for start in range(0, len(images) - batch_size + 1, batch_size):
        backbone(normalise(images[start : start + batch_size].float() / 255, mean, std))
    backbone.eval()
