"""IsoLoss part (Halvagal, Laborieux & Zenke 2022): one module per notebook (the toy page's simulation, `toy`, runs
over its initialisations in `toy_seeds`)."""

from gradalign.experiments.isoloss import deep_siamese, eigenmodes, toy_seeds

EXPERIMENTS = eigenmodes.EXPERIMENTS + toy_seeds.EXPERIMENTS + deep_siamese.EXPERIMENTS
