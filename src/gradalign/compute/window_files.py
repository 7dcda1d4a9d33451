"""What a GPU window writes to its out folder (`gpu_window`): its report (`Window`, as `window.json`) and the bundles
of what is new or changed under the results store since it began (`WindowWriter`), in at most `MAX_FILES` files of at
most `MAX_FILE_BYTES` each (a window returns 8 files of 16 MiB).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from gradalign.compute.gpu_import import BENCH_FILE, RECORDS_FILE, RUNS_PREFIX, WINDOW_FILE
from gradalign.compute.window_carry import CARRY_FILES
from gradalign.compute.window_measure import throughput_by_kind
from gradalign.store.atomic import content_digest, read_json_strict, write_json_atomically

MAX_FILES = 8
MAX_FILE_BYTES = 15 * 2**20  # under the 16 MiB a window returns per file


@dataclass
class Window:
    """What a window did, written to `window.json` as it goes."""

    minutes: float
    device: str = ""
    workers: int = 1  # units trained at once (`window_pool`)
    began: str = ""  # UTC date and time the window began
    tests: dict = field(default_factory=dict)
    bench: dict = field(default_factory=dict)  # name -> its quick ratios, or the error
    bench_slot: dict = field(default_factory=dict)  # {"alone", "seconds"}: the slot ran before any worker began
    utilisation: dict = field(default_factory=dict)  # `gpu_sampler.Sampler.report`: the series, phases, means
    throughput: dict = field(default_factory=dict)  # unit kind -> its units' rates (`window_measure`)
    units: list[dict] = field(default_factory=list)  # {element, label, kind, key, seconds, hardware, status}
    records: list[str] = field(default_factory=list)  # element [preset] assembled
    stopped: str = ""  # why the window ended before its backlog did ("" : the backlog is done)
    left: list[str] = field(default_factory=list)  # experiments of the backlog still unfinished
    carried: list[str] = field(default_factory=list)  # kind/key of checkpoints an earlier window left (resumed here)
    checkpoints: list[str] = field(default_factory=list)  # kind/key of the stopped runs' carried checkpoints
    checkpoints_left: list[str] = field(default_factory=list)  # stopped runs whose checkpoints found no room

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> content digest of every JSON file under the results store."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): _file_digest(p) for p in root.rglob("*.json")}


def _file_digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


class WindowWriter:
    """Writes the window's bundles to `out`: what is new or changed under the results store since it began."""

    def __init__(self, out: Path, root: Path, before: dict[str, str], window: Window, sampler=None):
        self.out, self.root, self.before, self.window, self.sampler = out, root, before, window, sampler

    def write(self) -> None:
        if self.sampler is not None:
            self.window.utilisation = self.sampler.report()
        self.window.throughput = throughput_by_kind(self.window.units)
        runs, records = [], []
        for relative, digest in sorted(snapshot(self.root).items()):
            if self.before.get(relative) == digest:
                continue
            document = read_json_strict(self.root / relative)
            if relative.split(os.sep)[0] == "runs":
                runs.append(document)
            elif relative.split(os.sep)[0] != "bench":
                records.append(document)
        write_json_atomically(self.out / RECORDS_FILE, {"records": records})
        write_json_atomically(self.out / BENCH_FILE, {"bench": self.window.bench})
        chunks = _chunks(runs, MAX_FILES - 3 - CARRY_FILES)  # window, records, bench and the checkpoints' files
        for n, chunk in enumerate(chunks, 1):
            write_json_atomically(self.out / f"{RUNS_PREFIX}{n}.json", {"runs": chunk})
        for stale in self.out.glob(f"{RUNS_PREFIX}*.json"):
            if int(stale.stem[len(RUNS_PREFIX) :] or 0) > len(chunks):
                stale.unlink()
        report = self.window.to_dict()
        write_json_atomically(self.out / WINDOW_FILE, {**report, "digest": content_digest(report)})


def _chunks(items: list[dict], most: int) -> list[list[dict]]:
    """`items` in at most `most` lists of at most MAX_FILE_BYTES each (an item that does not fit is left out and
    stays committed in the window's checkout only)."""
    chunks, current, size = [], [], 0
    for item in items:
        length = len(json.dumps(item))
        if length > MAX_FILE_BYTES:
            continue
        if current and size + length > MAX_FILE_BYTES:
            chunks.append(current)
            current, size = [], 0
        current.append(item)
        size += length
    if current:
        chunks.append(current)
    return chunks[:most]
