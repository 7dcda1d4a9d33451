"""The committed runs of a stored record: what a precondition reads when the record keeps only summaries.

A record keeps per-arm summaries (mean, std, n) and, for some experiments, the first seed's curves. Rules version 4
asks for every run: the worst run's fit to its labels, every seed's finished learning. Those live in the run
entries under `results/runs/` (`run_unit.read_entry`), which every `cpu`/`gpu`/`paper` record's runs are committed
as. `entries(record)` reads them, and never trains: a record whose config no longer resolves to its own hash, or an
element without units, gives [] (the precondition then says what is not recorded).
"""

from __future__ import annotations


def entries(record: dict, overrides: dict | None = None) -> list[tuple[object, dict | None]]:
    """(unit, committed entry or None) for every unit of the record's experiment at its preset and config, with
    `overrides` (dotted names, e.g. {"protocol.steps": 3000}) applied on top: the same runs at another budget."""
    from gradalign.dotted import dotted
    from gradalign.errors import ConfigError
    from gradalign.experiments import get
    from gradalign.experiments.units import UNITS, units_of
    from gradalign.run_unit import read_entry
    from gradalign.store_root import results_root

    element_id = record.get("id")
    if element_id not in UNITS or "preset" not in record or "config" not in record:
        return []
    exp = get(element_id)
    cfg = None
    for given in ({}, dotted(record["config"])):  # the preset as it stands, else the record's whole config
        try:
            candidate = exp.resolve(record["preset"], given)
        except ConfigError:  # a field the experiment does not use at this config is refused as an override
            continue
        if candidate.digest(exp.version) == record.get("config_hash"):
            cfg, base = candidate, given
            break
    if cfg is None:
        return []
    if overrides:
        try:
            cfg = exp.resolve(record["preset"], {**base, **overrides})
        except ConfigError:
            return []
    folder = results_root() / "runs"
    return [(unit, read_entry(folder, unit)) for unit in units_of(element_id, cfg)]
