"""Checkpoints carried from one GPU window to the next, so that a unit longer than one window still finishes.

A window's time box stops a run at a checkpoint (`training.loop`), kept in that machine's run cache, which the next
window (a fresh machine) does not have. So a window bundles the checkpoints of its stopped units into files of its
`--out` (`carry_files`, at most `window_files.MAX_FILE_BYTES` each); `gradalign import` checks each (its name, and the
header and SHA-256 of the one checkpoint format, by the loader's own `training.checkpoint.checkpoint_problem`) and
places it in the checkout's `window-carry/` folder (git-ignored: weights are never committed); the next window is
started with that folder carried beside the checkout, copies each checkpoint into its run cache, and the run resumes
where the last window stopped it. Loading checks the checkpoint again (digest, and the fingerprint of its run), so a
damaged or foreign one starts its run over, never corrupts it. A carried checkpoint whose run has since been
committed is deleted on import.

Each checkpoint travels gzip-compressed (`<key>.pt.gz`), in up to `CARRY_FILES` tar files (`carry_files`): one
VGG-57 checkpoint of Table 7 at width ×0.125 is 15.2 MiB, over a window's per-file limit of 15 MiB, and 13.9 MiB
compressed; two windows on 2026-11-27 left such checkpoints behind.
"""

from __future__ import annotations

import gzip
import io
import re
import tarfile
import zlib
from pathlib import Path

from gradalign.store.atomic import write_atomically
from gradalign.training.checkpoint import checkpoint_problem

CARRY_FILE = "checkpoints.tar"  # the first; then checkpoints-2.tar ... (`carry_files`)
CARRY_FILES = 3  # of a window's 8 files (`window_files.MAX_FILES`)
CARRY_FOLDER = "window-carry"  # beside results/ in the checkout; the device call carries it (README, GPU windows)
_MEMBER = re.compile(r"runs/([A-Za-z0-9_][A-Za-z0-9_.-]*)/([0-9a-f]{16})\.pt(\.gz)?")


def checkpoint_path(root: Path, kind: str, key: str) -> Path:
    """Where a run's in-progress checkpoint lives under a run cache (or carry folder) `root` (`runcache`)."""
    return root / "runs" / kind / f"{key}.pt"


def carry_files(folder: Path, count: int = CARRY_FILES) -> list[Path]:
    """The tar files a window writes its checkpoints to in `folder`: checkpoints.tar, checkpoints-2.tar, ..."""
    stem = CARRY_FILE.removesuffix(".tar")
    return [folder / (CARRY_FILE if n == 1 else f"{stem}-{n}.tar") for n in range(1, count + 1)]


def bundle(
    stopped: list[tuple[str, str]], cache: Path, out_files: list[Path], limit: int
) -> tuple[list[str], list[str]]:
    """Write the checkpoints of `stopped` ((kind, key) of runs not committed) found in the run cache `cache`,
    each gzip-compressed, into the tar files `out_files`, at most `limit` bytes each, in order (a checkpoint goes in
    the first file with room); return (`kind/key` of each carried, of each that found no room). A file with no
    checkpoint is not written."""
    bins: list[list[tuple[str, bytes]]] = [[] for _ in out_files]
    sizes = [0] * len(out_files)
    carried, left = [], []
    for kind, key in stopped:
        path = checkpoint_path(cache, kind, key)
        if not path.is_file():
            continue
        packed = gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
        size = len(packed) + 1024  # its tar header and padding
        room = next((n for n, used in enumerate(sizes) if used + size <= limit - 10240), None)  # end-of-tar blocks
        if room is None:
            left.append(f"{kind}/{key}")
            continue
        bins[room].append((f"runs/{kind}/{key}.pt.gz", packed))
        sizes[room] += size
        carried.append(f"{kind}/{key}")
    for out_file, members in zip(out_files, bins):
        if not members:
            out_file.unlink(missing_ok=True)
            continue

        def write(handle, members=members) -> None:
            with tarfile.open(fileobj=handle, mode="w") as tar:
                for name, packed in members:
                    info = tarfile.TarInfo(name)
                    info.size = len(packed)
                    tar.addfile(info, io.BytesIO(packed))

        write_atomically(out_file, write, binary=True)
    return carried, left


MAX_MEMBER_BYTES = 64 * 2**20  # a member as stored in the tar (a window's file is at most 15 MiB)
MAX_CHECKPOINT_BYTES = 512 * 2**20  # a checkpoint inflated (Table 7's VGG-57 at width x0.125: 15.2 MiB)


def read_checkpoints(tar_file: Path) -> tuple[list[tuple[str, str, bytes]], list[str]]:
    """((kind, key, bytes) of each checkpoint of a window's `tar_file` that checks, why each other member was
    refused). A member beyond `MAX_MEMBER_BYTES`, or that inflates beyond `MAX_CHECKPOINT_BYTES` (a gzip bomb), is
    a `HostileImport`, raised while it is read, before it is inflated in memory."""
    from gradalign.compute.import_checks import HostileImport

    good, refused = [], []
    try:
        with tarfile.open(tar_file) as tar:
            for member in tar.getmembers():
                found = _MEMBER.fullmatch(member.name)
                if not member.isfile() or not found:
                    refused.append(f"{tar_file.name}: {member.name!r} is not a run checkpoint's name")
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise HostileImport(
                        f"{tar_file.name}: {member.name} holds {member.size} bytes, over {MAX_MEMBER_BYTES}; refused"
                    )
                raw = tar.extractfile(member).read(MAX_MEMBER_BYTES + 1)
                try:
                    raw = _inflate(raw, MAX_CHECKPOINT_BYTES) if found[3] else raw  # an older window's: raw
                except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
                    refused.append(f"{tar_file.name}: checkpoint {member.name} is not readable gzip ({err})")
                    continue
                if raw is None:
                    raise HostileImport(
                        f"{tar_file.name}: {member.name} inflates beyond {MAX_CHECKPOINT_BYTES} bytes (a gzip bomb?); "
                        "refused"
                    )
                problem = checkpoint_problem(raw)
                if problem:
                    refused.append(f"{tar_file.name}: checkpoint {member.name} {problem}")
                    continue
                good.append((found[1], found[2], raw))
    except tarfile.TarError as err:
        refused.append(f"{tar_file.name} is not a readable tar file ({err})")
    return good, refused


def _inflate(packed: bytes, limit: int) -> bytes | None:
    """The gzip stream(s) of `packed` inflated, or None as soon as they would pass `limit` bytes."""
    out, rest = bytearray(), packed
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        chunk = inflater.decompress(rest, limit + 1 - len(out))
        out += chunk
        if len(out) > limit:
            return None
        if inflater.unconsumed_tail:  # stopped by the bound, not by the end of the stream
            return None
        if not inflater.eof:
            raise EOFError("the gzip stream is cut short")
        rest = inflater.unused_data
    return bytes(out)


def place_checkpoints(checkpoints: list[tuple[str, str, bytes]], carry: Path, committed: Path) -> list[str]:
    """Write each (kind, key, bytes) in the carry folder unless its run is committed under `committed` by now;
    then delete carried checkpoints of committed runs. Returns `kind/key` of each placed."""
    placed = []
    for kind, key, raw in checkpoints:
        if (committed / kind / f"{key}.json").exists():
            continue
        write_atomically(checkpoint_path(carry, kind, key), lambda handle, raw=raw: handle.write(raw), binary=True)
        placed.append(f"{kind}/{key}")
    prune(carry, committed)
    return placed


def place(tar_file: Path, carry: Path, committed: Path) -> tuple[list[str], list[str]]:
    """Each checkpoint of a window's `tar_file` that checks, placed in the carry folder unless its run is committed
    under `committed` (`<results>/runs`) by now; then carried checkpoints of committed runs are deleted.
    Returns (`kind/key` placed, why each refused member was refused)."""
    good, refused = read_checkpoints(tar_file)
    return place_checkpoints(good, carry, committed), refused


def prune(carry: Path, committed: Path) -> list[str]:
    """Delete carried checkpoints whose runs are committed; return `kind/key` of each."""
    gone = []
    for path in sorted(carry.glob("runs/*/*.pt")):
        if (committed / path.parent.name / f"{path.stem}.json").exists():
            path.unlink()
            gone.append(f"{path.parent.name}/{path.stem}")
    return gone


def seed(carry: Path, cache: Path, committed: Path) -> list[str]:
    """Copy each carried checkpoint into the run cache `cache`, where its run is neither committed nor already
    checkpointed there; return `kind/key` of each (the window's `carried`)."""
    seeded = []
    for path in sorted(carry.glob("runs/*/*.pt")):
        kind, key = path.parent.name, path.stem
        target = checkpoint_path(cache, kind, key)
        if not _MEMBER.fullmatch(f"runs/{kind}/{key}.pt") or target.exists():
            continue
        if (committed / kind / f"{key}.json").exists():
            continue
        raw = path.read_bytes()
        write_atomically(target, lambda handle, raw=raw: handle.write(raw), binary=True)
        seeded.append(f"{kind}/{key}")
    return seeded


def carry_stopped(backlog, results: Path, out_files: list[Path], limit: int) -> tuple[list[str], list[str]]:
    """The checkpoints of the backlog's ((element id, preset, overrides), ...) runs not committed under `results`,
    bundled into `out_files` for the next window: (carried, found no room) as `bundle`."""
    from gradalign.errors import ConfigError
    from gradalign.experiments import get
    from gradalign.experiments.units import UNITS, units_of
    from gradalign.store.run_unit import read_entry
    from gradalign.store.runcache import cache_root

    stopped = []
    for element_id, preset, overrides in backlog:
        try:
            units = units_of(element_id, get(element_id).resolve(preset, overrides)) if element_id in UNITS else []
        except ConfigError:
            continue
        stopped += [(u.kind, u.key) for u in units if read_entry(results / "runs", u) is None]
    return bundle(list(dict.fromkeys(stopped)), cache_root(), out_files, limit)
