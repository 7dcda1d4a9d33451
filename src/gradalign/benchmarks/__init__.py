"""Speed and memory measurements (ratios from one run); `benchmarks/` at the project root runs them."""
