"""Semi-supervised splits on the protocol of Oliver et al. (2018) (book/appendix/protocols.md).

A seeded permutation of the training split gives the validation set (5,000 images for CIFAR, 7,326
for SVHN); from the rest, `n_labeled / classes` images per class are labeled; the unlabeled stream is
everything but the validation set, so it includes the labeled images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.errors import ConfigError


@dataclass(frozen=True)
class SSLSplit:
    labeled: torch.Tensor  # indices into the training split
    unlabeled: torch.Tensor
    validation: torch.Tensor


def ssl_split(
    labels: torch.Tensor, n_labeled: int, n_validation: int, seed: int, classes: int | None = None
) -> SSLSplit:
    """Class-balanced labeled indices, the unlabeled stream and a validation set; errors before any work."""
    labels = torch.as_tensor(labels)
    classes = classes or int(labels.max()) + 1
    n = len(labels)
    if n_labeled < classes or n_labeled % classes:
        raise ConfigError(f"n_labeled must be a positive multiple of the {classes} classes; got {n_labeled}")
    if not 0 <= n_validation < n:
        raise ConfigError(f"n_validation must be in [0, {n}); got {n_validation}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    validation, rest = order[:n_validation], order[n_validation:]
    per_class = n_labeled // classes
    picked = []
    for c in range(classes):
        members = rest[labels[rest] == c]
        if len(members) < per_class:
            raise ConfigError(
                f"class {c} has {len(members)} images outside the validation set; "
                f"{per_class} labeled per class requested (n_labeled = {n_labeled})"
            )
        picked.append(members[:per_class])
    return SSLSplit(torch.cat(picked).sort().values, rest.sort().values, validation.sort().values)
