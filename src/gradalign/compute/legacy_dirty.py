"""The legacy run entries from dirty trees: which element reads each, and retraining them from committed code.

Before `gradalign run` refused a dirty tree (2026-11-27), some run entries were committed from uncommitted code; they
are listed in `tests/dirty_run_entries.txt` (the test there fails on a new one, and on a listed one that is clean).
Seeded CPU training is bit-identical at one thread, so a CPU entry trained again from committed code has the same
value (checked for every one so far) and only its provenance changes. A CUDA entry trained again on a CPU is a new
run on other hardware: its value moves a little, and the records reading it are assembled again.

An entry belongs to an element when it is one of the element's units at its `cpu` preset, or at half its budget
(`claim_budget.half_overrides`, which the claim-level budget check reads). Other readers exist (the book's supervised
reference, pilots at their own overrides), so an entry no element claims here is **not** thereby unread: this
module never deletes one that it does not retrain.

    python -m gradalign.compute.legacy_dirty                 # each element's legacy entries, by device, with hours
    python -m gradalign.compute.legacy_dirty lga.fig3 --train  # retrain its CPU entries here (one thread, fresh cache)
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

LIST = Path(__file__).resolve().parents[3] / "tests" / "dirty_run_entries.txt"


def listed(path: Path = LIST) -> set[str]:
    """The listed entries, as "kind/key"."""
    lines = path.read_text().splitlines()
    return {line.strip().removesuffix(".json") for line in lines if line.strip() and not line.startswith("#")}


def element_units(element_id: str) -> list:
    """The element's units at its `cpu` preset and at half its budget (where it has one), each once."""
    from gradalign.experiments import get
    from gradalign.experiments.claim_budget import half_overrides
    from gradalign.experiments.units import units_of

    cfg = get(element_id).resolve("cpu", {})
    half = half_overrides(cfg.to_dict())
    units = units_of(element_id, cfg) + (units_of(element_id, get(element_id).resolve("cpu", half)) if half else [])
    return list({(u.kind, u.key): u for u in units}.values())


def legacy_of(element_id: str, runs: Path, names: set[str]) -> list[tuple[object, dict]]:
    """(unit, provenance) of each of the element's units whose committed entry under `runs` is listed in `names` and
    still names a dirty commit."""
    out = []
    for unit in element_units(element_id):
        path = runs / unit.kind / f"{unit.key}.json"
        if f"{unit.kind}/{unit.key}" in names and path.exists():
            provenance = json.loads(path.read_text())["provenance"]
            if str(provenance.get("git_commit", "")).endswith("+dirty"):  # listed, and not trained again yet
                out.append((unit, provenance))
    return out


def summary(element_id: str, runs: Path, names: set[str]) -> str:
    """One line: the element's legacy entries by device, with the hours they took when first trained."""
    found = legacy_of(element_id, runs, names)
    count, hours = Counter(), Counter()
    for _, provenance in found:
        count[provenance["device"]] += 1
        hours[provenance["device"]] += provenance.get("wall_time_s", 0.0) / 3600
    parts = [f"{count[d]} {d} ({hours[d]:.2f} h)" for d in sorted(count)]
    return f"{element_id}: {', '.join(parts) if parts else 'none'}"


def retrain(element_id: str, runs: Path, names: set[str], cache: Path, echo=print) -> int:
    """Train the element's legacy CPU entries again here, one at a time, into the fresh run cache `cache` (an entry
    cached from the dirty run would be read back, not trained); each entry is replaced only once its run finished.
    Returns how many were trained. Remove them from the list afterwards (the clean-tree test says which)."""
    from gradalign.compute.sweep import compute_unit

    todo = [u for u, p in legacy_of(element_id, runs, names) if p["device"] == "cpu"]
    echo(f"{element_id}: {len(todo)} CPU entr{'y' if len(todo) == 1 else 'ies'} to train again")
    for unit in todo:
        path = runs / unit.kind / f"{unit.key}.json"
        kept = path.read_bytes()
        path.unlink()  # else the committed entry is read, not trained
        try:
            compute_unit(unit, str(cache), 1, str(runs))
        except BaseException:
            if not path.exists():
                path.write_bytes(kept)  # a stopped run leaves the old entry, never a hole
            raise
        echo(f"ok   {unit.label}")
    return len(todo)


def main(argv: list[str] | None = None) -> int:
    from gradalign.experiments.units import UNITS
    from gradalign.store.store_root import results_root

    parser = argparse.ArgumentParser(
        prog="python -m gradalign.compute.legacy_dirty", description=__doc__.split("\n")[0]
    )
    parser.add_argument("elements", nargs="*", help="element ids (default: every element with units)")
    parser.add_argument("--train", action="store_true", help="train their CPU entries again here")
    parser.add_argument("--cache", default="/tmp/gradalign-legacy-cache", help="a fresh run cache (--train)")
    args = parser.parse_args(argv)
    unknown = [e for e in args.elements if e not in UNITS]
    if unknown:
        parser.error(f"unknown or unit-less element(s): {', '.join(unknown)}")
    cache = Path(args.cache)
    if args.train and cache.exists() and any(cache.iterdir()):
        parser.error(f"{cache} is not empty: give a fresh run cache, so that no dirty run is read back")
    runs, names = results_root() / "runs", listed()
    for element_id in args.elements or list(UNITS):
        if args.train:
            retrain(element_id, runs, names, cache)
        else:
            print(summary(element_id, runs, names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
