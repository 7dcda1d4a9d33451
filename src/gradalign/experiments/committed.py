"""The committed runs of a stored record: what a precondition reads when the record keeps only summaries.

A record keeps per-arm summaries (mean, std, n) and, for some experiments, the first seed's curves. Rules version 4
asks for every run: the worst run's fit to its labels, every seed's finished learning. Those live in the run
entries under `results/runs/` (`run_unit.read_entry`), which every `cpu`/`gpu`/`paper` record's runs are committed
as. `entries(record)` reads them, and never trains: a record whose config no longer resolves to its own hash, or an
element without units, gives [] (the precondition then says what is not recorded).
"""

from __future__ import annotations


def resolved(record: dict, overrides: dict | None = None):
    """The config of a stored record's experiment at its preset (the one whose digest is the record's), with
    `overrides` (dotted names, e.g. {"protocol.steps": 3000}) applied on top; None when no config resolves to the
    record's own, or the overrides are refused."""
    from gradalign.config import dotted
    from gradalign.errors import ConfigError
    from gradalign.experiments import get

    if "preset" not in record or "config" not in record:
        return None
    exp = get(record["id"])
    try:
        unused = exp.unused(exp.resolve(record["preset"], {})) if exp.unused else {}
    except ConfigError:
        return None
    whole = {  # the record's config as overrides, less the fields the experiment refuses to be given
        k: v for k, v in dotted(record["config"]).items() if not any(k == n or k.startswith(n + ".") for n in unused)
    }
    for given in ({}, whole):  # the preset as it stands, else the record's whole config
        try:
            cfg = exp.resolve(record["preset"], given)
        except ConfigError:  # a field the experiment does not use at this config is refused as an override
            continue
        if cfg.digest(exp.version) == record.get("config_hash"):
            try:
                return exp.resolve(record["preset"], {**given, **overrides}) if overrides else cfg
            except ConfigError:
                return None
    return None


def units(record: dict, overrides: dict | None = None) -> list:
    """The units of the record's experiment at its preset and config, with `overrides` applied on top
    (`resolved`); [] for an element without units or a config that does not resolve. Nothing is read."""
    from gradalign.experiments.units import UNITS, units_of

    if record.get("id") not in UNITS:
        return []
    cfg = resolved(record, overrides)
    return [] if cfg is None else units_of(record["id"], cfg)


def entries(record: dict, overrides: dict | None = None) -> list[tuple[object, dict | None]]:
    """(unit, committed entry or None) for every unit of the record (`units`): the same runs at another budget,
    say, with `overrides`. Each entry is checked as it is read (its key, spec and digest)."""
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    found = units(record, overrides)
    folder = results_root() / "runs" if found else None
    return [(unit, read_entry(folder, unit)) for unit in found]
