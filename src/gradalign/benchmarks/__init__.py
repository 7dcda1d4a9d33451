"""Speed and memory measurements (ratios from one run); `benchmarks/` at the project root runs them.

May import `training/` and everything below it; `compute/bench.py` stores their records.
"""
