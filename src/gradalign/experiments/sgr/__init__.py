"""SGR part (Yang et al. 2024): the experiments of each module, in the order of the book's pages."""

from gradalign.experiments.sgr import (
    attributes,
    bp_free,
    bp_free_conv,
    bp_free_figures,
    gradient_cost,
    imagenet,
    lambda_pilot,
    lambda_study,
    local_bp,
    memory,
    pooled_head,
    theory,
    two_layer,
    vgg_without_bn,
)

EXPERIMENTS = theory.EXPERIMENTS + two_layer.EXPERIMENTS + gradient_cost.EXPERIMENTS + lambda_pilot.EXPERIMENTS
EXPERIMENTS += lambda_study.EXPERIMENTS + local_bp.EXPERIMENTS + vgg_without_bn.EXPERIMENTS
EXPERIMENTS += (
    attributes.EXPERIMENTS
    + bp_free.EXPERIMENTS
    + bp_free_conv.EXPERIMENTS
    + bp_free_figures.EXPERIMENTS
    + memory.EXPERIMENTS
    + pooled_head.EXPERIMENTS
    + imagenet.EXPERIMENTS
)
