"""Typed settings, presets and validated experiment configs.

Every experiment config and every method's settings is a frozen dataclass derived from `Settings`.
Constructing one checks each field against its annotation (a bool is not an int, a string is not a
float, NaN and Inf are not finite numbers) and then runs the class's `validate`, so an instance that
exists is valid. A method's settings nest inside the experiment config as a `Settings` field and are
overridden with dotted names (`trial.lr=3e-4`). `resolve` turns (preset name, user overrides) into a
config before any compute; every error is a one-line `ConfigError` naming the valid choices.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import operator
import types
import typing
from typing import Any

from gradalign.errors import ConfigError
from gradalign.sizes import check_sizes

PRESETS = ("smoke", "cpu", "gpu", "paper")
"""smoke: seconds on two CPU cores (CI). cpu: <= ~10 min per notebook on two cores.
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
class Settings:
    """Base of every typed settings class: fields are checked against their annotations, then validated.

    Subclasses are `@dataclass(frozen=True)` with annotated fields and override `validate` to state
    range rules with `require`. A list given for a tuple field becomes a tuple, a dict given for a
    nested `Settings` field becomes that class, an int given for a float field becomes a float.
    """

    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            converted = _checked(hints.get(field.name, Any), value, type(self).__name__, field.name)
            if converted is not value:
                object.__setattr__(self, field.name, converted)
        check_sizes(self)  # upper bounds of sizes (sizes.py), before the range rules
        try:
            self.validate()
        except TypeError as err:  # a bare `tuple` field holding items of the wrong type, compared in a rule
            raise ConfigError(
                f"{type(self).__name__} got a value of the wrong type ({err}); see the types of its fields"
            ) from None

    def validate(self) -> None:
        """Range rules between fields (`require`); the type rules have already passed."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values: nested settings as dicts, tuples as lists."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class Config(Settings):
    """Base of every experiment config. Subclasses add fields and override `validate`."""

    seed: int = 0

    def validate(self) -> None:
        require(self, "seed", self.seed >= 0, "must be >= 0")

    def digest(self, version: int) -> str:
        return config_digest(self.to_dict(), version)


def config_digest(config: dict[str, Any], version: int) -> str:
    """Hash of a resolved config and the experiment version (12 hex digits): the record's key."""
    payload = json.dumps({"config": config, "version": version}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def require(obj: Settings, name: str, ok: bool, rule: str) -> None:
    """Raise a one-line ConfigError when a parameter breaks its rule (`name` may be dotted: `trial.lr`)."""
    if not ok:
        raise ConfigError(f"{type(obj).__name__}.{name} {rule}; got {operator.attrgetter(name)(obj)!r}")


# --- resolving presets and overrides ---------------------------------------------------------------


def resolve(
    config_cls: type[Config], presets: dict[str, dict[str, Any]], preset: str, overrides: dict[str, Any] | None = None
) -> Config:
    """The validated config of `preset` with `overrides` applied on top, field by field.

    Keys of the preset and of the overrides are field names, dotted names into nested settings
    (`trial.lr`), or nested settings fields given as dicts (`trial: {"lr": 3e-4}`).
    """
    check_preset(preset)
    if preset not in presets:
        raise ConfigError(f"preset {preset!r} is not defined for this experiment; choose one of: {', '.join(presets)}")
    values: dict[str, Any] = {}
    for source in (presets[preset], overrides or {}):
        for key, value in source.items():
            _assign(config_cls, values, key, value, config_cls)
    return construct(config_cls, values)


def construct(settings_cls: type[Settings], values: dict[str, Any]) -> Settings:
    """`settings_cls(**values)` with unknown or missing names as one-line ConfigErrors."""
    fields = {f.name: f for f in dataclasses.fields(settings_cls)}
    unknown = [key for key in values if key not in fields]
    if unknown:
        raise ConfigError(
            f"unknown parameter {unknown[0]!r} for {settings_cls.__name__}; "
            f"choose from: {', '.join(settings_fields(settings_cls))}"
        )
    missing = [name for name, f in fields.items() if name not in values and _no_default(f)]
    if missing:
        raise ConfigError(f"{settings_cls.__name__}.{missing[0]} has no default and must be given")
    return settings_cls(**values)


def settings_from_dict(settings_cls: type[Settings], values: dict[str, Any]) -> Settings:
    """The settings whose `to_dict()` is `values` (nested settings as dicts, as a stored run spec holds them)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        _assign(settings_cls, out, key, value, settings_cls)
    return construct(settings_cls, out)


def settings_fields(settings_cls: type[Settings]) -> list[str]:
    """Every dotted leaf name of a settings class, nested settings expanded (`trial.lr`)."""
    hints = _type_hints(settings_cls)
    names = []
    for field in dataclasses.fields(settings_cls):
        nested = _settings_class(hints.get(field.name))
        if nested is None:
            names.append(field.name)
        else:
            names.extend(f"{field.name}.{sub}" for sub in settings_fields(nested))
    return names


def _assign(owner: type[Settings], values: dict[str, Any], key: str, value: Any, root: type[Settings]) -> None:
    """Set `key` (possibly dotted) of the nested `values` of `owner` to `value`, merging nested dicts."""
    head, _, rest = str(key).partition(".")
    field = {f.name: f for f in dataclasses.fields(owner)}.get(head)
    nested = _settings_class(_type_hints(owner).get(head)) if field else None
    if field is None or (rest and nested is None):
        raise ConfigError(
            f"unknown parameter {key!r} for {root.__name__}; choose from: {', '.join(settings_fields(root))}"
        )
    if nested is not None and (rest or isinstance(value, dict)):
        current = _as_values(values[head] if head in values else _default(field))
        items = {rest: value} if rest else value
        for sub_key, sub_value in items.items():
            _assign(nested, current, sub_key, sub_value, root)
        values[head] = current
    else:
        values[head] = value


def _as_values(current: Any) -> dict[str, Any]:
    """The field values of a nested settings object (or of a dict), to merge overrides into."""
    if isinstance(current, Settings):
        return {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
    return dict(current) if isinstance(current, dict) else {}


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _no_default(field: dataclasses.Field) -> bool:
    return field.init and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


# --- type rules ------------------------------------------------------------------------------------


@functools.cache
def _type_hints(settings_cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(settings_cls)
    except NameError as err:  # a programming error, not bad input: say where to look
        raise TypeError(
            f"the annotations of {settings_cls.__qualname__} do not resolve ({err}); "
            "settings classes and the types they name must be defined at module level"
        ) from None


def _settings_class(hint: Any) -> type[Settings] | None:
    """The Settings subclass a field holds (also through `X | None`), else None."""
    if isinstance(hint, type) and issubclass(hint, Settings):
        return hint
    if _is_union(hint):
        found = [c for c in map(_settings_class, typing.get_args(hint)) if c is not None]
        return found[0] if len(found) == 1 else None
    return None


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


class _Mismatch(Exception):
    """A value does not fit its annotation; the caller words the one-line error."""


def _checked(hint: Any, value: Any, owner: str, name: str) -> Any:
    """`value` converted to fit `hint` (list -> tuple, dict -> Settings, int -> float), or a ConfigError."""
    try:
        return _convert(hint, value)
    except _Mismatch:
        raise ConfigError(f"{owner}.{name} must be {describe(hint)}; got {value!r}") from None
    except ConfigError as err:  # a nested settings object rejected one of its own fields
        raise ConfigError(f"{owner}.{name}: {err}") from None


def _convert(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return _expect(value, isinstance(value, bool))
    if hint is int:
        return _expect(value, isinstance(value, int) and not isinstance(value, bool))
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
        return float(_expect(value, ok))
    if hint is str:
        return _expect(value, isinstance(value, str))
    if hint is tuple or origin is tuple:
        return _convert_tuple(args, value)
    if _is_union(hint):
        return _convert_union(args, value)
    if origin is typing.Literal:
        return _expect(value, any(value == a and type(value) is type(a) for a in args))
    if isinstance(hint, type) and issubclass(hint, Settings):
        return _convert_settings(hint, value)
    return value  # Callable, Any, dict, ...: not checked


def _expect(value: Any, ok: bool) -> Any:
    if not ok:
        raise _Mismatch
    return value


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _convert_tuple(args: tuple, value: Any) -> tuple:
    if not isinstance(value, (tuple, list)):
        raise _Mismatch
    if not args:  # bare `tuple`: strings and finite numbers (no bool), nested lists become tuples too
        return tuple(_deep_tuple(v) for v in value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(args[0], v) for v in value)
    if len(value) != len(args):
        raise _Mismatch
    return tuple(_convert(a, v) for a, v in zip(args, value, strict=True))


def _deep_tuple(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_deep_tuple(v) for v in value)
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
    return _expect(value, isinstance(value, str) or number)


def _convert_union(args: tuple, value: Any) -> Any:
    if value is None and type(None) in args:
        return None
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(arg, value)
        except _Mismatch:
            continue
    raise _Mismatch


def _convert_settings(settings_cls: type[Settings], value: Any) -> Settings:
    if isinstance(value, settings_cls):
        return value
    if isinstance(value, dict):
        return construct(settings_cls, value)
    raise _Mismatch


def describe(hint: Any) -> str:
    """A type annotation in words, for error messages: `tuple[int, ...]` -> 'a list of integers'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _WORDS:
        return _WORDS[hint][0]
    if hint is tuple:
        return "a list"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_plural(args[0])}"
        return f"a list of {len(args)} items ({', '.join(describe(a) for a in args)})"
    if _is_union(hint):
        words = [describe(a) for a in args if a is not type(None)]
        return " or ".join(words + (["null"] if type(None) in args else []))
    if origin is typing.Literal:
        return f"one of {', '.join(json.dumps(a) for a in args)}"
    if isinstance(hint, type) and issubclass(hint, Settings):
        return f"a {hint.__name__} (a dict of its fields)"
    return getattr(hint, "__name__", str(hint))


def _plural(hint: Any) -> str:
    if hint in _WORDS:
        return _WORDS[hint][1]
    return f"items that are each {describe(hint)}"


_WORDS = {
    bool: ("true or false", "booleans (true or false)"),
    int: ("an integer", "integers"),
    float: ("a finite number", "finite numbers"),
    str: ("a string", "strings"),
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Settings):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def dotted(values: dict, prefix: str = "") -> dict:
    """`values` flattened: each leaf under the dotted path of its keys."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
