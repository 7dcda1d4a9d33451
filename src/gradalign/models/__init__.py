"""Network architectures (backbones) for the deep experiments."""
