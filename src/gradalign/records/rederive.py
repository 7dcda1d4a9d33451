"""Re-derive the verdicts of stored records under the current rules (`experiments.verdict`), without retraining.

A record made under earlier rules (schema 2) is first checked against its own digest: an edited record is left
alone and reported. Its claims are then re-derived from its stored per-seed metrics and its preconditions measured
from its metrics and curves (`assess`); where these do not suffice, its verdict is "inconclusive: not yet evaluated
under these rules". The metrics, curves, config and provenance are kept as computed; the record gains
`rederived` (the date, the rules, the schema it came from) and a new digest.

The verdict layer (`VERDICT_LAYER`: the rules, the budget checks, the t distribution, the reading of committed runs,
the verdict vocabulary) computes no metric or curve: it only decides claims from them, and this module re-derives
exactly what it decides. So a re-derived record's code fingerprint takes today's digests of those files (listed in
`rederived.code`), and the record is not flagged stale for them; an edit to any other file it ran (a model, a loss,
an experiment module, which do compute its numbers) still marks it stale. A record already under these rules is
assessed again too, since a precondition can read what was measured after it (the book's supervised reference,
`gradalign.experiments.reference`); it is rewritten only when its checks, preconditions, evidence or verdict change.

    python -m gradalign.records.rederive            # every record under results/ (or $GRADALIGN_RESULTS)
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

from gradalign.records.assess import assess
from gradalign.store.atomic import StoredJSONError, read_json_strict
from gradalign.elements import PARTS
from gradalign.errors import GradalignError
from gradalign.records.results import SCHEMA, ResultStore, record_digest
from gradalign.experiments.verdict import RULES


DERIVED = ("checks", "preconditions", "evidence", "verdict")
VERDICT_LAYER = (
    "experiments/verdict.py",
    "experiments/rules.py",
    "experiments/student_t.py",
    "experiments/claim_budget.py",
    "experiments/committed.py",
    "experiments/budget_rule.py",
)  # what `assess` writes; the rest is kept as computed


def rederive_file(path: Path, store: ResultStore) -> tuple[str, str | None, str]:
    """(id, the verdict before, the verdict now) of one record file, rewritten in place; raises ValueError when
    the file is not a sound record of its own schema."""
    try:
        record = read_json_strict(path)
    except StoredJSONError as err:
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(record, dict) or "digest" not in record or record_digest(record) != record["digest"]:
        raise ValueError(f"{path}: its digest does not match its content (edited); left alone")
    before = record.get("verdict", {}).get("status")
    came_from = record.get("schema")
    current = came_from == SCHEMA and record.get("rules") == RULES
    derived = {k: record.get(k) for k in DERIVED}
    for key in ("digest", "rederived"):
        record.pop(key, None)
    assess(record)
    refreshed = _refresh_verdict_layer(record)
    if current and not refreshed and all(record.get(k) == v for k, v in derived.items()):
        return record["id"], before, before  # nothing moved: the file stays as it is
    record["schema"] = SCHEMA
    record["rederived"] = {"date": _dt.date.today().isoformat(), "rules": RULES, "from_schema": came_from}
    if refreshed:
        record["rederived"]["code"] = refreshed
    written = store.save(record)
    if written != path:  # the key did not change: same id, preset and config hash
        raise ValueError(f"{path}: re-derived record would move to {written}")
    return record["id"], before, record["verdict"]["status"]


def _refresh_verdict_layer(record: dict) -> list[str]:
    """Set the record's fingerprint of the `VERDICT_LAYER` files it runs to today's (their output was just
    re-derived); the files whose digest moved, sorted."""
    from gradalign.experiments import get
    from gradalign.store.fingerprint import code_fingerprint

    stored = record.get("provenance", {}).get("code")
    if not isinstance(stored, dict):
        return []
    current = code_fingerprint(get(record["id"]).run.__module__)
    moved = sorted(f for f in VERDICT_LAYER if stored.get(f) != current.get(f))
    for name in moved:
        if name in current:
            stored[name] = current[name]
        else:
            stored.pop(name, None)
    return moved


def main(argv: list[str] | None = None) -> int:
    """0 when every record re-derived, 1 when some were skipped (each named), 2 for a store that cannot be used:
    not a folder, missing, read-only or full (one line, as the command line's errors)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gradalign.records.rederive", description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    try:
        return _rederive_all()
    except (GradalignError, OSError) as err:
        from gradalign.records.storage import os_error_line

        line = str(err) if isinstance(err, GradalignError) else os_error_line(err)
        print(f"gradalign: error: {' '.join(line.split())}", file=sys.stderr)
        return 2


def _rederive_all() -> int:
    from gradalign.records import storage

    store = storage.result_store(None)
    storage.check_results_exist(store.root)
    storage.check_folder(store.root, "results root", min_free=2**20)  # records are rewritten in place
    failures = 0
    paths = sorted(p for part in PARTS for p in store.root.glob(f"{part}/*/*.json"))  # not the bench records
    for path in paths:
        try:
            eid, before, now = rederive_file(path, store)
        except ValueError as err:  # a record that is not sound (named); a storage error stops all (main)
            print(f"skipped: {err}", file=sys.stderr)
            failures += 1
            continue
        print(f"{eid} [{path.stem.split('-')[0]}]: {before} -> {now}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
