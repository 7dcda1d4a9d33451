"""Network architectures (backbones) for the deep experiments.

May import `data/` and the root's foundations; never a method or a training loop.
"""
