"""LGA part (Jackson & Schulman 2019): one module per notebook."""

from gradalign.experiments.lga import algorithm1, linear, shells, shells_figure, ssl_benchmark, ssl_tuning

EXPERIMENTS = (
    algorithm1.EXPERIMENTS
    + linear.EXPERIMENTS
    + shells_figure.EXPERIMENTS
    + shells.EXPERIMENTS
    + ssl_benchmark.EXPERIMENTS
    + ssl_tuning.EXPERIMENTS
)
