"""`gradalign import DIR`: the files a `gradalign gpu-window` wrote, checked and placed in the results store.

Every run entry is checked as `run_unit.check_entry` checks a committed entry (key, spec, digest), every record
as the results store reads one (in a scratch store: schema, key, digest, verdict), and each is placed where it
belongs (`<results>/runs/<kind>/<key>.json`, `<results>/<part>/<id>/<preset>-<hash>.json`); what does not check
is refused and reported, never placed. The checkpoints of runs the window's box stopped go to the checkout's
git-ignored `window-carry/` (`window_carry`), for the next window to resume. The benchmark records of the window's
clean slot are shown, and each CUDA one whose digest checks is kept as
`<results>/bench/<name>/gpu-<device>-quick.json` (`window_measure.gpu_bench_file`; quick sizes never replace a
full-size `cuda.json`). The command says what it added; commit it as produced, never edited
by hand. The kept reports are read back here too (`stored_windows`, `diverged_before`): for the compute page, and
so that a later window does not retrain a unit an earlier one saw diverge, unless its divergence is now its result
(`retried`: the local-BP tables' runs).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradalign.store.atomic import StoredJSONError, content_digest, read_json_strict, write_json_atomically
from gradalign.errors import ConfigError
from gradalign.compute.import_checks import (
    bench_problem,
    entry_names,
    record_names,
    window_problem,
    window_problem_line,
)
from gradalign.compute.window_carry import CARRY_FOLDER, carry_files, place_checkpoints, prune, read_checkpoints
from gradalign.compute.window_measure import gpu_bench_file

WINDOW_FILE, RECORDS_FILE, BENCH_FILE, RUNS_PREFIX = "window.json", "records.json", "bench.json", "runs-"
WINDOWS = "windows"  # the results store's folder of window reports (`window_report` shows them on the compute page)


@dataclass
class Imported:
    added_runs: list[str] = field(default_factory=list)
    added_records: list[str] = field(default_factory=list)
    added_windows: list[str] = field(default_factory=list)
    unchanged: int = 0
    refused: list[str] = field(default_factory=list)  # what did not check, and why
    bench: list[str] = field(default_factory=list)
    added_bench: list[str] = field(default_factory=list)  # <name>/gpu-<device>-quick.json placed under bench/
    window: dict = field(default_factory=dict)
    checkpoints: list[str] = field(default_factory=list)  # kind/key placed in the carry folder (`window_carry`)
    reassessed: list[str] = field(default_factory=list)  # records assessed again with the runs placed (`_reassess`)
    kept_diverged: list[str] = field(default_factory=list)  # "study: label" of a study's runs that diverged there

    def lines(self) -> list[str]:
        out = [
            f"imported {len(self.added_runs)} run entr{'y' if len(self.added_runs) == 1 else 'ies'} and "
            f"{len(self.added_records)} record(s); {self.unchanged} already here; {len(self.refused)} refused"
        ]
        out += [f"  run {name}" for name in self.added_runs]
        out += [f"  record {name}" for name in self.added_records]
        out += [f"  report of the {name}" for name in self.added_windows]
        out += [f"  benchmark record bench/{name}" for name in self.added_bench]
        out += [
            f"  checkpoint {name} (resumes in the next window that carries window-carry/)" for name in self.checkpoints
        ]
        out += [f"  assessed again: {line}" for line in self.reassessed]
        out += [f"  diverged, kept as the study's result: {line}" for line in self.kept_diverged]
        out += [f"  refused: {why}" for why in self.refused]
        out += [f"  bench --quick: {line}" for line in self.bench]
        if self.window.get("stopped"):
            out.append(
                f"  the window stopped at {self.window['stopped']}; still to do: {', '.join(self.window['left'])}"
            )
        return out


def import_window(folder: str | Path, root: str | Path | None = None) -> Imported:
    """Check every digest of a window's files in `folder` and place its entries and records in the results
    store (`root`, default the checkout's `results/`); what does not check is refused and reported. A folder
    that breaks the boundary (`import_checks`: a name that would leave the store, a malformed file, a symbolic
    link, a gzip bomb) is a `HostileImport`, raised before anything is written."""
    from gradalign.compute.import_checks import HostileImport, folder_files, inside, listing
    from gradalign.records.results import ResultStore
    from gradalign.store.run_unit import check_entry, entry_path

    folder = Path(folder)
    runs_files = sorted(folder.glob(f"{RUNS_PREFIX}*.json")) if folder.is_dir() else []
    tars = carry_files(folder)
    folder_files(folder, [WINDOW_FILE, RECORDS_FILE, BENCH_FILE, *(p.name for p in runs_files + tars)])
    if not (folder / WINDOW_FILE).is_file():
        raise HostileImport(f"{folder} holds no {WINDOW_FILE}: not the folder a gpu-window wrote")
    store = ResultStore(root)
    imported = Imported()
    refused = imported.refused
    # First every file is read and checked; nothing is written until all of it passed the boundary.
    window = _read(folder / WINDOW_FILE, refused)
    if window is not None:
        problem = window_problem(window)
        if problem:
            raise window_problem_line(problem)
    imported.window = window or {}
    runs, dates = [], []
    for path in runs_files:
        document = _read(path, refused)
        for entry in listing(document, "runs", path.name) if document is not None else []:
            entry_names(entry, path.name)
            try:
                entry = check_entry(entry)
            except StoredJSONError as err:
                refused.append(f"a run entry in {path.name} {err}")
                continue
            target = inside(store.root, entry_path(store.root / "runs", entry["kind"], entry["key"]))
            runs.append((target, entry))
            dates.append(str(entry.get("provenance", {}).get("date", "")))
    records = []
    document = _read(folder / RECORDS_FILE, refused)
    for record in listing(document, "records", RECORDS_FILE) if document is not None else []:
        record_names(record)
        name = _checked_record(record, refused)
        if name:
            target = inside(store.root, store.path(record["id"], record["preset"], record["config_hash"]))
            records.append((target, record, name))
    bench = _read(folder / BENCH_FILE, refused)
    if bench is not None and bench_problem(bench):
        raise HostileImport(f"{BENCH_FILE} {bench_problem(bench)}; refused")
    bench_records = []
    for name, record in (bench or {}).get("bench", {}).items():
        where = gpu_bench_file(name, record)
        if where and record.get("digest") == content_digest(record):
            bench_records.append((inside(store.root, store.root / "bench" / where), record, where))
    checkpoints = []
    for tar_file in (path for path in tars if path.is_file()):
        good, refused_checkpoints = read_checkpoints(tar_file)
        checkpoints += good
        refused += refused_checkpoints
    report = _window_report(imported, store.root / WINDOWS, min(filter(None, dates), default=""))
    # Then what checked is placed, in a store that is a folder, writable, with room (as `run` checks it).
    from gradalign.records.storage import check_folder

    check_folder(store.root, "results root")
    for target, entry in runs:
        _place_run(target, entry, f"{entry['kind']}/{entry['key']}", imported)
    for target, record, name in records:
        _place(target, record, name, imported, imported.added_records)
    for target, record, name in bench_records:
        _place(target, record, name, imported, imported.added_bench)
    carry = store.root.parent / CARRY_FOLDER
    imported.checkpoints += place_checkpoints(checkpoints, carry, store.root / "runs") if checkpoints else []
    if not checkpoints:
        prune(carry, store.root / "runs")
    if report is not None and (runs or records or checkpoints or not refused):  # nothing valid: no report
        _place(*report, imported, imported.added_windows)
    for name, record in (bench or {}).get("bench", {}).items():
        imported.bench.append(_bench_line(name, record))
    _keep_study_divergences(imported.window.get("units", []), store.root, imported)
    _reassess(store, imported)
    return imported


def _keep_study_divergences(rows: list[dict], root: Path, imported: Imported) -> None:
    """The runs of a study that ranks its runs (`diverged_runs.STUDIES`: a tuning, the λ study) that diverged in the
    window, kept in the study's `diverged.json` as `gradalign sweep` keeps them, with the commit and hardware the
    window names: the study ranks them, and nothing trains them again (here, an hour each on two cores). A run
    committed here is the study's result and is kept as it is; the label is the study's own, and the window's text
    (why, commit, hardware) is kept only in the shape a run's provenance has. What cannot be kept is refused and
    reported, never a reason to stop the import."""
    import re
    from types import SimpleNamespace

    from gradalign.compute.import_checks import _KEY, _KIND, MAX_TEXT
    from gradalign.config import PRESETS
    from gradalign.errors import GradalignError
    from gradalign.experiments import get
    from gradalign.experiments.diverged_runs import STUDIES, diverged, keep_diverged
    from gradalign.experiments.units import units_of
    from gradalign.store.run_unit import read_entry

    commit = re.compile(r"[0-9a-f]{40}(\+dirty)?|unknown")
    rows = [
        r
        for r in rows
        if str(r.get("status", "")).startswith("diverged: ")
        and _KIND.fullmatch(str(r.get("kind", "")))
        and _KEY.fullmatch(str(r.get("key", "")))
    ]
    for study in STUDIES if rows else ():
        presets = {"cpu"} | {r["preset"] for r in rows if r.get("element") == study and r.get("preset") in PRESETS}
        units = {(u.kind, u.key): u for p in sorted(presets) for u in units_of(study, get(study).resolve(p, {}))}
        for row in (r for r in rows if (r["kind"], r["key"]) in units):
            unit = units[row["kind"], row["key"]]
            why = row["status"].removeprefix("diverged: ")[:MAX_TEXT]
            made = {"git_commit": str(row.get("git_commit", "unknown")), "hardware": str(row.get("hardware", ""))}
            if not commit.fullmatch(made["git_commit"]) or not 0 < len(made["hardware"]) <= MAX_TEXT:
                imported.refused.append(f"{study}: {unit.label} diverged, without the commit and hardware it ran on")
                continue
            try:
                if unit.key in diverged(study, root) or read_entry(root / "runs", unit) is not None:
                    continue  # kept already, or trained here: the study reads that
                keep_diverged(study, SimpleNamespace(label=unit.label, key=unit.key), why, None, root, made)
            except (GradalignError, OSError) as err:
                imported.refused.append(f"{study}: {unit.label} diverged, not kept: {err}")
                continue
            imported.kept_diverged.append(f"{study}: {unit.label}")


def _reassess(store, imported: Imported) -> None:
    """The stored records whose finished-learning precondition reads committed runs of other budgets (the budget
    checks, `pilots.BUDGET_CHECKS`), assessed again once a window placed local-BP runs (`rederive`)."""
    from gradalign.compute.pilots import BUDGET_CHECKS
    from gradalign.records.rederive import rederive_file

    if not any(name.startswith("sgr.local/") for name in imported.added_runs):
        return
    for element_id in BUDGET_CHECKS:
        for path in sorted(store.root.glob(f"*/{element_id}/*.json")):
            try:
                _, before, now = rederive_file(path, store)
            except ValueError as err:
                imported.refused.append(str(err))
                continue
            imported.reassessed.append(
                f"{element_id} [{path.stem}]: {before}" + (f" -> {now}" if now != before else "")
            )


def _window_report(imported: Imported, folder: Path, first_run: str) -> tuple[Path, dict, str] | None:
    """(where, report, name) of the window's report, to keep as `<results>/windows/<began>-<digest>.json` when its
    digest checks: what ran where, each unit's wall time on the GPU, the CUDA tests' outcome. A report from before
    windows carried a digest and a date (the first two, 2026-11-26) is kept with a digest computed here
    (`digest_from: import`) and the date of its first finished run (`first_run`, `began_from`). A report that says
    not when it began is not kept (refused); one whose date or digest is not a clean name is a `HostileImport`."""
    from gradalign.compute.import_checks import inside, window_stamp

    report = imported.window
    if not report:
        return None
    if "digest" not in report:
        report = {**report, "digest_from": "import"}
        if not report.get("began") and first_run:
            report.update(began=first_run, began_from="its first finished run")
        report["digest"] = content_digest(report)
    elif report["digest"] != content_digest(report):
        imported.refused.append(f"{WINDOW_FILE}: its digest does not match its content")
        return None
    if not report.get("began"):
        imported.refused.append(f"{WINDOW_FILE}: says not when the window began (no date, no finished run); not kept")
        return None
    name = window_stamp(report["began"], report["digest"])
    return inside(folder, folder / name), report, f"window {name.rsplit('-', 1)[0]}"


def _read(path: Path, refused: list[str]) -> Any:
    from gradalign.compute.import_checks import HostileImport, read_capped

    if not path.exists() and not path.is_symlink():
        return None
    try:
        document = read_capped(path, read_json_strict)
    except StoredJSONError as err:
        refused.append(f"{path.name} {err}")
        return None
    if document is None:  # JSON null: the shape of none of a window's files
        raise HostileImport(f"{path.name} holds null, not a window's file; refused")
    return document


def _place(target: Path, document: dict, name: str, imported: Imported, added: list[str]) -> None:
    if target.exists():
        try:
            if read_json_strict(target) == document:
                imported.unchanged += 1
                return
        except StoredJSONError:
            pass  # a damaged file where a good one goes: replaced
    write_json_atomically(target, document)
    added.append(name)


def _place_run(target: Path, entry: dict, name: str, imported: Imported) -> None:
    """A run entry, where none that checks is committed under its key. A committed entry is kept: a later window
    that read the run from its machine's run cache sends it back without where it trained (windows 5 and 6,
    2026-11-27: the second overwrote the first's H100 provenance with "unknown"); one whose value differs is
    refused and named, so that the committed run stays the one every record read."""
    from gradalign.store.run_unit import check_entry

    if target.exists():
        try:
            committed = check_entry(read_json_strict(target))
        except StoredJSONError:
            committed = None  # a damaged file where a good one goes: replaced
        if committed is not None:
            if committed["value"] != entry["value"]:
                imported.refused.append(f"run {name}: another value is committed under its key (kept)")
            else:
                imported.unchanged += 1
            return
    write_json_atomically(target, entry)
    imported.added_runs.append(name)


def _checked_record(record: object, refused: list[str]) -> str | None:
    """`id [preset]` when `record` reads back as a usable record (the results store's own checks, in a scratch
    store), else None with the reason in `refused`."""
    import warnings

    from gradalign.experiments import get
    from gradalign.records.results import ResultStore

    if not isinstance(record, dict) or not {"id", "preset", "config_hash", "experiment_version"} <= set(record):
        refused.append("a record without its id, preset, config hash and version")
        return None
    name = f"{record['id']} [{record['preset']}]"
    try:
        get(record["id"])
    except ConfigError as err:
        refused.append(f"record {name}: {err}")
        return None
    with tempfile.TemporaryDirectory() as scratch, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = ResultStore(scratch)
        try:
            write_json_atomically(store.path(record["id"], record["preset"], str(record["config_hash"])), record)
            loaded = store.load(record["id"], record["preset"], record["config_hash"], record["experiment_version"])
        except (OSError, TypeError, ValueError) as err:
            loaded, caught = None, [f"{type(err).__name__}: {err}"]
    if loaded is None:
        why = "; ".join(str(getattr(w, "message", w)) for w in caught) or "does not check"
        refused.append(f"record {name}: {why}")
        return None
    return name


def _bench_line(name: str, record: object) -> str:
    if not isinstance(record, dict) or "error" in record:
        return f"{name}: {record.get('error') if isinstance(record, dict) else 'not a record'}"
    if record.get("digest") != content_digest(record):
        return f"{name}: refused (its digest does not match its content)"
    measured = record.get("measurement", {})
    ratios = {k: v for k, v in measured.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    shown = ", ".join(f"{k} {v:.3g}" for k, v in list(ratios.items())[:4])
    kept = f"kept as bench/{gpu_bench_file(name, record)}" if gpu_bench_file(name, record) else "not stored"
    return f"{name} on {record.get('device_kind')}: {shown or 'no ratios'} (quick sizes: {kept})"


def stored_windows(root: Path) -> tuple[list[dict], list[str]]:
    """The window reports under `root/windows/` in date order, and one line for each that does not check."""
    reports, bad = [], []
    for path in sorted((root / "windows").glob("*.json")) if (root / "windows").is_dir() else []:
        try:
            report = read_json_strict(path)
        except StoredJSONError as err:
            bad.append(f"{path.name} {err}")
            continue
        if not isinstance(report, dict) or report.get("digest") != content_digest(report):
            bad.append(f"{path.name}: its digest does not match its content (edited?); not shown")
            continue
        reports.append(report)
    return sorted(reports, key=lambda r: str(r.get("began", ""))), bad


def retried(unit) -> bool:
    """A local-BP table's run, whose divergence is now its result (`training.local.divergence_is_a_result`): an
    earlier window's divergence of it, under the old stop rule, does not keep it from training."""
    from gradalign.training.local import RUN_KIND, divergence_is_a_result

    return unit.kind == RUN_KIND and divergence_is_a_result(unit.spec)


def left_diverged(unit, diverged: set[tuple[str, str]]) -> bool:
    """Whether a window leaves `unit` alone: an earlier window saw it diverge (`diverged`, from `diverged_before`)
    and its divergence still stops its experiment (not `retried`)."""
    return (unit.kind, unit.key) in diverged and not retried(unit)


def diverged_before(root: Path) -> set[tuple[str, str]]:
    """(kind, key) of every unit that an earlier window reported diverged, from the reports under `root/windows/`
    that check: a window does not train them again (except where `retried`), and leaves their experiments to a
    sitting or a decision."""
    return {
        (unit["kind"], unit["key"])
        for report in stored_windows(root)[0]
        for unit in report.get("units", [])
        if str(unit.get("status", "")).startswith("diverged") and "key" in unit and "kind" in unit
    }
