"""The results store: one JSON record per (experiment id, preset, config hash), verified on every read.

Layout: `<root>/<part>/<id>/<preset>-<hash>.json`, root = `$GRADALIGN_RESULTS` or `results/` of the
checkout. The hash covers the resolved config and the experiment's hand-bumped version, so a record
is reused only for exactly the computation it describes. Writes are atomic and strict JSON (no NaN).
A record carries a digest of its content, its verdict must follow from its checks and scope, and its
checks from its metrics (`recheck`), so an edited record is caught. A record that fails any check (it does
not parse, is cut short, has another schema or key, a config that does not hash to its key, an edited
verdict, checks or content) is reported with a `RecordWarning` and treated as missing, so the caller
recomputes it; reports skip it silently.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Iterator

from gradalign.store.atomic import StoredJSONError, content_digest, read_json_strict, write_json_atomically
from gradalign.config import config_digest
from gradalign.store.schema import record_problem
from gradalign.experiments.verdict import EVIDENCE, RULES, SCOPES, derive_verdict

SCHEMA = 3  # 3: evidence, preconditions and the verdict rules they were derived under (`gradalign.experiments.verdict`)
REQUIRED = (
    "schema",
    "id",
    "part",
    "preset",
    "config",
    "config_hash",
    "experiment_version",
    "metrics",
    "curves",
    "checks",
    "preconditions",
    "evidence",
    "rules",
    "scope",
    "verdict",
    "provenance",
    "digest",
)


class RecordWarning(UserWarning):
    """A stored record was unusable and will be recomputed."""


warnings.simplefilter("always", RecordWarning)


def part_of(element_id: str) -> str:
    return element_id.split(".", 1)[0]


def record_digest(record: dict) -> str:
    """sha256 (hex) of the record's canonical strict JSON without its "digest" key."""
    return content_digest(record)


class ResultStore:
    def __init__(self, root: str | Path | None = None):
        from gradalign.store.store_root import results_root

        self.root = results_root(root)

    def path(self, element_id: str, preset: str, digest: str) -> Path:
        return self.root / part_of(element_id) / element_id / f"{preset}-{digest}.json"

    def load(self, element_id: str, preset: str, digest: str, version: int) -> dict | None:
        """The stored record for this exact key, or None (missing or unusable, reported)."""
        path = self.path(element_id, preset, digest)
        if not path.exists():
            return None
        try:
            record = read_json_strict(path)
        except StoredJSONError as err:
            return self._reject(path, str(err))
        key = {"id": element_id, "preset": preset, "config_hash": digest, "experiment_version": version}
        problem = _shape_problem(record) or _key_problem(record, key) or _content_problem(record)
        return self._reject(path, problem) if problem else record

    def save(self, record: dict) -> Path:
        """Write `record` (its digest added or replaced); a NaN anywhere raises before any file is touched."""
        digest = record_digest(record)
        problem = _shape_problem({**record, "digest": digest}) or _content_problem({**record, "digest": digest})
        if problem:
            raise ValueError(f"refusing to save record {record.get('id')!r}: it {problem}")
        record["digest"] = digest
        return write_json_atomically(self.path(record["id"], record["preset"], record["config_hash"]), record)

    def files(self, element_id: str) -> list[Path]:
        folder = self.root / part_of(element_id) / element_id
        return sorted(folder.glob("*.json")) if folder.is_dir() else []

    def records(self, element_id: str) -> Iterator[dict]:
        """Every sound record stored for an id (any preset or hash), for reports; unusable ones are skipped."""
        for path in self.files(element_id):
            try:
                record = read_json_strict(path)
            except StoredJSONError:
                continue
            if not (_shape_problem(record) or _content_problem(record)) and record["id"] == element_id:
                yield record

    @staticmethod
    def _reject(path: Path, reason: str) -> None:
        warnings.warn(f"ignoring stored record {path}: {reason}; it will be recomputed", RecordWarning, stacklevel=3)
        return None


def _shape_problem(record: object) -> str | None:
    """Why `record` is not a schema-2 record at all, or None."""
    if not isinstance(record, dict):
        return f"is not a JSON object (a {type(record).__name__})"
    if "schema" in record and record["schema"] != SCHEMA:
        return f"has schema {record['schema']!r}, expected {SCHEMA}"
    missing = [key for key in REQUIRED if key not in record]
    return f"lacks {', '.join(missing)}" if missing else record_problem(record)  # fields and types: schema.py


def _key_problem(record: dict, key: dict) -> str | None:
    """Why `record` is not the one stored under `key` (id, preset, config_hash, experiment_version), or None."""
    for name, value in key.items():
        if record[name] != value:
            return f"has {name} {record[name]!r}, expected {value!r}"
    return None


def _content_problem(record: dict) -> str | None:
    """Why a record's content contradicts itself or was edited, or None."""
    if record["part"] != part_of(str(record["id"])):
        return f"has part {record['part']!r}, expected {part_of(str(record['id']))!r}"
    if (
        not isinstance(record["config"], dict)
        or config_digest(record["config"], record["experiment_version"]) != record["config_hash"]
    ):
        return "has a config that does not hash to its key"
    for key in ("checks", "targets", "preconditions"):
        checks = record.get(key, {})
        if not isinstance(checks, dict) or not all(
            isinstance(c, dict)
            and isinstance(c.get("passed"), bool)
            and isinstance(c.get("within_noise", False), bool)
            and isinstance(c.get("rule", ""), str)
            for c in checks.values()
        ):
            return f"has malformed {key} (each must be an object with a true/false 'passed')"
    checks = record["checks"]
    if not checks:
        return "has no checks (a record with no checks has no verdict)"
    if record["scope"] not in SCOPES:
        return f"has scope {record['scope']!r}, expected one of {', '.join(SCOPES)}"
    if record["evidence"] not in EVIDENCE:
        return f"has evidence {record['evidence']!r}, expected one of {', '.join(EVIDENCE)}"
    if record["rules"] != RULES:
        return (
            f"was judged under verdict rules {record['rules']!r}, expected {RULES} "
            "(gradalign.records.rederive updates it)"
        )
    if record["evidence"] == "analytic" and record["preconditions"]:
        return "is analytic but has preconditions"
    derived = derive_verdict(checks, record["scope"], record["preconditions"], record["evidence"])
    stored = record["verdict"]
    if not _same_verdict(stored, derived):
        return (
            f"has a verdict that does not follow from its checks "
            f"(stored: {_describe(stored)}; derived: {_describe(derived)})"
        )
    if record["digest"] != record_digest(record):
        return "has a digest that does not match its content (edited after it was computed)"
    from gradalign.records.recheck import (
        checks_problem,
    )  # the checks against the metrics: a digest anyone can recompute

    return checks_problem(record)


def _same_verdict(stored: object, derived: dict) -> bool:
    """Equal status and the same failed, unmet and undecided checks, in any order."""
    lists = ("failed", "unmet", "within_noise", "unstable")
    if not isinstance(stored, dict):
        return False
    stored = {"unstable": [], **stored}  # a verdict of rules before 4 has no budget-unstable claims
    return (
        set(stored) == set(derived)
        and stored["status"] == derived["status"]
        and all(isinstance(stored[k], list) and sorted(map(str, stored[k])) == sorted(derived[k]) for k in lists)
    )


def _describe(verdict: object) -> str:
    """`not reproduced, failing a, b` for a message."""
    if not isinstance(verdict, dict):
        return repr(verdict)
    failed = verdict.get("failed")
    return f"{verdict.get('status')}, failing {', '.join(map(str, failed))}" if failed else str(verdict.get("status"))
