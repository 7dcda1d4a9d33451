"""Settings from the command line: `key=value` read as JSON, and one value per setting.

`--set protocol.steps=5` and `--set 'protocol={"steps": 6}'` set the same setting twice, and so does a JSON
object that repeats a key: each is one line before any compute (which value should win?). Values are checked
against their fields' types later, when the settings object is built (`config.construct`).
"""

from __future__ import annotations

import json
from typing import Any

from gradalign.errors import ConfigError


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as JSON when it parses, else kept as text.

    JSON's non-standard words NaN, Infinity and -Infinity stay text, so a float field rejects them with
    the usual type error instead of a NaN slipping through.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like key=value (e.g. steps=100 or trial.lr=3e-4)")
    try:
        return key, json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_once(key))
    except ConfigError:
        raise
    except ValueError:  # not JSON (json.JSONDecodeError is a ValueError), or NaN/Infinity
        return key, raw


def _once(key: str):
    """A JSON object hook that refuses a key given twice inside the value of setting `key`."""

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out: dict[str, Any] = {}
        for name, value in items:
            if name in out:
                raise ConfigError(f"{key}: {name!r} is given twice in one JSON value; give each setting once")
            out[name] = value
        return out

    return pairs


def parse_overrides(texts: list[str], flag: str = "--set") -> dict[str, Any]:
    """Every `key=value` of the command line's `--set`s; a key given twice is refused (which should win?)."""
    overrides: dict[str, Any] = {}
    for text in texts:
        key, value = parse_override(text)
        if key in overrides:
            raise ConfigError(
                f"{flag} {key} is given twice ({json.dumps(overrides[key], default=str)} and "
                f"{json.dumps(value, default=str)}); give each setting once"
            )
        overrides[key] = value
    _refuse_overlaps(overrides, flag)
    return overrides


def _leaf_names(key: str, value: Any) -> list[str]:
    """The dotted settings a `key=value` sets: a JSON object sets each of its leaves."""
    if isinstance(value, dict) and value:
        return [leaf for name, sub in value.items() for leaf in _leaf_names(f"{key}.{name}", sub)]
    return [key]


def _refuse_overlaps(overrides: dict[str, Any], flag: str) -> None:
    """One value per setting: `protocol.steps=5` with `protocol={"steps": 6}` (or `protocol=...` with any
    `protocol.<x>=...` that it would replace) sets one setting twice."""
    seen: dict[str, str] = {}
    for key, value in overrides.items():
        for leaf in _leaf_names(key, value):
            clash = next((s for s in seen if s == leaf or s.startswith(leaf + ".") or leaf.startswith(s + ".")), None)
            if clash is not None:
                raise ConfigError(
                    f"{flag} {leaf} is given twice (by {seen[clash]} and by {key}); give each setting once"
                )
            seen[leaf] = key


def _reject_constant(word: str) -> float:
    raise ValueError(f"{word} is not a finite number")
