"""Cost of one LGA step against one Pseudo-Label step, and of the JVP w-gradient against its
double-backward reference (`gradalign.analysis.lga_cost`). Prints one JSON dict. The stored,
book-facing measurement is part of the `lga.alg1` record (`gradalign run lga.alg1`).

    python benchmarks/lga_step.py [--device cpu|cuda] [--threads N] [--repeats 30]
"""

from __future__ import annotations

import argparse
import json

import torch

from gradalign.benchmarks.lga_step import measure_lga_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--batch", type=int, default=50, help="labeled and unlabeled minibatch size each")
    parser.add_argument("--n-unlabeled", type=int, default=50_000)
    parser.add_argument("--image", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        json.dumps(
            measure_lga_cost(
                args.device, args.width, args.batch, args.n_unlabeled, args.image, args.warmup, args.repeats
            ),
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
