"""gradalign: gradients used as learning signals.

The library behind the executable book that reproduces Label Gradient Alignment, Semi-Supervised
Learning with Meta-Gradient, the IsoLoss analysis of BYOL/SimSiam and Successive Gradient
Reconciliation. Importing it is cheap: no torch, papermill or jupyter-book at import time.
"""

__version__ = "0.1.0"
