"""InfoPro's local loss, softmax variant (Wang et al. 2021), as SGR's Table 6 compares with it.

Each local module k < K is trained on (InfoPro's `networks/resnet.py`, `train.py`)

    L_k = w_ce(k) · CE(head_k(x_k), y) + w_rec(k) · BCE(decoder_k(x_k), x̃_0),

where head_k is InfoPro's "conv + linear" classifier (`models.local_heads.infopro_head`), decoder_k its
reconstruction head (bilinear upsampling to the image size, conv → 12, BN, ReLU, conv, sigmoid) and
x̃_0 = x_0 · std + mean the de-normalised input image in [0, 1] (`_image_restore` in InfoPro's code); BCE
is `nn.BCELoss()`, the mean over every pixel. The last module is trained on the network's own classifier
alone. The weights move linearly over the K − 1 local modules (InfoPro's `ixx_r`, `ixy_r`):

    ratio(k) = k / (K − 2) (k = 0 … K − 2; 0 when K = 2),
    w_rec(k) = rec_first · (1 − ratio) + rec_last · ratio,   w_ce(k) likewise.

InfoPro's README gives (rec_first, ce_first, rec_last, ce_last) per K for ResNet-32 on CIFAR-10, tuned for
its contrastive variant (`--local_loss_mode contrast`); no values are published for the softmax variant.
Our choice: reuse them for the softmax variant (`RESNET32_WEIGHTS`), and for K = 3, which InfoPro does not
run on ResNet-32, take its K = 4 values (the nearest split of the same network).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from gradalign.models.local_heads import infopro_decoder, local_head

RESNET32_WEIGHTS: dict[int, tuple[float, float, float, float]] = {
    # K: (rec_first, ce_first, rec_last, ce_last), InfoPro's comand.sh for ResNet-32 on CIFAR-10
    2: (5.0, 1.0, 0.0, 0.0),
    3: (6.0, 0.0, 1.0, 2.0),  # our choice: InfoPro's K = 4 values (it does not run K = 3 on ResNet-32)
    4: (6.0, 0.0, 1.0, 2.0),
    8: (5.0, 0.0, 0.0, 2.0),
    16: (5.0, 0.05, 0.2, 0.5),
}


def infopro_weights(k: int, modules: int, weights: tuple[float, float, float, float]) -> tuple[float, float]:
    """(w_rec, w_ce) of local module k (0-based, k < K − 1) of K, interpolated as InfoPro does."""
    rec_first, ce_first, rec_last, ce_last = weights
    ratio = k / (modules - 2) if modules > 2 else 0.0
    return rec_first * (1 - ratio) + rec_last * ratio, ce_first * (1 - ratio) + ce_last * ratio


class InfoProHead(nn.Module):
    """A local module's InfoPro heads: the classifier (`forward` gives its logits) and the decoder, with the
    input normalisation (mean, std per channel) to de-normalise the image the decoder reconstructs."""

    def __init__(self, channels: int, classes: int, image_channels: int, image_size: int, mean, std):
        super().__init__()
        self.classifier = local_head("infopro", channels, classes)
        self.decoder = infopro_decoder(channels, image_channels, image_size)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(features)

    def restore(self, image: torch.Tensor) -> torch.Tensor:
        """The de-normalised image in [0, 1] (clamped: rounding may step a hair outside)."""
        return (image * self.std + self.mean).clamp(0.0, 1.0)

    def reconstruction_loss(self, features: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        """BCE (mean over all pixels) of the decoder's reconstruction against the de-normalised image."""
        return F.binary_cross_entropy(self.decoder(features, image.shape[-2:]), self.restore(image))

    def local_loss(
        self, features: torch.Tensor, image: torch.Tensor, labels: torch.Tensor, w_rec: float, w_ce: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(objective w_ce·CE + w_rec·BCE, CE, BCE) of one module's output `features` (N, C, h, w)."""
        ce = F.cross_entropy(self(features), labels)
        rec = self.reconstruction_loss(features, image)
        return w_ce * ce + w_rec * rec, ce, rec
