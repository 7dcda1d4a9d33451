"""Analysis tools: closed forms, Hessian eigenvectors, alignment, dynamics.

May import `methods/`, `models/`, `data/` and the root's foundations; `methods/` never imports it.
"""
