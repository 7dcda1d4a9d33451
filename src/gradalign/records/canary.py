"""Is a stored record still current? Bytes, then behaviour, then the smoke canary.

A record stores three things about the code that computed it (`provenance`):

- `code`: the sha256 of the bytes of every library file its experiment runs (`fingerprint.code_fingerprint`);
- `behaviour`: a digest of every top-level definition those files hold, by syntax tree, docstrings dropped,
  keyed by name, not by file (`fingerprint.behaviour_fingerprint`);
- `canary`: the digest of the experiment's outcome at the `smoke` preset, on this CPU at one thread, when
  the record's code was today's (`stamp`).

`code_status` reads them in that order. Equal bytes, or an equal behaviour fingerprint (a comment, a
reformat, a moved function): *current*. Otherwise the changed definitions are named, and the smoke canary is
run on today's code: the same outcome digest makes the record *current by canary*, never "untouched"; a
different one, or no canary to compare, makes it *stale*.

What a canary cannot see: a code path that only a larger preset takes (a branch on the number of epochs, the GPU
path, a half-budget check that smoke does not assemble), and a change whose effect at smoke rounds away. A canary is
compared only where it was computed under the same torch version (another torch can round differently, so the record
is then stale, conservatively). Nor is seeded CPU training bit-identical across kinds of CPU: torch dispatches other
kernels by the CPU's instruction set (AVX2, AVX512, ...), oneDNN and MKL by its extensions and vendor
(`machine_kind`). On 2026-11-28 15 canaries run on an AVX2 EPYC differed from the AVX512 ones of the same code; on
2026-12-07 an AVX512 Intel Xeon without bf16 differed from the AVX512 EPYC with it. So a canary names its CPU kind
(the record's, and each kept one); a kept canary of the record's kind is used where there is one, a machine of that
kind runs and keeps one where there is none (`_todays`), and a digest that differs across kinds leaves the record
stale with that said, never blamed on the code alone. A record may also carry its code's canary on other kinds
(`by_cpu`, added while its code was current: `canary_stamp.stamp_this_cpu`); on a machine of such a kind, today's
canary there is compared with it, so that code can be moved on any CPU the records were stamped on. Today's kept
canaries on the other kinds the record's canary ran on are compared too, from files (`_on_named_kinds`): a
difference on any makes it stale, an equality with none differing current by canary. A record stamped before
canaries named their kind is cleared by a kept canary of any kind that has its digest (that kind is its own), else
compared with today's canary on this machine's kind, never with another kind's alone. Timing metrics (seconds,
memory) are left out of the digest; a canary whose two runs disagree even so is not stored (`canary_stamp.stamp`),
and its record cannot be cleared by a canary.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from gradalign.environment import machine_kind
from gradalign.store.atomic import write_json_atomically
from gradalign.store.fingerprint import behaviour_fingerprint, changed_files, code_fingerprint, where_defined

TIMING = re.compile(
    r"second|time|wall|_ms\b|_s\b|per_s|throughput|speed|peak|memory|bytes|mib\b|gib\b|benchmark|ratio_to_step", re.I
)
"""Flattened metric names left out of the canary's digest: measured time and memory (and ratios of them: the
`benchmark` entries, `ratio_to_step`) differ between runs."""


FORMATS = {1: lambda v: f"{v:.10g}", 2: lambda v: f"{round(v, 12):.10g}"}
"""How a float enters the digest, by format (a stored canary names its format; 1 when it names none):
10 significant digits (1), after rounding to 12 decimals (2). Summation order can move the last bits between
two runs of the same code, and in a value that is itself a tiny difference (`sgr.thm33`'s bounds near 1e-12)
those bits are the leading digits: format 2 ignores what lies below 1e-12. Records are stamped in `FORMAT`."""
FORMAT = 2

BARE = (
    " (a bare label, from before kinds named vendor and extensions, that no machine reports now: recompute the record"
    " to tell them apart)"
)


def _leaves(value: Any, prefix: str = ""):
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from _leaves(value[key], f"{prefix}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{prefix}[{i}]")
    else:
        yield prefix, value


def outcome_digest(record: dict, fmt: int = FORMAT) -> str:
    """sha256 prefix of a record's metrics and curves, timing and memory measurements left out."""
    leaves = _leaves({"metrics": record["metrics"], "curves": record.get("curves", {})})
    kept = [(k, FORMATS[fmt](v) if isinstance(v, float) else repr(v)) for k, v in leaves]
    kept = [(k, v) for k, v in kept if not TIMING.search(k)]
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _scratch_environment(folder: Path):
    """A results store and a run cache of their own, one thread, no progress bars: a canary reads nothing
    that was stored and leaves nothing behind."""
    names = ("GRADALIGN_RESULTS", "GRADALIGN_CACHE", "GRADALIGN_THREADS", "GRADALIGN_PROGRESS")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(
        GRADALIGN_RESULTS=str(folder / "results"),
        GRADALIGN_CACHE=str(folder / "cache"),
        GRADALIGN_THREADS="1",
        GRADALIGN_PROGRESS="0",
    )
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_canary(element_id: str) -> dict[int, str]:
    """Run `element_id` at `smoke` on today's code, on the CPU at one thread, from scratch: its outcome digest in
    every format."""
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import run

    with tempfile.TemporaryDirectory(prefix="gradalign-canary-") as tmp, _scratch_environment(Path(tmp)):
        record = run(element_id, "smoke", store=ResultStore(Path(tmp) / "results"), device="cpu", force=True)
    return {fmt: outcome_digest(record, fmt) for fmt in FORMATS}


def _torch_version() -> str:
    import torch

    return torch.__version__


def _module(element_id: str) -> str:
    from gradalign.experiments import get

    return get(element_id).run.__module__


def _cache_path(element_id: str, behaviour: dict[str, str]) -> Path:
    """Where today's canary of `element_id` is kept: `<results>/canaries/<id>/<key>.json`, keyed by the behaviour
    fingerprint and the torch version. Committed with the records, so that a fresh clone does not run again the
    canaries that cleared them (an entry is read only for its own id and torch version)."""
    from gradalign.store.store_root import results_root

    key = hashlib.sha256(json.dumps([behaviour, _torch_version()], sort_keys=True).encode()).hexdigest()[:16]
    return results_root() / "canaries" / element_id / f"{key}.json"


def todays_canary(
    element_id: str, behaviour: dict[str, str] | None = None, fmt: int = FORMAT, run: bool = True
) -> str | None:
    """Today's canary digest for `element_id` in format `fmt`, from the cache when today's behaviour ran it; else
    run here, or None where `run` is False (a missing or unreadable kept canary)."""
    return _todays(element_id, behaviour, fmt, run)[0]


def _kept(element_id: str, behaviour: dict[str, str], fmt: int) -> tuple[dict | None, dict]:
    """The kept canary entry of today's `behaviour` (None: none, or unreadable, or of another id or torch, or
    without format `fmt`) and its digests by CPU kind (None: the kind of an entry that names none)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        read = json.loads(_cache_path(element_id, behaviour).read_text())
        if (
            read["id"] == element_id
            and read["torch"] == _torch_version()
            and isinstance(read["digests"][str(fmt)], str)
        ):
            return read, {**read.get("by_cpu", {}), read.get("cpu"): read["digests"]}
    return None, {}


def _todays(
    element_id: str, behaviour: dict[str, str] | None, fmt: int, run: bool, kind: str | None = None
) -> tuple[str | None, str | None]:
    """`todays_canary` with the CPU kind it ran on (None: a kept canary that names none). `kind`: the CPU kind of
    the canary the caller compares with. A kept entry holds one canary per CPU kind it ran on (`cpu`, `digests`: the
    first; `by_cpu`: the others): one of `kind` is used wherever this is; where none is kept, this machine is of
    `kind` and may run it, the canary runs here and is kept beside the others; else the first kind's is returned."""
    behaviour = behaviour if behaviour is not None else behaviour_fingerprint(_module(element_id))
    path = _cache_path(element_id, behaviour)
    entry, by_kind = _kept(element_id, behaviour, fmt)
    cached = by_kind.get(kind) if kind else None
    if isinstance(cached, dict) and isinstance(cached.get(str(fmt)), str):
        return cached[str(fmt)], kind
    here = machine_kind()
    if entry is not None and not (run and kind == here and None not in by_kind):
        return entry["digests"][str(fmt)], entry.get("cpu")
    if not run:
        return None, None
    digests = {str(f): d for f, d in run_canary(element_id).items()}
    if entry is None:
        entry = {"id": element_id, "digests": digests, "torch": _torch_version(), "cpu": here}
    else:
        entry = {**entry, "by_cpu": {**entry.get("by_cpu", {}), here: digests}}
    with contextlib.suppress(OSError):
        write_json_atomically(path, entry)
    return digests[str(fmt)], here


def _named(name: str, places: list[str]) -> str:
    """A changed definition with the files that hold it today; an import by its name alone (the same import in
    forty modules is one binding, not forty changes)."""
    if name.startswith("import "):
        return name
    return f"{name} ({', '.join(places)})" if places else f"{name} (removed)"


def code_status(record: dict, run: bool = True) -> dict | None:
    """Whether the code that computed `record` could have changed its numbers, or None (no fingerprint).

    {"state": "current" | "current by canary" | "stale", "changed": [...], "why": words}. `changed` names the
    definitions whose behaviour moved (or the files, for a record without a behaviour fingerprint). `run`:
    whether the canary may run here (else only a cached one is used, and a record it would decide is stale).
    Like with like first: today's canary on this machine's kind where the record's ran here too (`_on_this_kind`),
    then today's kept canaries on the kinds the record's ran on (`_on_named_kinds`). A record whose canary names no
    CPU kind (stamped before canaries named theirs) is cleared by a kept canary of any kind with its digest, that
    kind being its own; else today's canary on this kind is compared with it.
    """
    provenance = record.get("provenance", {})
    stored = provenance.get("code")
    if not isinstance(stored, dict):
        return None
    module = _module(record["id"])
    files = changed_files(stored, code_fingerprint(module))
    if not files:
        return {"state": "current", "changed": [], "why": "the same library files"}
    behaviour = behaviour_fingerprint(module)
    kept = provenance.get("behaviour")
    if isinstance(kept, dict):
        names = changed_files(kept, behaviour)
        if not names:
            return {"state": "current", "changed": [], "why": f"{len(files)} file(s) edited, no definition changed"}
        places = where_defined(names, module)
        changed = [_named(n, places[n]) for n in names]
    else:
        changed = files
    canary = provenance.get("canary")
    if not (isinstance(canary, dict) and isinstance(canary.get("digest"), str)):
        return {"state": "stale", "changed": changed, "why": "no smoke canary stored with the record"}
    if canary.get("torch") != _torch_version():
        return {"state": "stale", "changed": changed, "why": f"its canary ran under torch {canary.get('torch')}"}
    fmt = canary.get("format", 1)
    if fmt not in FORMATS:
        return {"state": "stale", "changed": changed, "why": f"its canary has an unknown format {fmt!r}"}
    kind, here = canary.get("cpu"), machine_kind()
    also = canary.get("by_cpu")
    if kind != here and isinstance(also, dict) and isinstance(also.get(here), str):
        like = _on_this_kind(record, behaviour, fmt, run, also[here], here, changed)
        if like is not None:
            return like
    named = _on_named_kinds(record, behaviour, fmt, {**(also if isinstance(also, dict) else {}), kind: canary})
    if named is not None:  # like with like on a kind the record's code ran its canary on, from kept files only
        return {**named, "changed": changed}
    if kind is None:  # stamped before canaries named their kind: the kind whose kept canary equals it is its own
        kept_digests = _kept(record["id"], behaviour, fmt)[1].items()
        named = [k for k, d in kept_digests if isinstance(d, dict) and d.get(str(fmt)) == canary["digest"]]
        if named:
            on = f" on a CPU of kind {named[0]}" if named[0] else ""
            why = f"smoke canary identical{on} (the record's canary names no kind)"
            return {"state": "current by canary", "changed": changed, "why": why}
    today, today_kind = _todays(record["id"], behaviour, fmt, run, kind or here)
    if today is None or (kind is None and not run and today_kind not in (here, None)):  # none here, not to run
        return {"state": "stale", "changed": changed, "why": "smoke canary not run on today's code"}
    if today == canary["digest"]:
        return {"state": "current by canary", "changed": changed, "why": "smoke canary identical"}
    if kind and today_kind and kind != today_kind:
        why = (
            f"smoke canary differs, but today's ran on a CPU of kind {today_kind} and the record's on one of kind "
            f"{kind}, which round differently: run `gradalign stale` on a {kind} CPU to tell the code from the CPU"
            + (BARE if "(" not in kind else "")
        )
        return {"state": "stale", "changed": changed, "why": why}
    if kind is None and today_kind:
        why = f"smoke canary differs on this CPU kind ({today_kind}) and on every kept one (the record's names no kind)"
        return {"state": "stale", "changed": changed, "why": why}
    return {"state": "stale", "changed": changed, "why": "smoke canary differs"}


def _on_this_kind(
    record: dict, behaviour: dict[str, str], fmt: int, run: bool, digest: str, here: str, changed: list[str]
) -> dict | None:
    """`code_status` where the record's canary also ran on this machine's CPU kind (`by_cpu`, `canary_stamp.
    stamp_this_cpu`: while the record was current): today's canary on this kind is compared with that one, like
    with like. None where today's canary on this kind is neither kept nor to be run here (`code_status` then
    compares as it would without `by_cpu`). Where `run` is False and the canary would run here were it allowed (none
    kept, or only those of other named kinds), it is missing: stale, "not run" (`missing_canaries` lists it)."""
    today, today_kind = _todays(record["id"], behaviour, fmt, run, here)
    if today_kind != here:
        if not run and (today is None or today_kind is not None):
            return {"state": "stale", "changed": changed, "why": "smoke canary not run on today's code"}
        return None  # a kept canary that names no kind: never run again here (`_todays`)
    if today == digest:
        why = f"smoke canary identical on this CPU kind ({here}), where the record's code ran it too"
        return {"state": "current by canary", "changed": changed, "why": why}
    return {"state": "stale", "changed": changed, "why": f"smoke canary differs (on this CPU kind, {here})"}


def _on_named_kinds(record: dict, behaviour: dict[str, str], fmt: int, theirs: dict) -> dict | None:
    """Today's kept canaries compared with the record's on each CPU kind both ran on (`theirs`: kind to the record's
    digest, or to its canary for its own kind; a None kind is skipped). A difference on any such kind makes the
    record stale (like with like, so it is the code's); an equality on one, with none differing, makes it current
    by canary; None where no kind has both. Reads files only, so it decides on a machine of none of those kinds."""
    kept = _kept(record["id"], behaviour, fmt)[1]
    same, differ = [], []
    for name, digest in theirs.items():
        digest = digest.get("digest") if isinstance(digest, dict) else digest
        today = kept.get(name) if name else None
        if isinstance(today, dict) and isinstance(digest, str) and isinstance(today.get(str(fmt)), str):
            (same if today[str(fmt)] == digest else differ).append(name)
    if differ:
        return {"state": "stale", "why": f"smoke canary differs on a CPU of kind {differ[0]}, where the record's ran"}
    if same:
        kinds = " and ".join(same)
        why = f"smoke canary identical on a CPU of kind {kinds}, where the record's code ran it too"
        return {"state": "current by canary", "why": why}
    return None


def stale_files(record: dict) -> list[str] | None:
    """What changed in the code of a stale record (definitions, or files for a record without a behaviour
    fingerprint); [] when the record is current, by its code or by its smoke canary; None when the record
    carries no code fingerprint."""
    status = code_status(record)
    if status is None:
        return None
    return status["changed"] if status["state"] == "stale" else []


def missing_canaries(records: list[dict]) -> list[str]:
    """The ids of `records` whose code changed since they were computed and whose canary on today's code is not
    kept under `<results>/canaries/` (each would run a smoke canary wherever its status is asked: the book, the
    report). Reads files only; runs nothing."""
    missing = set()
    for record in records:
        status = code_status(record, run=False)
        if status and status["why"] == "smoke canary not run on today's code":
            missing.add(record["id"])
    return sorted(missing)
