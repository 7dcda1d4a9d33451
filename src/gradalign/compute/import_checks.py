"""What `gradalign import` checks of a window's folder before it writes anything: the folder comes back from
another machine, so every file is untrusted.

A name that becomes part of a path (a run entry's kind and key, a record's id, preset and config hash, the
window's date and digest) must match the registry or a strict pattern (`entry_names`, `record_names`,
`window_stamp`), and the path built from it must stay inside the store root (`inside`). A file must have its
shape (`window_problem`, `listing`, `bench_problem`) and a bounded size (`MAX_JSON_BYTES`); a symbolic link in
the folder is refused (`folder_files`). Each breach is a `HostileImport`: one line, exit 2, and nothing of the
folder written. (What is merely edited, a digest that does not match, is refused item by item instead: the rest
of the window is still placed; `gpu_import`.)
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from pathlib import Path

from gradalign.errors import ConfigError

MAX_JSON_BYTES = 64 * 2**20  # a window writes files of at most 15 MiB (`window_files.MAX_FILE_BYTES`)
_KEY = re.compile(r"[0-9a-f]{16}")  # `runcache.run_key`
_CONFIG_HASH = re.compile(r"[0-9a-f]{12}")  # `config.config_digest`
_DIGEST = re.compile(r"[0-9a-f]{64}")  # `atomic.content_digest`
_KIND = re.compile(r"([a-z]+)\.[a-z0-9][a-z0-9_-]*")  # `<part>.<name>`: lga.ssl, lga.shells-tuning, sgr.local
_BEGAN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:\+00:00|Z)?")  # `gpu_window._now`


class HostileImport(ConfigError):
    """A window's folder that `gradalign import` refuses whole: a name that would leave the store, a file of
    the wrong shape or size, a symbolic link, a checkpoint that inflates beyond its bound."""


def folder_files(folder: Path, names: list[str]) -> None:
    """Refuse a folder that is not one, and any symbolic link among the files `import` reads in it."""
    if not folder.is_dir():
        raise HostileImport(f"{folder} is not a folder; give the folder a gpu-window wrote")
    for name in names:
        if (folder / name).is_symlink():
            raise HostileImport(f"{folder / name} is a symbolic link; a window's files are plain files")


def read_capped(path: Path, read) -> object:
    """`read(path)` once the file is known to be a plain file under `MAX_JSON_BYTES`."""
    if path.is_symlink() or not path.is_file():
        raise HostileImport(f"{path} is not a plain file")
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise HostileImport(f"{path} holds {size} bytes, more than the {MAX_JSON_BYTES} a window's file may")
    return read(path)


def inside(root: Path, target: Path) -> Path:
    """`target`, once its normalised absolute path is known to lie under `root`'s."""
    base = Path(os.path.normpath(os.path.abspath(root)))
    where = Path(os.path.normpath(os.path.abspath(target)))
    if where != base and base not in where.parents:
        raise HostileImport(f"{target} is outside the results store {root}; refused")
    return target


def _name(value: object, pattern: re.Pattern, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise HostileImport(f"{what} {_shown(value)} is not a valid name ({pattern.pattern}); refused")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def entry_names(entry: object, where: str) -> None:
    """A run entry's kind (`<part>.<name>`, of one of the four parts) and key (16 hex digits), where the entry
    has them as strings; anything else of the entry is for `run_unit.check_entry` to refuse."""
    from gradalign.elements import PARTS

    if not isinstance(entry, dict):
        return
    if "kind" in entry:
        kind = _name(entry["kind"], _KIND, f"a run entry's kind in {where}")
        if kind.split(".")[0] not in PARTS:
            raise HostileImport(f"a run entry's kind in {where} {kind!r} names no part ({', '.join(PARTS)})")
    if "key" in entry:
        _name(entry["key"], _KEY, f"a run entry's key in {where}")


def record_names(record: object) -> None:
    """A record's id (a built experiment), preset (one that experiment defines) and config hash (12 hex)."""
    from gradalign.experiments import EXPERIMENTS

    if not isinstance(record, dict):
        return
    element_id = record.get("id")
    if not isinstance(element_id, str) or element_id not in EXPERIMENTS:
        raise HostileImport(f"a record's id {_shown(element_id)} is not a built experiment; refused")
    presets = EXPERIMENTS[element_id].presets
    if not isinstance(record.get("preset"), str) or record["preset"] not in presets:
        raise HostileImport(
            f"record {element_id}'s preset {_shown(record.get('preset'))} is not one of {', '.join(presets)}; refused"
        )
    _name(record.get("config_hash"), _CONFIG_HASH, f"record {element_id}'s config hash")


def window_stamp(began: object, digest: object) -> str:
    """The file name of a window's report, `<began>-<digest[:12]>.json`, from a checked date and digest."""
    _name(began, _BEGAN, "window.json's began")
    try:
        _dt.datetime.fromisoformat(str(began).replace("Z", "+00:00"))
    except ValueError:
        raise HostileImport(f"window.json's began {_shown(began)} is not a date; refused") from None
    _name(digest, _DIGEST, "window.json's digest")
    stamp = str(began).replace(":", "").replace("+0000", "").replace("Z", "")
    return f"{stamp}-{str(digest)[:12]}.json"


_WINDOW_FIELDS = {  # field -> (types, words): `window_files.Window` and what `import` adds
    "minutes": ((int, float), "a number"),
    "device": (str, "a string"),
    "workers": (int, "an integer"),
    "began": (str, "a string"),
    "began_from": (str, "a string"),
    "digest": (str, "a string"),
    "digest_from": (str, "a string"),
    "tests": (dict, "an object"),
    "bench": (dict, "an object"),
    "units": (list, "a list"),
    "records": (list, "a list"),
    "stopped": (str, "a string"),
    "left": (list, "a list"),
    "carried": (list, "a list"),
    "checkpoints": (list, "a list"),
    "checkpoints_left": (list, "a list"),
    "bench_slot": (dict, "an object"),
    "utilisation": (dict, "an object"),
    "throughput": (dict, "an object"),
}
MAX_PHASES, MAX_KINDS, MAX_TEXT = 64, 64, 500  # a window marks a few phases and trains a few unit kinds
_UNIT_FIELDS = {
    "element": str,
    "preset": str,
    "kind": str,
    "key": str,
    "status": str,
    "label": str,
    "git_commit": str,  # a diverged unit's (`window_pool.diverged_fields`)
    "hardware": str,
}


def window_problem(report: object) -> str | None:
    """Why `window.json` does not have a window report's shape (what the compute page and `import` read), or
    None."""
    if not isinstance(report, dict):
        return f"is not a JSON object (a {type(report).__name__})"
    missing = [name for name in ("minutes", "units") if name not in report]
    if missing:
        return f"lacks {', '.join(missing)}"
    for name, (types, words) in _WINDOW_FIELDS.items():
        if name in report and (not isinstance(report[name], types) or isinstance(report[name], bool)):
            return f"has {name} of type {type(report[name]).__name__}, expected {words}"
    for name in ("records", "left", "carried", "checkpoints", "checkpoints_left"):
        if not all(isinstance(item, str) for item in report.get(name, [])):
            return f"has {name} that is not a list of strings"
    for n, unit in enumerate(report["units"]):
        problem = _unit_problem(unit)
        if problem:
            return f"has units[{n}] that {problem}"
    return _utilisation_problem(report.get("utilisation", {})) or _throughput_problem(report.get("throughput", {}))


def _utilisation_problem(utilisation: dict) -> str | None:
    """Why the sampled series (`gpu_sampler.Sampler.report`) is malformed or unbounded, or None."""
    from gradalign.compute.gpu_sampler import MAX_SAMPLES

    if not utilisation:
        return None
    for name in ("source", "note"):
        if not isinstance(utilisation.get(name, ""), str) or len(utilisation.get(name, "")) > MAX_TEXT:
            return f"has utilisation {name} that is not a string of at most {MAX_TEXT} characters"
    samples, phases = utilisation.get("samples", []), utilisation.get("phases", [])
    if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
        return f"has a utilisation series that is not a list of at most {MAX_SAMPLES} samples"
    for sample in samples:
        if not (isinstance(sample, list) and len(sample) == 3 and all(map(_number, sample))):
            return "has a utilisation sample that is not [seconds, utilisation %, memory MiB]"
        if not (0 <= sample[1] <= 100 and sample[2] >= 0):
            return f"has a utilisation sample out of range: {_shown(sample)}"
    if not isinstance(phases, list) or len(phases) > MAX_PHASES:
        return f"has utilisation phases that are not a list of at most {MAX_PHASES}"
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _number(p[1]) for p in phases):
        return "has a utilisation phase that is not [name, seconds]"
    summary = utilisation.get("summary", {})
    if not isinstance(utilisation.get("truncated", False), bool) or not isinstance(summary, dict):
        return "has utilisation truncated that is not a boolean, or a summary that is not an object"
    if len(str(summary)) > 20_000:
        return "has a utilisation summary larger than a window's phases make"
    return None


def _throughput_problem(throughput: dict) -> str | None:
    """Why the per-kind throughput summary (`window_measure.throughput_by_kind`) is malformed, or None."""
    if len(throughput) > MAX_KINDS:
        return f"has throughput for more than {MAX_KINDS} unit kinds"
    for kind, rates in throughput.items():
        if not _KIND.fullmatch(kind) or not isinstance(rates, dict):
            return f"has throughput {_shown(kind)} that is not a unit kind's object"
        if not all(_number(v) for k, v in rates.items() if k != "what") or len(str(rates.get("what", ""))) > MAX_TEXT:
            return f"has throughput of {kind} that is not numbers and a short description"
    return None


def _unit_problem(unit: object) -> str | None:
    if not isinstance(unit, dict):
        return f"is not an object (a {type(unit).__name__})"
    for name, types in _UNIT_FIELDS.items():
        if name in unit and not isinstance(unit[name], types):
            return f"has {name} that is not a string"
    if unit.get("status") == "finished" and not {"element", "preset", "seconds"} <= set(unit):
        return "is finished without its element, preset and seconds"
    if "seconds" in unit and not _number(unit["seconds"]):
        return "has seconds that are not a number"
    if "throughput" in unit:
        rate = unit["throughput"]
        if not (isinstance(rate, dict) and _number(rate.get("per_s")) and isinstance(rate.get("what", ""), str)):
            return "has throughput that is not {per_s: a number, what: a string}"
        if len(rate) > 2 or len(rate.get("what", "")) > MAX_TEXT:
            return "has throughput with more than its rate and a short description"
    if unit.get("progress") is not None:
        progress = unit["progress"]
        if not (isinstance(progress, list) and len(progress) == 2 and all(map(_number, progress)) and progress[0]):
            return "has progress that is not [steps done (> 0), steps in all]"
    return None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def listing(document: object, field: str, name: str) -> list:
    """The list under `field` of a window's `name` file (`{"runs": [...]}`, `{"records": [...]}`); a
    HostileImport when the file has another shape."""
    if not isinstance(document, dict) or not isinstance(document.get(field), list):
        got = type(document.get(field) if isinstance(document, dict) else document).__name__
        raise HostileImport(f"{name} must be an object whose {field!r} is a list (got {got}); refused")
    return document[field]


def bench_problem(document: object) -> str | None:
    """Why `bench.json` is not `{"bench": {name: record or {"error": ...}}}`, or None."""
    if not isinstance(document, dict) or not isinstance(document.get("bench"), dict):
        return "must be an object whose 'bench' is an object of records"
    for name, record in document["bench"].items():
        if not isinstance(record, dict):
            return f"has bench {name!r} that is not an object"
        if not isinstance(record.get("measurement", {}), dict):
            return f"has bench {name!r} whose measurement is not an object"
    return None


def window_problem_line(problem: str) -> HostileImport:
    return HostileImport(f"window.json {problem}; refused")
