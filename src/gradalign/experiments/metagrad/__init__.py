"""Meta-gradient part (Zhang et al. 2020): the experiments of each module, in the order of the book's pages."""

from gradalign.experiments.metagrad import algorithm1, algorithm2, backbones, benchmark, theorems

EXPERIMENTS = (
    algorithm1.EXPERIMENTS
    + theorems.EXPERIMENTS
    + algorithm2.EXPERIMENTS
    + benchmark.EXPERIMENTS
    + backbones.EXPERIMENTS
)
