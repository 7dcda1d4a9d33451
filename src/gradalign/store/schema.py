"""The schema of a stored record: its fields and their types, checked on every read beside the digest.

A digest proves that a record was not edited after it was stored; it does not prove that the record has the
shape the readers expect, because whoever edits a record can compute its digest again. `record_problem` says
why a parsed record does not have that shape (a field missing, a field of the wrong type, a check without its
rule), so that the store reports it and recomputes instead of a reader failing with a KeyError. A key given
twice in one JSON object is refused earlier, when the file is parsed (`atomic.read_json_strict`).

Optional fields are accepted when they have their type: `targets` and `preconditions` (objects of checks, as
`checks`), `kind` ("analytic" or "empirical"); a check may carry keys beyond its four (`within_noise`, ...).
"""

from __future__ import annotations

import math
from typing import Any

KINDS = ("analytic", "empirical")

_NUMBER = (int, float)

# field -> (type(s), words for the message)
RECORD_FIELDS: dict[str, tuple[Any, str]] = {
    "schema": (int, "an integer"),
    "id": (str, "a string"),
    "part": (str, "a string"),
    "preset": (str, "a string"),
    "config": (dict, "an object"),
    "config_hash": (str, "a string"),
    "experiment_version": (int, "an integer"),
    "metrics": (dict, "an object"),
    "curves": (dict, "an object"),
    "checks": (dict, "an object"),
    "scope": (str, "a string"),
    "verdict": (dict, "an object"),
    "provenance": (dict, "an object"),
    "digest": (str, "a string"),
}
OPTIONAL_FIELDS: dict[str, tuple[Any, str]] = {
    "targets": (dict, "an object"),
    "preconditions": (dict, "an object"),
    "kind": (str, "a string"),
}
CHECK_FIELDS: dict[str, tuple[Any, str]] = {
    "passed": (bool, "true or false"),
    "rule": (str, "a string"),
    "claim": (str, "a string"),
}
PROVENANCE_FIELDS: dict[str, tuple[Any, str]] = {
    "hardware": (str, "a string"),
    "wall_time_s": (_NUMBER, "a number"),
}
PROVENANCE_OPTIONAL: dict[str, tuple[Any, str]] = {
    "device": (str, "a string"),
    "torch": (str, "a string"),
    "date": (str, "a string"),
    "seeds": (list, "a list"),
    "threads": (int, "an integer"),
    "git_commit": ((str, type(None)), "a string"),
    "code": (dict, "an object"),
}
VERDICT_LISTS = ("failed", "unmet", "within_noise", "unstable")


def record_problem(record: object) -> str | None:
    """Why `record` (parsed JSON) does not have a record's fields and types, or None. Only the shape: whether
    its key, verdict and digest agree with its content is for the store to check."""
    if not isinstance(record, dict):
        return f"is not a JSON object (a {type(record).__name__})"
    missing = [name for name in RECORD_FIELDS if name not in record]
    if missing:
        return f"lacks {', '.join(missing)}"
    for fields, where in ((RECORD_FIELDS, ""), (OPTIONAL_FIELDS, "")):
        problem = _typed(record, fields, where)
        if problem:
            return problem
    if "kind" in record and record["kind"] not in KINDS:
        return f"has kind {record['kind']!r}, expected one of {', '.join(KINDS)}"
    for name in ("checks", "targets", "preconditions"):
        for check_name, check in record.get(name, {}).items():
            problem = check_problem(check)
            if problem:
                return f"has a malformed {name} entry {check_name!r}: {problem}"
    return _provenance_problem(record["provenance"]) or _verdict_problem(record["verdict"])


def check_problem(check: object) -> str | None:
    """Why one check (of `checks`, `targets` or `preconditions`) is malformed, or None."""
    if not isinstance(check, dict):
        return f"not an object (a {type(check).__name__})"
    missing = [name for name in (*CHECK_FIELDS, "value") if name not in check]
    if missing:
        return f"lacks {', '.join(missing)}"
    return _typed(check, CHECK_FIELDS, "")


def _provenance_problem(provenance: dict) -> str | None:
    missing = [name for name in PROVENANCE_FIELDS if name not in provenance]
    if missing:
        return f"has a provenance without {', '.join(missing)}"
    problem = _typed(provenance, {**PROVENANCE_FIELDS, **PROVENANCE_OPTIONAL}, "provenance.")
    if problem:
        return problem
    wall = provenance["wall_time_s"]
    if not math.isfinite(wall) or wall < 0:
        return f"has provenance.wall_time_s {wall!r}, expected a time >= 0"
    seeds = provenance.get("seeds", [])
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        return "has provenance.seeds that are not all integers"
    return None


def _verdict_problem(verdict: dict) -> str | None:
    if not isinstance(verdict.get("status"), str):
        return "has a verdict without a status string"
    for name in VERDICT_LISTS:
        if name in verdict and not (
            isinstance(verdict[name], list) and all(isinstance(item, str) for item in verdict[name])
        ):
            return f"has verdict.{name} that is not a list of names"
    if "failed" not in verdict:
        return "has a verdict without its list of failed checks"
    return None


def _typed(document: dict, fields: dict[str, tuple[Any, str]], prefix: str) -> str | None:
    """The first field of `fields` present in `document` with the wrong type, as a message, or None."""
    for name, (types, words) in fields.items():
        if name not in document:
            continue
        value = document[name]
        wrong = not isinstance(value, types) or (isinstance(value, bool) and bool not in _tuple(types))
        if wrong:
            return f"has {prefix}{name} of type {type(value).__name__}, expected {words}"
    return None


def _tuple(types: Any) -> tuple:
    return types if isinstance(types, tuple) else (types,)
