"""Where runs are trained: sweeps, pilots, benchmarks, the GPU window and its import.

May import `records/` and everything below it; never `book/`.
"""
