"""Run an experiment, or load its stored record: preset -> config -> run -> record -> store.

Inside a command's time box (`timebox`) an experiment that does not honour it is refused before any compute.
A run stopped by the box (or by Ctrl-C) leaves its wall time in a ledger beside the run cache,
`<cache>/parts/<id>/<preset>-<config hash>.json`; the record's `provenance.wall_time_s` is the sum over every
part of its computation (and `provenance.parts` their number, when there were several), and the ledger is
deleted once the record is stored. A divergence (`divergence`) stores nothing.

At the `cpu`, `gpu` and `paper` presets every finished run the experiment reads is committed under
`<results>/runs/<kind>/<key>.json` (`run_unit.committed_runs`) and read from there first, so a record can be
assembled from runs made on several machines; `provenance.runs` lists them by the hardware each ran on.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path
from typing import Any

from gradalign.records.assess import assess
from gradalign.config import PRESET_ORDER_FOR_BOOK, check_preset
from gradalign.environment import provenance
from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.store.fingerprint import behaviour_fingerprint, changed_files, code_fingerprint
from gradalign.records.results import SCHEMA, ResultStore, part_of
from gradalign.store.run_unit import committed_runs
from gradalign.store.runcache import cache_root, force_recompute
from gradalign.runtime import check_device, pin_threads, seed_everything, select_device
from gradalign.training.timebox import TimeBoxSpent, check_honoured


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
    check_honoured(element_id)  # inside a time box: the experiment must be able to stop by it
    dev = select_device(device if exp.uses_accelerator else "cpu")  # provenance names where it ran
    pin_threads()
    seed_everything(cfg.seed)
    ledger = PartsLedger(element_id, preset, digest)
    if force:
        ledger.clear()  # --force recomputes from scratch: earlier parts do not count
    start = time.perf_counter()
    try:
        with (
            force_recompute() if force else contextlib.nullcontext(),
            committed_runs(store.root / "runs", write=preset in COMMITTED_PRESETS and _rank_zero()) as committed,
        ):
            result = exp.run(cfg, dev)
    except (TimeBoxSpent, KeyboardInterrupt):  # resumable: the next command goes on from the checkpoints
        ledger.add(time.perf_counter() - start)
        raise
    earlier_seconds, earlier_parts = ledger.read()
    wall = time.perf_counter() - start + earlier_seconds
    record = {
        "schema": SCHEMA,
        "id": element_id,
        "part": part_of(element_id),
        "preset": preset,
        "config": cfg.to_dict(),
        "config_hash": digest,
        "experiment_version": exp.version,
        **result,
        "provenance": {
            **provenance(dev, [cfg.seed], wall),
            **({"parts": earlier_parts + 1} if earlier_parts else {}),
            "code": code_fingerprint(exp.run.__module__),
            "behaviour": behaviour_fingerprint(exp.run.__module__),
            **({"runs": runs_by_hardware(committed.read)} if committed.read else {}),
        },
    }
    assess(record)  # evidence, claims, preconditions and verdict under the current rules
    if _rank_zero():  # under torchrun every rank computes; rank 0 stores
        store.save(record)
        ledger.clear()
    return record


COMMITTED_PRESETS = ("cpu", "gpu", "paper")
"""Presets whose finished runs are committed under `<results>/runs/` (`run_unit.committed_runs`)."""


def runs_by_hardware(read: dict[tuple[str, str], dict]) -> dict[str, list[str]]:
    """The runs a record was assembled from (`kind/key`), grouped by the hardware each ran on."""
    out: dict[str, list[str]] = {}
    for (kind, key), made in read.items():
        out.setdefault(str(made.get("hardware", "unknown")), []).append(f"{kind}/{key}")
    return out


def _rank_zero() -> bool:
    return os.environ.get("RANK", "").strip() in ("", "0")


class PartsLedger:
    """The wall time of the parts of a record's computation that a time box (or Ctrl-C) ended, so that the
    record, computed at last, carries the time of all of them."""

    def __init__(self, element_id: str, preset: str, digest: str):
        try:
            self.path = cache_root() / "parts" / element_id / f"{preset}-{digest}.json"
        except ConfigError:  # no usable cache (the runs that need one say so): no ledger either
            self.path = None

    def read(self) -> tuple[float, int]:
        """(seconds, parts) of the earlier parts; (0, 0) when there are none or the ledger is unreadable."""
        from gradalign.store.atomic import read_json_strict

        if self.path is None or not self.path.exists():
            return 0.0, 0
        try:
            value = read_json_strict(self.path)
            seconds, parts = value["seconds"], value["parts"]
            ok = isinstance(seconds, (int, float)) and isinstance(parts, int) and seconds >= 0 and parts >= 1
        except Exception:  # noqa: BLE001 (any damage: the ledger is a convenience, never a reason to fail)
            ok = False
        if not ok:
            warnings.warn(f"ignoring the damaged wall-time ledger {self.path}", stacklevel=2)
            return 0.0, 0
        return float(seconds), parts

    def add(self, seconds: float) -> None:
        if self.path is None or not _rank_zero():
            return
        from gradalign.store.atomic import write_json_atomically

        earlier, parts = self.read()
        try:
            write_json_atomically(self.path, {"seconds": round(earlier + seconds, 3), "parts": parts + 1})
        except Exception as err:  # noqa: BLE001 (never hide the stop that brought us here)
            warnings.warn(f"could not keep the wall time of this part in {self.path}: {err}", stacklevel=2)

    def clear(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                Path(self.path).unlink(missing_ok=True)


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
