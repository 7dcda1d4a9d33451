"""Stamping records with their smoke canary, and `gradalign stale` (`canary` decides what a stamp means).

`stamp` gives a record whose library files are today's, byte for byte, its behaviour fingerprint and its
smoke canary, on this machine's CPU kind (`environment.machine_kind`). `stamp_this_cpu` gives a record that is
current (by its code, or by its canary on a kind its code ran it on) its canary on this machine's kind as well
(`by_cpu`): seeded CPU runs differ across kinds (an AVX2 and an AVX512 machine, and two AVX512 machines of other
vendors and extensions), so without it a record stamped on one kind could be cleared on another only by a canary
of today's code kept from a kind it names, and a change made there could not be judged like with like. Each canary runs
twice; two different digests store none.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import sys
from pathlib import Path

from gradalign.elements import PARTS
from gradalign.records.canary import (
    FORMAT,
    _cache_path,
    _module,
    _torch_version,
    code_status,
    machine_kind,
    run_canary,
)
from gradalign.store.fingerprint import behaviour_fingerprint, changed_files, code_fingerprint


def _twice(element_id: str) -> dict[int, str]:
    """The canary's digest in each format in which two runs agree (format 1 may differ where format 2 agrees:
    `canary.FORMATS`); {} when the experiment has no smoke preset."""
    from gradalign.errors import ConfigError

    try:
        first, second = run_canary(element_id), run_canary(element_id)
    except ConfigError:
        return {}
    return {fmt: digest for fmt, digest in first.items() if second.get(fmt) == digest}


def _records(store):
    for path in sorted(p for part in PARTS for p in store.root.glob(f"{part}/*/*.json")):
        yield path, json.loads(path.read_text())


def _save(store, record: dict, path: Path, note: str) -> None:
    """Save `record` where it lies, with `note` added to its stamps (`stamped`: every stamp, oldest first; a
    record stamped before stamps were kept holds its one stamp as a dict, which becomes the first)."""
    earlier = record.get("stamped") or []
    earlier = [earlier] if isinstance(earlier, dict) else list(earlier)
    record["stamped"] = [*earlier, {"date": _dt.date.today().isoformat(), "note": note}]
    if store.save(record) != path:
        raise ValueError(f"{path}: the stamped record would move")


def stamp(store=None, echo=print, force: bool = False) -> dict[str, int]:
    """Add the behaviour fingerprint and the smoke canary to every stored record whose library files are
    byte for byte today's (so today's code is the code that computed it) and that lacks them (`force`: also
    those that have them). The canary runs twice; two different digests leave the record without one."""
    from gradalign.records.results import ResultStore

    store = store or ResultStore()
    counts = {"stamped": 0, "already": 0, "not current": 0, "no canary": 0}
    canaries: dict[str, dict[int, str]] = {}
    for path, record in _records(store):
        provenance = record.get("provenance", {})
        module = _module(record["id"])
        if not isinstance(provenance.get("code"), dict) or changed_files(provenance["code"], code_fingerprint(module)):
            counts["not current"] += 1
            continue
        canary = provenance.get("canary")
        if (
            not force
            and isinstance(provenance.get("behaviour"), dict)
            and isinstance(canary, dict)
            and canary.get("torch") == _torch_version()
        ):
            counts["already"] += 1
            continue
        if record["id"] not in canaries:
            canaries[record["id"]] = _twice(record["id"])
        provenance["behaviour"] = behaviour_fingerprint(module)
        digests = canaries[record["id"]]
        if FORMAT not in digests:
            provenance.pop("canary", None)
            counts["no canary"] += 1
        else:
            provenance["canary"] = {
                "digest": digests[FORMAT],
                "format": FORMAT,
                "torch": _torch_version(),
                "preset": "smoke",
                "threads": 1,
                "cpu": machine_kind(),
            }
        _save(store, record, path, "behaviour fingerprint and smoke canary of the unchanged code")
        counts["stamped"] += 1
        echo(
            f"{record['id']} [{path.stem.split('-')[0]}]: "
            + ("stamped" if FORMAT in digests else "stamped, no canary (two smoke runs differ)")
        )
    return counts


def stamp_this_cpu(store=None, echo=print) -> dict[str, int]:
    """Add this machine's CPU kind's canary (`canary.by_cpu[kind]`, in the canary's format) to every stored record
    that is current (`code_status`: the same code, or a canary that cleared it on a kind the record's canary ran on)
    and whose canary ran on another kind. Today's code is then the record's code, or code whose smoke outcome its
    canary showed to be the record's; its canary here stands for the record's code on this kind."""
    from gradalign.records.results import ResultStore

    store = store or ResultStore()
    here, counts = machine_kind(), {"stamped": 0, "already": 0, "not current": 0, "no canary": 0}
    canaries: dict[str, dict[int, str]] = {}
    for path, record in _records(store):
        canary = record.get("provenance", {}).get("canary")
        if not isinstance(canary, dict) or canary.get("torch") != _torch_version():
            counts["no canary"] += 1
            continue
        if canary.get("cpu") == here or here in (canary.get("by_cpu") or {}):
            counts["already"] += 1
            continue
        status = code_status(record)
        if status is None or status["state"] == "stale":
            counts["not current"] += 1
            continue
        if record["id"] not in canaries:
            canaries[record["id"]] = _twice(record["id"])
        digest = canaries[record["id"]].get(canary.get("format", 1))
        if digest is None:  # two runs differ in the record's format
            counts["no canary"] += 1
            continue
        canary["by_cpu"] = {**(canary.get("by_cpu") or {}), here: digest}
        _save(store, record, path, f"smoke canary on a CPU of kind {here} added, the record being {status['state']}")
        counts["stamped"] += 1
        echo(f"{record['id']} [{path.stem.split('-')[0]}]: {here} canary added ({status['state']})")
    return counts


def add_parser(sub) -> None:
    """`gradalign stale` on the command line's subparsers."""
    p = sub.add_parser("stale", help="each stored record: current, current by canary, or stale (and what changed)")
    p.add_argument("--stamp", action="store_true", help="first stamp the current records with behaviour and canary")
    p.add_argument(
        "--this-cpu",
        action="store_true",
        help="first give every current record its canary on this CPU kind too (before changing code on a new machine)",
    )
    p.add_argument("--results", default=None, help="results store (default: the checkout's results/)")
    p.set_defaults(func=cmd_stale)


def cmd_stale(args) -> int:
    """Each stored record's code status, one line each (the canary runs where a record's code changed); exit 1
    when any record is stale."""
    from gradalign.records import storage
    from gradalign.store.store_root import results_root

    store = storage.result_store(args.results)
    storage.check_results_exist(store.root)
    if args.stamp:
        storage.check_results_writable(store.root)
        print(stamp(store))
    if args.this_cpu:
        storage.check_results_writable(store.root)
        print(stamp_this_cpu(store))
    counts: dict[str, int] = {}
    for path, record in _records(store):
        status = code_status(record)
        state = status["state"] if status else "unknown"
        counts[state] = counts.get(state, 0) + 1
        detail = f" ({status['why']}; changed: {', '.join(status['changed'])})" if status and status["changed"] else ""
        print(f"{record['id']} [{path.stem.split('-')[0]}]: {state}{detail}")
    print(", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no stored record")
    removed = _prune_canaries()
    print(
        f"canaries: today's kept in {results_root() / 'canaries'}, {len(removed)} of older code removed"
        " (in a checkout, commit that folder: a fresh clone then reads them instead of running them)"
    )
    return 1 if counts.get("stale") else 0


def _prune_canaries() -> list[Path]:
    """Keep only today's canary of each experiment under `<results>/canaries/` (older code's are never read); the
    files removed."""
    from gradalign.experiments import EXPERIMENTS
    from gradalign.store.store_root import results_root

    removed = []
    for element_id, exp in EXPERIMENTS.items():
        today = _cache_path(element_id, behaviour_fingerprint(exp.run.__module__))
        for path in (results_root() / "canaries" / element_id).glob("*.json"):
            if path != today:
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
    return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m gradalign.records.canary_stamp [--stamp]`: the same as `gradalign stale`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m gradalign.records.canary_stamp", description=__doc__.splitlines()[0]
    )
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stale", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
