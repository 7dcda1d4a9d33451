"""Presets and validated experiment configs.

A config is a frozen dataclass; each experiment declares one config class and a dict of preset
overrides. `resolve` turns (preset name, user overrides) into a validated config before any
compute, and every error is a one-line `ConfigError` naming the valid choices.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from gradalign.errors import ConfigError

PRESETS = ("smoke", "cpu", "gpu", "paper")
"""smoke: seconds on two CPU cores (CI, nbval). cpu: <= ~10 min per notebook on two cores.
gpu: <= ~30 min per experiment on one H100. paper: the published protocol."""

PRESET_ORDER_FOR_BOOK = ("paper", "gpu", "cpu")
"""The book shows the largest preset whose record is stored, in this order; else it runs `cpu`."""


def check_preset(preset: str, allow_auto: bool = False) -> str:
    """`auto` (where allowed) means: the largest stored record, else `cpu`."""
    choices = (("auto",) if allow_auto else ()) + PRESETS
    if preset not in choices:
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(choices)}")
    return preset


@dataclasses.dataclass(frozen=True)
class Config:
    """Base of every experiment config. Subclasses add fields and override `validate`."""

    seed: int = 0

    def validate(self) -> None:
        require(self, "seed", self.seed >= 0, "must be >= 0")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def digest(self, version: int) -> str:
        return config_digest(self.to_dict(), version)


def config_digest(config: dict[str, Any], version: int) -> str:
    """Hash of a resolved config and the experiment version (12 hex digits): the record's key."""
    payload = json.dumps({"config": config, "version": version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def require(cfg: Config, name: str, ok: bool, rule: str) -> None:
    """Raise a one-line ConfigError when a parameter breaks its rule."""
    if not ok:
        raise ConfigError(f"{type(cfg).__name__}.{name} {rule}; got {getattr(cfg, name)!r}")


def resolve(config_cls: type[Config], presets: dict[str, dict[str, Any]], preset: str,
            overrides: dict[str, Any] | None = None) -> Config:
    """The validated config of `preset` with `overrides` applied on top."""
    check_preset(preset)
    if preset not in presets:
        raise ConfigError(f"preset {preset!r} is not defined for this experiment; "
                          f"choose one of: {', '.join(presets)}")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    values = dict(presets[preset])
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise ConfigError(f"unknown parameter {key!r} for {config_cls.__name__}; "
                              f"choose from: {', '.join(fields)}")
        values[key] = value
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}  # JSON lists -> tuples
    cfg = config_cls(**values)
    cfg.validate()
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as JSON when it parses, else a string."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key=value")
    key, raw = text.split("=", 1)
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value
