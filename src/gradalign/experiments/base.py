"""The shape of an experiment and of its outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gradalign.config import Config, resolve
from gradalign.errors import ConfigError
from gradalign.experiments.verdict import derive_verdict


@dataclass(frozen=True)
class Experiment:
    id: str
    run: Callable[[Config, Any], dict]
    config: type[Config]
    presets: dict[str, dict[str, Any]]
    version: int
    notebook: str  # source notebook, relative to the project root
    status: str = "built"  # or "partial" (the note says what is missing), or "not run here" (the note says why)
    uses_accelerator: bool = False  # False: computes on the CPU whatever device is asked for
    note: str = ""
    choices: dict[str, str] = field(default_factory=dict)  # our choices where the paper is silent
    shares: str = ""  # stored runs this experiment reads and shares with others (the report names them)
    scale: Callable[[dict], str] | None = None  # record -> its scale against the paper's (reduced scope)
    unused: Callable[[Config], dict[str, str]] | None = None  # config -> {dotted field: why this one ignores it}
    half_budget: Callable[[dict], dict] | None = None  # record -> what its B/2 adds to the halved budget (B's choice)

    def resolve(self, preset: str, overrides: dict[str, Any] | None = None) -> Config:
        """The validated config; an override of a field this experiment does not use at that config is refused
        (a record must never be labelled with a setting it did not run with)."""
        cfg = resolve(self.config, self.presets, preset, overrides)
        unused = self.unused(cfg) if self.unused else {}
        for key in overrides or {}:
            for name, why in unused.items():
                if key == name or key.startswith(name + ".") or name.startswith(key + "."):
                    raise ConfigError(f"{key} is not used by this experiment ({self.id}: {why}); leave it out")
        return cfg


def never_used(why: str, *names: str) -> Callable[[Config], dict[str, str]]:
    """`Experiment.unused` for fields of a shared config class that this experiment never reads (`why`)."""
    return lambda cfg: dict.fromkeys(names, why)


def same_as_cpu(cpu: dict, smoke: dict) -> dict[str, dict]:
    """Presets of an experiment whose paper setting runs in full on the CPU: gpu and paper equal cpu."""
    return {"smoke": smoke, "cpu": cpu, "gpu": cpu, "paper": cpu}


def scale_text(*items: tuple[str, str]) -> str:
    """A record's scale against the paper's, one `ours (paper: theirs)` item per quantity; equal items are
    shown once."""
    return "; ".join(ours if ours == paper else f"{ours} (paper: {paper})" for ours, paper in items)


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def check(passed: bool, value: Any, rule: str, claim: str) -> dict:
    """One numeric check of an outcome: the measured value, the rule it must satisfy, and the claim."""
    return {"passed": bool(passed), "value": value, "rule": rule, "claim": claim}


def outcome(
    checks: dict[str, dict],
    metrics: dict | None = None,
    curves: dict | None = None,
    scope: str = "exact",
    targets: dict[str, dict] | None = None,
) -> dict:
    """Bundle an experiment's results; the verdict follows from the checks and the scope, never typed in.

    `checks` test the paper's claims; `targets` (same form) test the project's own goals, such as a speed
    ratio, and are shown as benchmark results apart from the verdict (book/appendix/design.md, "A verdict").
    No checks is no verdict: a ConfigError (the settings left nothing to compare, e.g. a method list without
    the methods the claims compare), so that no record claims one.
    """
    if not checks:
        raise ConfigError(
            "these settings leave no check of the paper's claims, and a record without checks is not a verdict; "
            "keep the methods, arms or sizes that the claims compare (see the config's defaults)"
        )
    result = {
        "metrics": metrics or {},
        "curves": curves or {},
        "checks": checks,
        "scope": scope,
        "verdict": derive_verdict(checks, scope),
    }
    if targets:
        result["targets"] = targets
    return result
