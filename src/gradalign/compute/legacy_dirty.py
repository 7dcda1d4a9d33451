"""The legacy run entries from dirty trees: which element reads each, and retraining them from committed code.

Before `gradalign run` refused a dirty tree (2026-11-27), some run entries were committed from uncommitted code;
they are listed in `tests/dirty_run_entries.txt` (the test there fails on a new one, and on a listed one that is
clean). Seeded CPU training is bit-identical at one thread on one kind of machine (`environment.machine_kind`:
torch's capability, the vendor, the extensions oneDNN and MKL choose by), so a CPU entry trained again from
committed code on the kind that trained it has the same value, and only its provenance changes. On another kind it
need not: on 2026-11-28 an AVX2 EPYC (no AVX512) retrained `sgr.tab3`'s Reforward seed 0 to 84.1 % where the entry
held 84.2 %, and on 2026-12-07 an AVX512 Intel Xeon without bf16 gave 9 of 13 smoke canaries other than the AVX512
EPYC's. An entry from before 2026-12-07 names torch's capability alone; its `hardware` line names the CPU model.
`retrain` prints every value that moved; where one did, as for a CUDA entry, the records reading it are assembled
again. A CUDA entry trained again on a CPU is a new run on other hardware: a stable run's value moves a little, an
unstable one's as far as a reseeded run's (2026-12-07, AVX512 Xeon: `sgr.fig2`'s SGR tuning run at lr 0.1, 8 epochs,
final accuracy 9.8 -> 31.9 %, best 30.5 -> 54.4 %; one of its layer-wise runs at lr 0.3, 40 epochs, 84.3 -> 60.7 %).
So a tuning choice read from such runs can change.

An entry belongs to an element when it is one of the element's units at its `cpu` preset, or at half its budget
(`claim_budget.half_overrides`, which the claim-level budget check reads). Other readers exist (the book's supervised
reference, pilots at their own overrides), so an entry no element claims here is **not** thereby unread: this
module never deletes one that it does not retrain.

    python -m gradalign.compute.legacy_dirty                 # each element's legacy entries, by device, hours there
    python -m gradalign.compute.legacy_dirty lga.fig3 --train  # retrain its CPU entries here (one thread, fresh cache)
    python -m gradalign.compute.legacy_dirty sgr.tab4 --train --cuda-here  # its CUDA entries too, on this CPU
    python -m gradalign.compute.legacy_dirty unclaimed --train  # the entries no element claims (pilots' runs)
    python -m gradalign.compute.legacy_dirty sgr.tab4 --train --cuda-here --drop-diverged  # diverged here: removed
    python -m gradalign.compute.legacy_dirty sgr.fig2 --train --cuda-here --part 1/2 --cache /tmp/c1  # and 2/2 beside

`unclaimed` names the listed entries that no element's units claim (the λ pilots' runs, the book's supervised
reference, ...): each is rebuilt as a unit from its stored spec, where its kind's spec class is known (`REBUILT`),
and refused unless the rebuilt unit has the entry's key. Their readers compute their records in one piece, so a
record of them changes only where a CUDA entry was retrained.

With `--cuda-here` the element's CUDA entries are trained on this CPU as well (no GPU is needed to clean them): their
values move (each printed old -> new), so every record that reads them is assembled again afterwards, from a clean
tree (`gradalign run ELEMENT --preset cpu` with the record removed; `--force` would train every run the record reads
again), and committed with them. `--train` names the elements that read the entries whose values moved (`readers`).
"""

from __future__ import annotations

import argparse
import json
import zlib
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


SCORES_DIVERGENCE = ("sgr.tab4", "sgr.fig2", "sgr.fig3", "sgr.fig4")
"""Elements whose code scores a divergence of their runs itself (`--drop-diverged`): Table 4's tuning (`bp_free.tune`:
a diverged tuning run scores 0) and final runs (`bp_free._tuned_runs`: the next rate), which Figures 2-4 share."""

UNCLAIMED = "unclaimed"
REBUILT = {
    "sgr.local": ("gradalign.training.local", "LocalRunSpec", "local_unit"),
    "sgr.bpfree": ("gradalign.training.bp_free", "BPFreeRunSpec", "bp_free_unit"),
}
"""Run kinds whose unit is rebuilt from a stored spec alone: kind -> (module, spec class, unit function)."""


def rebuilt_unit(entry: dict):
    """The unit of a stored run entry, rebuilt from its spec (a ValueError when its kind is not in `REBUILT`, or
    when the rebuilt unit's key is not the entry's)."""
    import importlib

    from gradalign.config import settings_from_dict

    if entry["kind"] not in REBUILT:
        raise ValueError(f"a {entry['kind']} run is not rebuilt from its spec (kinds: {', '.join(REBUILT)})")
    module, spec_class, make = REBUILT[entry["kind"]]
    module = importlib.import_module(module)
    unit = getattr(module, make)(settings_from_dict(getattr(module, spec_class), entry["spec"]))
    if unit.key != entry["key"]:
        raise ValueError(f"{entry['kind']}/{entry['key']}: its spec rebuilds another key, {unit.key}")
    return unit


def unclaimed(runs: Path, names: set[str]) -> tuple[list, list[str]]:
    """(units rebuilt from their specs, "kind/key" of the others) of the listed entries under `runs` that no
    element's units claim."""
    from gradalign.experiments.units import UNITS

    claimed = {f"{u.kind}/{u.key}" for element_id in UNITS for u in element_units(element_id)}
    units, others = [], []
    for name in sorted(names - claimed):
        path = runs / f"{name}.json"
        entry = json.loads(path.read_text()) if path.exists() else {}
        if str(entry.get("provenance", {}).get("git_commit", "")).endswith("+dirty"):
            if entry["kind"] in REBUILT:
                units.append(rebuilt_unit(entry))
            else:
                others.append(name)
    return units, others


def legacy_of(element_id: str, runs: Path, names: set[str], units: list | None = None) -> list[tuple[object, dict]]:
    """(unit, provenance) of each of the element's units (`UNCLAIMED`: the rebuilt unclaimed ones, or `units` when
    given) whose committed entry under `runs` is listed in `names` and still names a dirty commit."""
    out = []
    if units is None:
        units = unclaimed(runs, names)[0] if element_id == UNCLAIMED else element_units(element_id)
    for unit in units:
        path = runs / unit.kind / f"{unit.key}.json"
        if f"{unit.kind}/{unit.key}" in names and path.exists():
            provenance = json.loads(path.read_text())["provenance"]
            if str(provenance.get("git_commit", "")).endswith("+dirty"):  # listed, and not trained again yet
                out.append((unit, provenance))
    return out


def summary(element_id: str, runs: Path, names: set[str], units: list | None = None) -> str:
    """One line: the element's legacy entries by device, with the hours they took when first trained."""
    found = legacy_of(element_id, runs, names, units)
    count, hours = Counter(), Counter()
    for _, provenance in found:
        count[provenance["device"]] += 1
        hours[provenance["device"]] += provenance.get("wall_time_s", 0.0) / 3600
    parts = [f"{count[d]} {d} ({hours[d]:.2f} h there)" for d in sorted(count)]  # a GPU's hours: a CPU takes more
    return f"{element_id}: {', '.join(parts) if parts else 'none'}"


def moved(old: dict, new: dict, most: int = 3) -> str:
    """In words, up to `most` top-level numbers of a run's value, timings aside, that differ between two entries ("" if
    none)."""
    from gradalign.records.canary import TIMING

    a, b = old.get("value", {}), new.get("value", {})
    changed = [
        f"{k} {a[k]:.4g} -> {b[k]:.4g}"
        for k in sorted(set(a) & set(b))
        if isinstance(a[k], (int, float)) and isinstance(b[k], (int, float)) and a[k] != b[k]
        if not TIMING.search(k)  # wall times, rates, memory: they differ between any two runs
    ]
    return ", ".join(changed[:most]) + (f" and {len(changed) - most} more" if len(changed) > most else "")


def in_part(key: str, part: tuple[int, int]) -> bool:
    """Whether a run's key falls in part (k, n): its CRC-32 is k - 1 modulo n (fixed by the key alone)."""
    return zlib.crc32(key.encode()) % part[1] == part[0] - 1


def retrain(
    element_id: str,
    runs: Path,
    names: set[str],
    cache: Path,
    echo=print,
    cuda_here: bool = False,
    drop_diverged: bool = False,
    part: tuple[int, int] = (1, 1),
    moved_entries: set | None = None,
) -> int:
    """Train the element's legacy CPU entries (and its CUDA ones when `cuda_here`) again here, one at a time, into the
    fresh run cache `cache` (an entry cached from the dirty run would be read back, not trained); each entry is
    replaced only once its run finished. Returns how many were trained (a dropped one is not). Remove them from the
    list afterwards (the clean-tree test says which); after CUDA ones, assemble the records that read them again.

    A run that diverges here (today's loop stops a run at a NaN or back at chance, which an older loop stored as a
    finished run at chance) raises DivergenceError with its old entry put back; with `drop_diverged` its entry is
    removed instead and the next one trained. Only for an element whose code handles a divergence of that run (a
    tuning run of `sgr.tab4` scores 0, a final run moves to the next rate): its records must then be assembled
    again, which trains that run again and meets the divergence there. `part` (k, n) trains only the entries whose key's
    CRC-32 is k - 1 modulo n: n processes, each with its own cache, share the entries without training one twice,
    whenever each starts (a part is fixed by the key, not by which entries are still dirty). `moved_entries`, when
    given, collects the (kind, key) of every entry whose value moved (`moved`), for `readers`."""
    from gradalign.compute.sweep import compute_unit
    from gradalign.errors import DivergenceError

    devices = ("cpu", "cuda") if cuda_here else ("cpu",)
    todo = [u for u, p in legacy_of(element_id, runs, names) if p["device"] in devices and in_part(u.key, part)]
    what = " and ".join(d.upper() for d in devices)
    echo(f"{element_id}: {len(todo)} {what} entr{'y' if len(todo) == 1 else 'ies'} to train again here")
    trained = 0
    for unit in todo:
        path = runs / unit.kind / f"{unit.key}.json"
        kept = path.read_bytes()
        path.unlink()  # else the committed entry is read, not trained
        try:
            compute_unit(unit, str(cache), 1, str(runs))
        except DivergenceError as err:
            if not drop_diverged:
                if not path.exists():
                    path.write_bytes(kept)
                raise
            why = str(err).split(";")[0]
            echo(f"diverged here, entry removed: {unit.label} ({why}); assemble {element_id}'s records again")
            continue
        except BaseException:
            if not path.exists():
                path.write_bytes(kept)  # a stopped run leaves the old entry, never a hole
            raise
        change = moved(json.loads(kept), json.loads(path.read_text()))
        echo(f"ok   {unit.label}" + (f" (moved: {change})" if change else ""))
        if change and moved_entries is not None:
            moved_entries.add((unit.kind, unit.key))
        trained += 1
    return trained


def readers(entries: set[tuple[str, str]]) -> list[str]:
    """The elements among whose units (`element_units`) is any of `entries` ((kind, key) pairs): the records to
    assemble again once those entries have moved."""
    from gradalign.experiments.units import UNITS

    return [e for e in UNITS if entries & {(u.kind, u.key) for u in element_units(e)}]


def reassembly_advice(element_id: str, elements: list[str], parts: bool) -> str:
    """What to do after entries' values moved (CUDA ones trained here, or CPU ones on another kind): every record that
    reads them is assembled again, from the committed runs. Not with `gradalign run --force`, which trains every run
    the record reads again (on 2026-12-07 it retrained `sgr.fig2`'s committed EPYC runs before it was stopped)."""
    after = "once every part has finished, " if parts else ""
    if not elements:  # `unclaimed`: no element's units read them
        return (
            f"{element_id}: entries moved; {after}commit them; no element's units read them: assemble again the "
            "pilot or study that does (`gradalign.compute.pilots`), from a clean tree"
        )
    return (
        f"{element_id}: entries moved; {after}commit them, then assemble again each record that reads them "
        f"({', '.join(elements)}) from a clean tree: remove its stored cpu record and run `gradalign run ID --preset "
        "cpu` (not --force, which trains every run the record reads again)"
    )


def stop_cleanly_on_sigterm() -> None:
    """Make SIGTERM (`kill`, `pkill`) raise SystemExit, so that `retrain` puts back the entry of the run it stops
    (the default SIGTERM ends the process at once, leaving the removed entry's hole)."""
    import signal

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    from gradalign.errors import DivergenceError
    from gradalign.experiments.units import UNITS
    from gradalign.store.store_root import results_root

    parser = argparse.ArgumentParser(
        prog="python -m gradalign.compute.legacy_dirty", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "elements", nargs="*", help=f"element ids, or {UNCLAIMED} (default: every element with units, and {UNCLAIMED})"
    )
    parser.add_argument("--train", action="store_true", help="train their CPU entries again here")
    parser.add_argument("--cache", default="/tmp/gradalign-legacy-cache", help="a fresh run cache (--train)")
    parser.add_argument(
        "--cuda-here", action="store_true", help="with --train: the CUDA entries too, on this machine's CPU"
    )
    parser.add_argument(
        "--drop-diverged",
        action="store_true",
        help="with --train: remove the entry of a run that diverges here (its element scores the divergence itself)",
    )
    parser.add_argument(
        "--part",
        default="1/1",
        help="with --train: K/N trains the K-th of N parts, by key (N processes, side by side)",
    )
    args = parser.parse_args(argv)
    part = args.part.split("/")
    if len(part) != 2 or not all(x.isdecimal() for x in part) or not 1 <= int(part[0]) <= int(part[1]):
        parser.error(f"--part {args.part}: give K/N with 1 <= K <= N")
    part = (int(part[0]), int(part[1]))
    if part != (1, 1) and not args.train:
        parser.error("--part trains: give --train with it")
    if part[1] > 1 and args.cache == parser.get_default("cache"):
        parser.error("--part K/N with N > 1: give each part its own --cache (the default is one folder for all)")
    unknown = [e for e in args.elements if e not in UNITS and e != UNCLAIMED]
    if unknown:
        parser.error(f"unknown or unit-less element(s): {', '.join(unknown)}")
    cache = Path(args.cache)
    for flag, given in (("--cuda-here", args.cuda_here), ("--drop-diverged", args.drop_diverged)):
        if given and not args.train:
            parser.error(f"{flag} trains: give --train with it")
    others = [e for e in (args.elements or [UNCLAIMED]) if e not in SCORES_DIVERGENCE]
    if args.drop_diverged and others:
        parser.error(f"--drop-diverged: {', '.join(others)} do not score a divergence of their runs themselves")
    if args.train and cache.exists() and any(cache.iterdir()):
        parser.error(f"{cache} is not empty: give a fresh run cache, so that no dirty run is read back")
    runs, names = results_root() / "runs", listed()
    elements = args.elements or [*UNITS, UNCLAIMED]
    if args.train:
        stop_cleanly_on_sigterm()
    else:  # the unclaimed entries are found once: their summary and the list of those not rebuilt
        rebuilt, others = unclaimed(runs, names) if UNCLAIMED in elements else ([], [])
    for element_id in elements:
        if args.train:
            moved_entries: set[tuple[str, str]] = set()
            try:
                retrain(
                    element_id,
                    runs,
                    names,
                    cache,
                    cuda_here=args.cuda_here,
                    drop_diverged=args.drop_diverged,
                    part=part,
                    moved_entries=moved_entries,
                )
            except DivergenceError as err:  # the entry is back; today's loop stops a run its first training kept
                raise SystemExit(
                    f"legacy_dirty: {element_id}: {err}; its dirty entry was put back (--drop-diverged removes it, "
                    "where the element scores a divergence of that run itself)"
                ) from None
            if moved_entries:
                print(reassembly_advice(element_id, readers(moved_entries), part[1] > 1))
        else:
            print(summary(element_id, runs, names, rebuilt if element_id == UNCLAIMED else None))
    if not args.train and UNCLAIMED in elements:
        kinds = Counter(name.split("/")[0] for name in others)
        print(f"not rebuilt from a spec: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items())) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
