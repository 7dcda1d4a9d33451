"""A unit: one run-cache entry an experiment stores, as the exact arguments of `runcache.cached_run` plus a label.

Running it anywhere that sees the same run cache stores the entry the experiment would have stored itself;
`experiments.units` registers each experiment's units and `gradalign sweep` computes them as separate jobs.
`compute` must pickle (a job receives it through cloudpickle): a module-level function, or a functools.partial
of one over picklable values.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gradalign.atomic import dumps_strict
from gradalign.runcache import cached_run, run_key


@dataclass(frozen=True)
class Unit:
    label: str  # what a person reads in a sweep's report: "trial 3 (seed 3)"
    kind: str
    spec: dict
    version: int
    compute: Callable[[Path], object]  # checkpoint path -> value, as cached_run calls it

    @property
    def key(self) -> str:
        """The run-cache key of its entry (the spec as the entry stores it: tuples become lists)."""
        return run_key(self.kind, json.loads(dumps_strict(self.spec)), self.version)

    def run(self, root: Path | None = None) -> Any:
        """Its stored value, else computed and stored: `cached_run` with this unit's arguments."""
        return cached_run(self.kind, self.spec, self.version, self.compute, root)


def without_defaults(settings, values: dict, names: tuple[str, ...]) -> dict:
    """`values` (`settings.to_dict()`) without the fields `names` where they hold their defaults: fields added
    after runs or records were stored under keys that lack them, which keep those keys that way (a value other
    than the default is in the key, so it still changes the run)."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    return {k: v for k, v in values.items() if not (k in names and getattr(settings, k) == defaults[k])}
