"""Minibatch index streams with a checkpointable state."""

from __future__ import annotations

import torch


class IndexStream:
    """Endless shuffled passes over range(n) from a seeded CPU generator; its state is checkpointable."""

    def __init__(self, n: int, batch: int, seed: int):
        self.n, self.batch = n, batch
        self.generator = torch.Generator().manual_seed(seed)
        self.order, self.position = torch.randperm(n, generator=self.generator), 0

    def next(self) -> torch.Tensor:
        out = []
        need = self.batch
        while need:
            if self.position == self.n:
                self.order, self.position = torch.randperm(self.n, generator=self.generator), 0
            take = min(need, self.n - self.position)
            out.append(self.order[self.position : self.position + take])
            self.position += take
            need -= take
        return torch.cat(out)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "order": self.order, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        # a checkpoint loads to the run's device; the stream's generator and order live on the CPU
        self.generator.set_state(state["generator"].cpu())
        self.order, self.position = state["order"].cpu(), state["position"]
