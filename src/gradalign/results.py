"""The results store: one JSON record per (experiment id, preset, config hash).

Layout: `<root>/<part>/<id>/<preset>-<hash>.json`, root = `$GRADALIGN_RESULTS` or `results/` of the
checkout. The hash covers the resolved config and the experiment's hand-bumped version, so a record
is reused only for exactly the computation it describes. Writes are atomic (temporary file in the
same folder, fsync, rename). A record that does not parse, or whose schema or key does not match,
is reported with a `RecordWarning` and treated as missing, so the caller recomputes it.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterator

from gradalign.atomic import write_atomically
from gradalign.config import config_digest
from gradalign.environment import project_root

SCHEMA = 1
REQUIRED = ("schema", "id", "preset", "config", "config_hash", "experiment_version",
            "metrics", "checks", "verdict", "provenance")


class RecordWarning(UserWarning):
    """A stored record was unusable and will be recomputed."""


warnings.simplefilter("always", RecordWarning)


def part_of(element_id: str) -> str:
    return element_id.split(".", 1)[0]


class ResultStore:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root or os.environ.get("GRADALIGN_RESULTS") or project_root() / "results")

    def path(self, element_id: str, preset: str, digest: str) -> Path:
        return self.root / part_of(element_id) / element_id / f"{preset}-{digest}.json"

    def load(self, element_id: str, preset: str, digest: str, version: int) -> dict | None:
        """The stored record for this exact key, or None (missing or unusable, reported)."""
        path = self.path(element_id, preset, digest)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            return self._reject(path, f"does not parse ({type(err).__name__}: {err})")
        problem = _mismatch(record, element_id, preset, digest, version)
        return self._reject(path, problem) if problem else record

    def save(self, record: dict) -> Path:
        def write(handle):
            json.dump(record, handle, indent=1, sort_keys=True)
            handle.write("\n")

        return write_atomically(self.path(record["id"], record["preset"], record["config_hash"]), write)

    def files(self, element_id: str) -> list[Path]:
        folder = self.root / part_of(element_id) / element_id
        return sorted(folder.glob("*.json")) if folder.is_dir() else []

    def records(self, element_id: str) -> Iterator[dict]:
        """Every parseable record stored for an id (any preset or hash), for reports."""
        for path in self.files(element_id):
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(record, dict) and record.get("schema") == SCHEMA and record.get("id") == element_id:
                yield record

    @staticmethod
    def _reject(path: Path, reason: str) -> None:
        warnings.warn(f"ignoring stored record {path}: {reason}; it will be recomputed", RecordWarning,
                      stacklevel=3)
        return None


def _mismatch(record: object, element_id: str, preset: str, digest: str, version: int) -> str | None:
    if not isinstance(record, dict):
        return "is not a JSON object"
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        return f"lacks {', '.join(missing)}"
    if record["schema"] != SCHEMA:
        return f"has schema {record['schema']!r}, expected {SCHEMA}"
    expected = {"id": element_id, "preset": preset, "config_hash": digest, "experiment_version": version}
    for key, value in expected.items():
        if record[key] != value:
            return f"has {key} {record[key]!r}, expected {value!r}"
    if config_digest(record["config"], version) != digest:
        return "has a config that does not hash to its key"
    return None
