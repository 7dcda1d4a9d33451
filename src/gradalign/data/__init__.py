"""Data: seeded synthetic generators and real-image loaders (torchvision)."""
