"""ResNet-18 (He et al. 2016) from torchvision, the backbone of Zhang et al. (2020) Table 3 (ImageNet, 10 %
labels), with the `features` / `head` split the meta-gradient training reads (Figure 3's features, the
classifier f of `methods.metagrad`). torchvision's own initialisation; 11,689,512 parameters on 1,000 classes.
"""

from __future__ import annotations

from torch import nn

from gradalign.data.vision import import_torchvision


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000, in_channels: int = 3):
        super().__init__()
        net = import_torchvision().models.resnet18(num_classes=num_classes)
        if in_channels != 3:
            net.conv1 = nn.Conv2d(in_channels, 64, 7, 2, 3, bias=False)
        self.head = net.fc
        net.fc = nn.Identity()
        self.body = net  # ends in global average pooling and flatten: the 512-d features
        self.feature_dim = 512

    def features(self, x):
        return self.body(x)

    def forward(self, x):
        return self.head(self.body(x))


def parameter_count(num_classes: int = 1000, in_channels: int = 3) -> int:
    """Worked out from the layer list: the 7×7 stem and its BN; per stage two basic blocks of two 3×3
    convolutions + BN each (a 1×1 shortcut + BN where the stage downsamples); the linear head."""
    total, cin = 49 * in_channels * 64 + 2 * 64, 64
    for stage, c in enumerate((64, 128, 256, 512)):
        for block in range(2):
            total += 9 * cin * c + 2 * c + 9 * c * c + 2 * c
            if stage > 0 and block == 0:
                total += cin * c + 2 * c
            cin = c
    return total + 512 * num_classes + num_classes
