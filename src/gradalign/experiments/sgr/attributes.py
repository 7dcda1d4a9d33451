"""SGR part, Table 1 (notebook sgr/04): the attributes of the BP-free methods, declared once on the implemented
rules (`methods.bp_free.ATTRIBUTES`) and rendered from there, so that the table and the code cannot disagree.

The paper's text (§3.3) gives each row: FA replaces the transported weights by a random matrix but still chains
errors back layer by layer; DFA projects the output error straight to each layer (BP-free, but it waits for the
whole forward pass: update unlocking "partially"); PEPITA needs a second forward pass ("partially"); DRTP
projects the label, known before the forward pass; SGR's BP-free version trains every layer on its own fixed ETF
head. Two columns are also measured on our rules (`measured_attributes`): "weight transport free" (does a
hidden layer's update change when the weights of the layers above it are redrawn?) and "BP-free" (does it change
when everything owned by the layers between it and the output is redrawn?), on a small random network in
float64. Claim checked: the measured columns equal the paper's Table 1 for every rule we implement. "Update
unlocking" is about scheduling, not about what a rule reads, and stays declared only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu

NOTEBOOK = "notebooks/sgr/04_bp_free.ipynb"
MEASURED_RULES = ("global_bp", "fa", "dfa", "pepita", "drtp")


@dataclass(frozen=True)
class AttributesConfig(Config):
    hidden: tuple[int, ...] = (7, 6, 5)  # hidden widths of the probe network (>= 2 blocks for "BP-free")
    in_features: int = 8
    classes: int = 4
    batch: int = 10
    draws: int = 3  # probe networks; every draw must agree

    def validate(self) -> None:
        super().validate()
        require(self, "hidden", len(self.hidden) >= 2 and min(self.hidden) >= 1, "must be >= 2 widths >= 1")
        for name in ("in_features", "classes", "batch", "draws"):
            require(self, name, getattr(self, name) >= 1, "must be >= 1")


def measure(cfg: AttributesConfig) -> dict[str, dict[str, str]]:
    """{rule: {attribute: "yes"/"no"}}; an attribute is "no" if any draw shows the dependence."""
    from gradalign.methods.bp_free import RULES, make_feedback, measured_attributes
    from gradalign.models.bp_free_net import BPFreeNet

    out: dict[str, dict[str, str]] = {}
    for draw in range(cfg.draws):
        g = torch.Generator().manual_seed(cfg.seed + draw)
        torch.manual_seed(cfg.seed + draw)
        net = BPFreeNet(cfg.in_features, list(cfg.hidden), cfg.classes).double()
        x = torch.randn(cfg.batch, cfg.in_features, generator=g, dtype=torch.float64)
        y = torch.randint(0, cfg.classes, (cfg.batch,), generator=g)
        for name in MEASURED_RULES:
            fb = make_feedback(name, net, cfg.classes, g).double()
            for attr, value in measured_attributes(RULES[name], net, fb, x, y, g).items():
                seen = out.setdefault(name, {}).get(attr, "yes")
                out[name][attr] = "no" if "no" in (seen, value) else "yes"
    return out


def table1_checks(declared: dict[str, dict[str, str]], measured: dict[str, dict[str, str]]) -> dict:
    """`declared[rule][attribute]` (the paper's Table 1) against `measured[rule][attribute]`, per attribute."""
    checks = {}
    for attr, words in (("weight_transport_free", "weight transport free"), ("bp_free", "BP-free")):
        pairs = {r: {"table": declared[r][attr], "measured": m[attr]} for r, m in measured.items()}
        checks[f"{attr}_as_in_table1"] = check(
            all(p["table"] == p["measured"] for p in pairs.values()),
            pairs,
            f"for every implemented rule: measured '{words}' == Table 1's",
            f"Table 1's '{words}' column describes the rules as their code computes them",
        )
    return checks


def table1(cfg: AttributesConfig, device) -> dict:
    from gradalign.methods.bp_free import ATTRIBUTES, attributes_table

    declared = {name: vars(a) for name, a in ATTRIBUTES.items()}
    measured = measure(cfg)
    metrics = {"table": attributes_table(), "measured": measured}
    return outcome(table1_checks(declared, measured), metrics)


EXPERIMENTS = [
    Experiment(
        "sgr.tab1",
        table1,
        AttributesConfig,
        same_as_cpu({}, {"draws": 1}),
        1,
        NOTEBOOK,
        choices={
            "probe": "3 random float64 networks 8 -> 7 -> 6 -> 5 -> 4, batch 10; an attribute is 'no' if any "
            "draw shows the dependence"
        },
    ),
]
