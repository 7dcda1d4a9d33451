"""Run an experiment, or load its stored record: preset -> config -> run -> record -> store."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from gradalign.config import PRESET_ORDER_FOR_BOOK, check_preset
from gradalign.environment import provenance
from gradalign.experiments import get
from gradalign.fingerprint import changed_files, code_fingerprint
from gradalign.results import SCHEMA, ResultStore, part_of
from gradalign.runcache import force_recompute
from gradalign.runtime import check_device, pin_threads, seed_everything, select_device


def run(
    element_id: str,
    preset: str,
    overrides: dict[str, Any] | None = None,
    *,
    force: bool = False,
    store: ResultStore | None = None,
    device: str = "auto",
) -> dict:
    """The record of `element_id` at `preset`: loaded when stored with the same key, else computed and saved.

    `force`: recompute the record and every cached sub-run it reads (the run cache), from scratch.
    """
    exp = get(element_id)
    cfg = exp.resolve(preset, overrides)  # validates before any compute
    check_device(device)
    store = store or ResultStore()
    digest = cfg.digest(exp.version)
    if not force:
        record = store.load(element_id, preset, digest, exp.version)
        if record is not None:
            return record
    dev = select_device(device if exp.uses_accelerator else "cpu")  # provenance names where it ran
    pin_threads()
    seed_everything(cfg.seed)
    start = time.perf_counter()
    with force_recompute() if force else contextlib.nullcontext():
        result = exp.run(cfg, dev)
    wall = time.perf_counter() - start
    record = {
        "schema": SCHEMA,
        "id": element_id,
        "part": part_of(element_id),
        "preset": preset,
        "config": cfg.to_dict(),
        "config_hash": digest,
        "experiment_version": exp.version,
        **result,
        "provenance": {**provenance(dev, [cfg.seed], wall), "code": code_fingerprint(exp.run.__module__)},
    }
    if os.environ.get("RANK", "").strip() in ("", "0"):  # under torchrun every rank computes; rank 0 stores
        store.save(record)
    return record


def stored_record(
    element_id: str, preset: str, overrides: dict[str, Any] | None = None, store: ResultStore | None = None
) -> dict | None:
    """The usable record of `element_id` at `preset` for the current config, or None."""
    exp = get(element_id)
    if preset not in exp.presets:
        return None
    cfg = exp.resolve(preset, overrides)
    return (store or ResultStore()).load(element_id, preset, cfg.digest(exp.version), exp.version)


def best_stored_preset(
    element_id: str, overrides: dict[str, Any] | None = None, store: ResultStore | None = None
) -> str | None:
    """The largest preset (paper > gpu > cpu) with a usable record for the current config."""
    for preset in PRESET_ORDER_FOR_BOOK:
        if stored_record(element_id, preset, overrides, store) is not None:
            return preset
    return None


def stale_files(record: dict) -> list[str] | None:
    """The library files the record's experiment runs that changed since the record was computed
    ([] when none did), or None when the record carries no code fingerprint."""
    stored = record["provenance"].get("code")
    if not isinstance(stored, dict):
        return None
    return changed_files(stored, code_fingerprint(get(record["id"]).run.__module__))


def element_status(element_id: str) -> str:
    """built / partial (the experiment is registered) or not yet built."""
    from gradalign.elements import element
    from gradalign.experiments import EXPERIMENTS

    element(element_id)
    experiment = EXPERIMENTS.get(element_id)
    return experiment.status if experiment else "not yet built"


def load_or_run(
    element_id: str,
    preset: str = "auto",
    overrides: dict[str, Any] | None = None,
    store: ResultStore | None = None,
    device: str = "auto",
) -> dict:
    """`auto`: the largest stored preset for this element, else run `cpu`. Other presets as named."""
    if check_preset(preset, allow_auto=True) == "auto":
        preset = best_stored_preset(element_id, overrides, store) or "cpu"
    return run(element_id, preset, overrides, store=store, device=device)
