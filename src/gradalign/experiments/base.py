"""The shape of an experiment and of its outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from gradalign.config import Config, resolve
from gradalign.verdict import derive_verdict


@dataclass(frozen=True)
class Experiment:
    id: str
    run: Callable[[Config, Any], dict]
    config: type[Config]
    presets: dict[str, dict[str, Any]]
    version: int
    notebook: str  # source notebook, relative to the project root
    status: str = "built"  # or "partial" (the note says what is missing)
    uses_accelerator: bool = False  # False: computes on the CPU whatever device is asked for
    note: str = ""
    choices: dict[str, str] = field(default_factory=dict)  # our choices where the paper is silent
    shares: str = ""  # stored runs this experiment reads and shares with others (the report names them)

    def resolve(self, preset: str, overrides: dict[str, Any] | None = None) -> Config:
        return resolve(self.config, self.presets, preset, overrides)


def same_as_cpu(cpu: dict, smoke: dict) -> dict[str, dict]:
    """Presets of an experiment whose paper setting runs in full on the CPU: gpu and paper equal cpu."""
    return {"smoke": smoke, "cpu": cpu, "gpu": cpu, "paper": cpu}


def check(passed: bool, value: Any, rule: str, claim: str) -> dict:
    """One numeric check of an outcome: the measured value, the rule it must satisfy, and the claim."""
    return {"passed": bool(passed), "value": value, "rule": rule, "claim": claim}


def outcome(
    checks: dict[str, dict], metrics: dict | None = None, curves: dict | None = None, scope: str = "exact"
) -> dict:
    """Bundle an experiment's results; the verdict follows from the checks and the scope, never typed in."""
    return {
        "metrics": metrics or {},
        "curves": curves or {},
        "checks": checks,
        "scope": scope,
        "verdict": derive_verdict(checks, scope),
    }
