"""What the local heads weigh in a local step's activation memory (SGR part, `sgr.mem`): the peak of a local step
with each module's head share measured apart (`step_memory_with_head_share`), and a lighter head, labelled as a
variant (`pooled_belilovsky_head`: Belilovsky et al.'s head after an average pool, our choice)."""

from __future__ import annotations

import torch

from gradalign.models.local_heads import pooled_belilovsky_head  # re-exported: sgr.mem measures it

__all__ = ["pooled_belilovsky_head", "step_memory_with_head_share"]


def step_memory_with_head_share(
    model: torch.nn.Module,
    modules: int,
    x: torch.Tensor,
    y: torch.Tensor,
    head: str,
    method: str,
    heads: list[torch.nn.Module] | None = None,
) -> dict:
    """`analysis.activation_memory.step_activation_memory`'s count (the same steps, the same peak), and per module
    the share of its local head: the bytes the head and its loss save, with SGR (Eq. 5, modules k ≥ 2) also the
    graph of their gradient at the head's input (`create_graph=True`), measured alone on the module's output. The
    head's input is the module's output, which the module saves too: it counts as the module's; anything else the
    head's measurement saves counts as the head's. The last module's head is the network's own classifier, in global
    BP's count too: its share is 0. `heads`: K − 1 local heads in place of `head`'s (the variant). "Without heads":
    the max over modules of module minus head share."""
    from torch.nn import functional as F

    from gradalign.analysis.activation_memory import local_step_plan, measure_saved, run_local_step

    _, planned = local_step_plan(model, modules, head)
    heads = planned if heads is None else [*heads, model.head]
    if len(heads) != modules:
        raise ValueError(f"{modules} modules need {modules - 1} local heads, got {len(heads) - 1}")
    per_module, head_share = [], []

    def run_module(fn, state):
        saved, (objective, out, delta) = measure_saved(fn, state)
        if delta is None and method == "sgr":  # δ of this module for the next one (outside the measured part)
            delta = torch.autograd.grad(objective, out, retain_graph=True)[0]
        out = out.detach()
        k = len(per_module)
        classifier = heads[k]

        def head_alone():
            z = out.detach().requires_grad_(True)
            loss = F.cross_entropy(classifier(z), y)
            if method == "sgr" and k > 0:  # the first module has no SGR term (Algorithm 1)
                torch.autograd.grad(loss, z, create_graph=True)
            return loss

        local = k < modules - 1
        state_of_head = [*classifier.parameters(), *classifier.buffers(), out]
        head_share.append(measure_saved(head_alone, state_of_head)[0] if local else 0)
        per_module.append(saved)
        return saved, out, None if delta is None else delta.detach()

    model.train()
    run_local_step(model, modules, x, y, head, method, run_module, heads)
    without = [a - b for a, b in zip(per_module, head_share)]
    return {
        "peak_bytes": max(per_module),
        "per_module_bytes": per_module,
        "head_bytes": head_share,
        "peak_without_heads_bytes": max(without),
    }
