"""Training runs of the BP-free baselines of Table 4 (FA, DFA, DRTP, PEPITA; `methods.bp_free`) on the one loop.

The network (`models.bp_free_net`) has the hidden blocks of the BP-free PlainMLP that SGR trains (the same depth
and width; `network` "conv": the conv blocks of `models.plain_conv`, Table 4's conv reading) and a trained linear
output layer, which these rules need. Everything else is the local runs'
(`training.local`): the data on the device, the per-epoch order, crop + flip, the per-epoch evaluation and
history, checkpoints and the run cache, here under kind `sgr.bpfree`. One SGD optimizer (momentum 0.9, weight
decay and cosine as the protocol says) at the protocol's learning rate; the experiment sets it (PEPITA's own
runs used 0.01). The feedback matrices are drawn from the run's seed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from gradalign.config import Settings, require
from gradalign.store.run_unit import Unit, without_defaults
from gradalign.training.local import LocalRun, SGRProtocol, local_data, train_local

RUN_KIND = "sgr.bpfree"
RUN_VERSION = 1
BASELINE_TITLES = {"fa": "FA", "dfa": "DFA", "drtp": "DRTP", "pepita": "PEPITA"}


@dataclass(frozen=True)
class BPFreeRunSpec(Settings):
    """Everything one baseline run depends on (its run-cache key)."""

    method: str = "fa"
    protocol: SGRProtocol = SGRProtocol()
    dataset: str = "fashion_mnist"
    network: str = "mlp"  # the blocks: "mlp" (Linear, models.plain_mlp) or "conv" (Conv2d 3 x 3, models.plain_conv)
    depth: int = 4  # hidden blocks (SGR's PlainMLP depth)
    width: float = 1.0  # hidden units: models.plain_mlp.hidden_width(width)
    activation: str = "relu"  # or "tanh" (DRTP's own networks)
    n_train: int = 0
    n_test: int = 0
    seed: int = 0
    data_seed: int = 0  # the train/test subsets (training.local.local_data)
    validation: int = 0  # > 0: evaluate on that many held-out training images (training.local.local_data)

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        require(self, "method", self.method in BASELINE_TITLES, f"must be one of {tuple(BASELINE_TITLES)}")
        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        from gradalign.models.plain_conv import MAX_DEPTH

        require(self, "network", self.network in ("mlp", "conv"), "must be 'mlp' or 'conv'")
        require(self, "depth", self.depth >= 1, "must be >= 1")
        if self.network == "conv":
            require(self, "depth", self.depth <= MAX_DEPTH, f"must be <= {MAX_DEPTH} for the conv PlainNet")
        require(self, "width", self.width > 0, "must be > 0")
        require(self, "activation", self.activation in ("relu", "tanh"), "must be 'relu' or 'tanh'")
        require(self, "n_train", self.n_train == 0 or self.n_train >= self.protocol.batch_size, "must be 0 or >= batch")
        require(self, "n_test", self.n_test >= 0, "must be >= 0")
        require(self, "validation", self.validation >= 0, "must be >= 0")

    @property
    def title(self) -> str:
        return f"{BASELINE_TITLES[self.method]} {self.network}{self.depth} seed {self.seed}"

    def to_dict(self) -> dict:
        """The run-cache key's fields; `data_seed`, `validation`, `network` only when not their defaults (older runs
        keep their keys)."""
        return without_defaults(self, super().to_dict(), ("data_seed", "validation", "network"))


class BPFreeRun(LocalRun):
    """A LocalRun whose model is a BPFreeNet trained by one rule: the batches, schedule and evaluation are the
    local runs'; the network, the feedback and the step are the rule's."""

    def __init__(self, spec: BPFreeRunSpec, data, device):
        from gradalign.data.image_sets import image_set_info
        from gradalign.methods.bp_free import BP_FREE_METHODS, make_feedback
        from gradalign.models.bp_free_net import BPFreeNet, ConvBPFreeNet
        from gradalign.models.plain_mlp import hidden_width

        info = image_set_info(spec.dataset)
        self.spec, self.data, self.device, p = spec, data, torch.device(device), spec.protocol
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            if spec.network == "conv":
                size, classes = info.image_size, info.num_classes
                net = ConvBPFreeNet(info.channels, size, spec.depth, classes, spec.width, activation=spec.activation)
            else:
                hidden = [hidden_width(spec.width)] * spec.depth
                net = BPFreeNet(
                    info.channels * info.image_size**2, hidden, info.num_classes, activation=spec.activation
                )
            generator = torch.Generator().manual_seed(spec.seed)
            self.feedback = make_feedback(spec.method, net, info.num_classes, generator).to(self.device)
        self.model = net.to(self.device)
        self.optimizer = torch.optim.SGD(net.parameters(), lr=p.lr, momentum=p.momentum, weight_decay=p.weight_decay)
        self.optimizers = [self.optimizer]  # LocalRun.step sets the scheduled lr on each
        self.local_heads = torch.nn.ModuleList()
        self.step_fn = BP_FREE_METHODS[spec.method]
        self.measure_input_effect = False
        self.start_schedule()

    def take_step(self, x: torch.Tensor, y: torch.Tensor) -> dict:
        return self.step_fn(self.model, self.feedback, self.optimizer, x, y)


def bp_free_unit(spec: BPFreeRunSpec, device=None) -> Unit:
    """One baseline run as a run-cache unit (kind `sgr.bpfree`, keyed by the spec alone). `device`: where it
    trains; None: chosen where it runs."""
    return Unit(spec.title, RUN_KIND, spec.to_dict(), RUN_VERSION, functools.partial(_train_unit, spec, device))


def _train_unit(spec: BPFreeRunSpec, device, checkpoint) -> dict:
    from gradalign.runtime import select_device

    device = select_device() if device is None else device
    data = local_data(spec.dataset, spec.n_train, spec.n_test, device, spec.data_seed, spec.validation)
    return train_local(spec, device, checkpoint, data=data, make_run=BPFreeRun, version=RUN_VERSION)


def bp_free_run(spec: BPFreeRunSpec, device="cpu") -> dict:
    """One baseline run, from the run cache when it is there."""
    return bp_free_unit(spec, device).run()
