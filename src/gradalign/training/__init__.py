"""Training loops shared by several methods: the loop, its time box, checkpoints, evaluation, protocols.

May import `methods/`, `analysis/`, `models/`, `data/`, `store/` and the root; never `experiments/`.
"""
