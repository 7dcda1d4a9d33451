"""Nested settings as dotted names (`{"protocol": {"steps": 6}}` -> `{"protocol.steps": 6}`), the form `--set` takes."""

from __future__ import annotations


def dotted(values: dict, prefix: str = "") -> dict:
    """`values` flattened: each leaf under the dotted path of its keys."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
