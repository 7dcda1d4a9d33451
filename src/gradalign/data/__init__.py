"""Data: seeded synthetic generators and real-image loaders (torchvision, guarded in `vision`).

Imports only the root's foundations and `store/`; every other folder may import it.
"""
