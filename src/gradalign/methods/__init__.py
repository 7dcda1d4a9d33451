"""One module per method and per baseline: losses, update rules, step functions (math only).

May import `models/`, `data/` and the root's foundations; a baseline never imports the method it is compared with.
"""
