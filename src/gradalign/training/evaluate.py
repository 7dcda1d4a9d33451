"""Evaluation, written once: classification error and loss, frozen features, a linear probe."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def classification_metrics(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000
) -> tuple[float, float]:
    """(error %, mean cross entropy) in eval mode, in chunks of `batch`; the loss summed in float64."""
    was_training = model.training
    model.eval()
    wrong = torch.zeros((), device=x.device)
    loss = torch.zeros((), device=x.device, dtype=torch.float64)
    for start in range(0, len(x), batch):
        logits = model(x[start : start + batch]).float()
        target = y[start : start + batch]
        wrong += (logits.argmax(-1) != target).sum()
        loss += F.cross_entropy(logits, target, reduction="sum").double()
    model.train(was_training)
    return 100.0 * float(wrong) / len(x), float(loss) / len(x)


@torch.no_grad()
def extract_features(
    backbone: nn.Module, images: torch.Tensor, prepare, batch_size: int = 1024, bf16: bool = False
) -> torch.Tensor:
    """Float32 features of `prepare(chunk)` for each chunk of images, backbone in eval mode (BN running stats)."""
    was_training = backbone.training
    backbone.eval()
    out = []
    for chunk in images.split(batch_size):
        x = prepare(chunk)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            out.append(backbone(x).float())
    backbone.train(was_training)
    return torch.cat(out)


@torch.no_grad()
def accuracy(classifier: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of `features` whose argmax class under `classifier` equals the label."""
    return float(classifier(features).argmax(1).eq(labels).double().mean())


def linear_probe(
    train_features, train_labels, test_features, test_labels, l2: float = 1e-4, iterations: int = 300
) -> float:
    """Test accuracy of a multinomial logistic regression on frozen features.

    Features standardised with the training mean and std; weights from zero; full-batch L-BFGS
    (strong Wolfe line search) on cross-entropy + l2/2 ||W||^2: convex, so no learning rate to tune, and
    deterministic. Labels -1 (unlabelled images) are left out.
    """
    train_features, train_labels = train_features[train_labels >= 0], train_labels[train_labels >= 0]
    mu, sd = train_features.mean(0), train_features.std(0).clamp(min=1e-6)
    a, b = (train_features - mu) / sd, (test_features - mu) / sd
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    W = torch.zeros(a.shape[1], classes, device=a.device, requires_grad=True)
    bias = torch.zeros(classes, device=a.device, requires_grad=True)
    opt = torch.optim.LBFGS(
        [W, bias],
        max_iter=iterations,
        history_size=20,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
    )

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(a @ W + bias, train_labels) + 0.5 * l2 * (W * W).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return float((b @ W + bias).argmax(1).eq(test_labels).double().mean())
