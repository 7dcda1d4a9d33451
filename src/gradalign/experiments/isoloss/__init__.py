"""IsoLoss part (Halvagal, Laborieux & Zenke 2022): one module per notebook."""

from gradalign.experiments.isoloss import deep_siamese, eigenmodes, toy

EXPERIMENTS = eigenmodes.EXPERIMENTS + toy.EXPERIMENTS + deep_siamese.EXPERIMENTS
