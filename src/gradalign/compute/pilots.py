"""Pilots: a few runs that choose the scale of an element's rerun before its full set of seeds is trained.

Issues 27-29 ask for each empirical element a `cpu` scale designed to test its claim: every run finishes learning
(`rules.run_finished`, the rule the element's verdict applies) within about 1.5-2 hours of two cores. A pilot
trains seed 0 of the candidate scale, as the element's own runs with the candidate settings as overrides of its
`cpu` preset, so its runs are the first seed of the rerun when the scale is kept (same run keys). Its runs are
committed under `results/runs/` like every `cpu` run; the pages read them from there and never train
(`stored`). Compute them with `python -m gradalign.compute.pilots [name ...]` (two jobs at a time, one thread
each; a stopped pilot resumes from the run checkpoints).

Each pilot names the question it answers and the candidate it tries (our choices; `PILOTS`). Budget checks
(`BUDGET_CHECKS`) and pending reruns (`RERUNS`) train here with `--budget` / `--rerun` (and `--only` a few runs).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Callable

from gradalign.compute.metagrad_pilots import (
    FITS_GRID,
    fits_name,
    fits_overrides,
    fits_question,
    labeled_only_arm,
    labeled_only_units,
    variant_arm,
)
from gradalign.experiments.lga.ssl_benchmark import CPU as LGA_SSL_CPU
from gradalign.experiments.claim_budget import is_choice_half, is_half_budget
from gradalign.experiments.lga.validity import CONTROL, CONTROLLED
from gradalign.experiments.sgr.deep_seeds import BACKLOG_ITEMS as DEEP_SEEDS
from gradalign.experiments.sgr.local_runs import CALIBRATED
from gradalign.experiments.rules import run_finished


@dataclass(frozen=True)
class Pilot:
    element: str
    question: str
    overrides: dict
    metric: str  # the history key the element's finished-learning rule reads
    higher_is_better: bool
    tolerance: float
    units: Callable[["Pilot"], list]
    arm: Callable[[dict], str]  # a run's short name (its method, and what the pilot varies) from its spec


def _element_units(pilot: Pilot) -> list:
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    return units_of(pilot.element, get(pilot.element).resolve("cpu", pilot.overrides))


def _local_arm(spec: dict) -> str:
    from gradalign.methods.local import TITLES

    return TITLES[spec["method"]["method"]]


def _depth_arm(spec: dict) -> str:
    """Table 7's arms: the method and the VGG's depth (`vgg37` -> 'SGR, VGG-37')."""
    return f"{_local_arm(spec)}, VGG-{spec['network'].removeprefix('vgg')}"


def _ssl_arm(spec: dict) -> str:
    from gradalign.training.ssl import TITLES

    return TITLES[spec["method"]]


PILOTS = {
    "sgr.tab3": Pilot(
        "sgr.tab3",
        "does ResNet-32 at K = 16 finish learning in 30 epochs, and does the SGR term act at the calibrated λ?",
        {"lam": 1000.0, "reduction": "mean", "protocol.epochs": 30, "networks": ["resnet32"], "seeds": 1},
        "test_acc",
        True,
        0.5,
        _element_units,
        _local_arm,
    ),
    "lga.fig7": Pilot(
        "lga.fig7",
        "do supervised, VAT, LGA and LGA + VAT finish learning in 6,000 steps at 1,000 labels?",
        {**LGA_SSL_CPU, "seeds": 1, "labels": [1000], "families": ["cifar"]},
        "val_error",
        False,
        0.5,
        _element_units,
        _ssl_arm,
    ),
    "sgr.tab7": Pilot(
        "sgr.tab7",
        "do global BP, SGR and layer-wise training finish learning on VGG-12, 37 and 57 in 30 epochs, and does SGR's "
        "term fall to half of layer-wise training's at the calibrated λ?",
        {**CALIBRATED, "protocol.epochs": 30, "seeds": 1},
        "test_acc",
        True,
        0.5,
        _element_units,
        _depth_arm,
    ),
    "metagrad.tab4": Pilot(
        "metagrad.tab4",
        "does labeled-only training finish learning in 4,000 steps, with and without Conv-Large's dropout?",
        # the paper's decays at 75 % and 87.5 % moved to 50 % and 70 %: the finished-learning rule reads the last
        # 20 % of the evaluations, which must lie after the last decay (the reference's lesson: `reference.PRESETS`)
        {"protocol.steps": 4000, "protocol.decay_at": [0.5, 0.7], "seeds": 1},
        "val_error",
        False,
        0.5,
        labeled_only_units,
        labeled_only_arm,
    ),
}

PILOTS |= {
    fits_name(*c): Pilot("metagrad.tab4", fits_question(*c), fits_overrides(*c), "val_error", False, 0.5,
                         _element_units, variant_arm)
    for c in FITS_GRID
}  # fmt: skip
"""The meta-gradient fits pilot (`metagrad_pilots.FITS_GRID`): the first candidate whose every arm fits its labels."""

RERUNS: dict[str, dict] = {
    # Table 7 at 4 × its cpu budget (sgr.lam7's λ, 10², mean; 30 epochs). VGG-12 gained ~3 points from 15 to 30
    # epochs, +0.55 (global BP) and +1.08 (layer-wise) from 30 to 60, +1.12 and +0.78 from 60 to 120 (trained here
    # 2026-11-27): each doubling adds ≥ 0.5 there. Checked by the 60-epoch runs; last in `QUEUE`
    "sgr.tab7": {"protocol.epochs": 120},
    # Table 3 at twice its cpu budget: by its budget check (the runs at 30 epochs, trained here 2026-11-27) no arm had
    # finished learning at 60 epochs: from 30 to 60 every arm gained 1.7 to 3.5 points (SGR 2.13 ± 0.77 on ResNet-32,
    # 2.92 ± 1.36 on PlainNet-32). The same runs at 120 epochs, λ unchanged, checked by the committed 60-epoch runs.
    # About 15 hours of one thread: GPU windows train it, first
    "sgr.tab3": {"protocol.epochs": 120},
}
"""Each element's full rerun at the scale its pilots (or its budget check) chose, as overrides of its `cpu` preset:
what a sitting (`python -m gradalign.compute.pilots --rerun <id>`) or a GPU window trains next, its `cpu` preset once
committed. Earlier reruns are `cpu` presets now (`local_bp.TABLE3_CPU`, `local_bp.TABLE6_CPU`: 60 epochs at
the calibrated λ, Table 6 with the paper's K = 3; Table 7's at `sgr.lam7`'s λ, 30 epochs; `ssl_runs.CPU_FITS`)."""


ON_GPU: tuple[str, ...] = ("sgr.tab7", *(fits_name(*c) for c in FITS_GRID if c[0] > 0.125))
"""Pilots over the two-core budget: a GPU window trains their runs (`backlog.BACKLOG`); `main` trains them here
only when asked to (`--anyway`). Table 7's λ = 10² runs at 30 epochs took 2 to 15 min each on one thread here."""


def is_pilot(element_id: str, preset: str, overrides: dict) -> bool:
    """Whether a backlog item is a pilot's runs (one seed; the pilot's page reads the runs)."""
    return preset == "cpu" and any(p.element == element_id and p.overrides == overrides for p in PILOTS.values())


def budget_overrides(element_id: str) -> dict:
    """The budget check's overrides of the element's `cpu` preset (`experiments.sgr.budget`): its rerun's
    (`RERUNS`), while one is pending, with the epochs halved."""
    from gradalign.experiments import get
    from gradalign.experiments.sgr.budget import half_budget

    if element_id not in BUDGET_CHECKS:
        raise ValueError(f"{element_id} has no budget check; choose among {', '.join(BUDGET_CHECKS)}")
    rerun = RERUNS.get(element_id, {})
    return {**rerun, "protocol.epochs": half_budget(get(element_id).resolve("cpu", rerun)).protocol.epochs}


def budget_units(element_id: str) -> list:
    """The budget check's runs: the element's `cpu` runs (its pending rerun's) at half the epochs."""
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    return units_of(element_id, get(element_id).resolve("cpu", budget_overrides(element_id)))


def is_budget_check(element_id: str, preset: str, overrides: dict) -> bool:
    """Whether a backlog item is a budget check's runs (the table's runs at half the epochs, which its
    finished-learning precondition reads)."""
    return preset == "cpu" and element_id in BUDGET_CHECKS and overrides == budget_overrides(element_id)


def runs_only(element_id: str, preset: str, overrides: dict) -> bool:
    """Whether a backlog item's runs are trained and committed with no record assembled from them: a pilot's, a
    budget check's (`claim_budget.is_half_budget` too), a mechanism control's (`lga.validity.CONTROL`) or the seeds
    of SGR at VGG-57 (`experiments.sgr.deep_seeds`, which reads them; a record there would shadow Table 7's), or
    Figure 7 at the settings lga.tune chose (`lga_rerun`: its record is assembled once all three items are in), or
    a record's runs at half its budget given its choice (`claim_budget.is_choice_half`)."""
    item = (element_id, preset, overrides)
    control = preset == "cpu" and element_id in CONTROLLED and overrides == CONTROL
    tuned = element_id == "lga.fig7" and "tuned" in overrides
    halves = is_half_budget(*item) or is_choice_half(*item)
    return control or tuned or halves or is_pilot(*item) or is_budget_check(*item) or item in DEEP_SEEDS


BUDGET_CHECKS: tuple[str, ...] = ("sgr.tab7", "sgr.tab6", "sgr.tab3")
"""Tables read at half their epochs (`sgr.budget`, `sgr.validity`): a window commits these runs, no record."""

QUEUE: tuple[tuple[str, str], ...] = (
    ("sgr.tab3", "rerun"),
    ("sgr.tab3", "budget check"),
    ("sgr.tab6", "budget check"),
    ("sgr.tab7", "rerun"),
    ("sgr.tab7", "budget check"),
)
"""The order a GPU window trains them, a rerun before the check that reads it: Table 6's check after Table 3's;
Table 7's last (its VGG-12 arms still gain at 120 epochs, `RERUNS`: it shows how the deeper arms end)."""


def queued() -> tuple[tuple[str, str, dict], ...]:
    """`QUEUE` as backlog items (element, preset, overrides)."""
    return tuple(
        (element_id, "cpu", RERUNS[element_id] if what == "rerun" else budget_overrides(element_id))
        for element_id, what in QUEUE
    )


RUNS_LOST: tuple[str, ...] = ()
"""Elements whose `cpu` runs were trained on a machine whose run cache is gone: first in a window's backlog. Table 4
and Figures 2-4 were (47 of Table 4's 168 committed when the first window trained the rest); they left it in stop 70,
once every run their records read was committed at 5 seeds. A sweep of theirs would train the final runs at every
rate of the grids as well (`table4_units`), which the records never read."""

CLOSED: dict[str, str] = {
    "sgr.tab7": "Closed before these runs: at λ = 10³ SGR did not learn on VGG-12 (chance from its second epoch), so "
    "Table 7's rerun is at the λ of sgr.lam7 (10²), and these λ = 10³ runs are not trained.",
}
"""Pilots answered before all their runs were trained: the reason (on their page); a window trains no more of them."""

OVER_CPU_BUDGET: tuple[str, ...] = ("metagrad.tab2", "sgr.lamfull", "lga.tune")
"""Elements whose `cpu` preset is over the two-core budget (about 1.5 hours): a GPU window trains their `cpu` units
(after `RERUNS`), so that the record is the `cpu` design's, computed on a GPU."""


def _committed():
    from gradalign.compute.sweep import _committed_folder

    return _committed_folder("cpu")


def stored(name: str) -> list[dict]:
    """Each run of pilot `name` (`stored_units`)."""
    pilot = PILOTS[name]
    return stored_units(pilot.units(pilot), pilot.arm, pilot.metric, pilot.higher_is_better, pilot.tolerance)


def stored_units(units: list, arm, metric: str, higher_is_better: bool, tolerance: float) -> list[dict]:
    """Each of `units` as {label, arm, key, done, curve (the metric per evaluation), x (its epochs or steps),
    final (the metric at the end: a diverged run's stored value, at chance, where its curve is empty), diverged,
    finished, spec, history, labeled_error, hardware, wall_time_s}, from the committed entries only (`done` False
    where a run is not committed yet); `arm(spec)` names a run's arm, `run_finished` judges it."""
    from gradalign.compute.gpu_sizing import run_seconds
    from gradalign.store.run_unit import read_entry

    out = []
    for unit in units:
        entry = read_entry(_committed(), unit)
        row = {"label": unit.label, "arm": arm(unit.spec), "key": unit.key, "done": entry is not None}
        if entry is not None:
            history = entry["value"]["history"]
            curve = history.get(metric, [])
            row.update(
                curve=curve,
                final=curve[-1] if curve else entry["value"].get(f"final_{metric}"),
                diverged=entry["value"].get("diverged"),  # a local-BP table's run: its divergence is its result
                x=history.get("epoch", history.get("step")),  # the x axis: epochs where a run has them
                finished=run_finished(curve, higher_is_better, tolerance),
                spec=entry["spec"],
                history=history,
                hardware=entry["provenance"].get("hardware"),
                wall_time_s=run_seconds(entry),  # a resumed run: its whole training, not its last sitting
                labeled_error=entry["value"].get("labeled_error"),  # SSL runs: does it fit its labels?
            )
        out.append(row)
    return out


def _job(unit) -> str:
    from gradalign.store.runcache import cache_root
    from gradalign.compute.sweep import compute_unit

    began = time.time()
    try:
        compute_unit(unit, str(cache_root().absolute()), 1, str(_committed()))
        return f"ok   {unit.label} ({time.time() - began:.0f} s)"
    except Exception as err:  # a diverged or stopped run: reported, the others go on
        return f"FAIL {unit.label}: {str(err).splitlines()[0]}"


def compute(names: list[str], jobs: int = 2, echo=print) -> None:
    """Train the pilots' runs that are not committed yet, `jobs` at a time (one thread each)."""
    from gradalign.compute.sweep import missing_units

    train_units(
        [u for name in names for u in missing_units(PILOTS[name].units(PILOTS[name]), _committed())], jobs, echo
    )


def train_units(units: list, jobs: int = 2, echo=print) -> None:
    """Train `units` here (committed), `jobs` at a time, one thread each; a failed one is reported, the others go on."""
    from multiprocessing import Pool

    echo(f"{len(units)} run(s) to train: {', '.join(u.label for u in units) or 'none'}")
    if not units:
        return
    with Pool(max(1, min(jobs, len(units)))) as pool:
        for line in pool.imap_unordered(_job, units):
            echo(line)


def rerun_units(element_id: str) -> list:
    """A pending rerun's runs (`RERUNS`): the element's `cpu` runs at the rerun's overrides."""
    from gradalign.experiments import get
    from gradalign.experiments.units import units_of

    if element_id not in RERUNS:
        raise ValueError(f"{element_id} has no pending rerun; choose among {', '.join(RERUNS)}")
    return units_of(element_id, get(element_id).resolve("cpu", RERUNS[element_id]))


def only(units: list, prefixes: list[str] | None) -> list:
    """`units` whose label starts with one of `prefixes`, in the prefixes' order (all, for none), each once; a prefix
    that names none of them is an error, before any training."""
    chosen = [[u for u in units if u.label.startswith(p)] for p in prefixes] if prefixes else [units]
    for prefix, matched in zip(prefixes or [], chosen):
        if not matched:
            raise ValueError(f"--only {prefix!r} names no run; runs: {', '.join(u.label for u in units)}")
    return list({u.key: u for matched in chosen for u in matched}.values())


def uncommitted(units: list) -> list:
    """`units` without an entry under `results/runs/`: trained, or read from this machine's run cache, and committed."""
    from gradalign.store.run_unit import read_entry

    return [u for u in units if read_entry(_committed(), u) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Train pilots', budget checks' or reruns' runs (committed under "
        "results/runs/; `git add results/runs` afterwards)."
    )
    here = [n for n in PILOTS if n not in ON_GPU and n not in CLOSED]
    parser.add_argument("names", nargs="*", help=f"pilots among {', '.join(PILOTS)} (default: {', '.join(here)})")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--anyway", action="store_true", help=f"also train {', '.join(ON_GPU)} (over the budget)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--budget", nargs="+", metavar="ELEMENT", help=f"budget checks among {', '.join(BUDGET_CHECKS)}")
    group.add_argument("--rerun", nargs="+", metavar="ELEMENT", help=f"pending reruns among {', '.join(RERUNS)}")
    parser.add_argument(
        "--only", nargs="+", metavar="LABEL", help="only the runs whose label starts so, in this order ('SGR K=35')"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    elements = args.budget or args.rerun
    if elements:
        valid = BUDGET_CHECKS if args.budget else tuple(RERUNS)
        unknown = [e for e in elements if e not in valid]
        if unknown or args.names:
            parser.error(
                f"{'--budget' if args.budget else '--rerun'} takes elements among {', '.join(valid)}, "
                "and no pilot names"
            )
        units_of_element = budget_units if args.budget else rerun_units
        try:
            left = uncommitted(only([u for e in elements for u in units_of_element(e)], args.only))
        except ValueError as err:
            parser.error(str(err))
        train_units(left, args.jobs)
        return 0
    if args.only:
        parser.error("--only applies to --budget or --rerun")
    unknown = [n for n in args.names if n not in PILOTS]
    if unknown:
        parser.error(f"unknown pilot(s) {', '.join(unknown)}; choose among {', '.join(PILOTS)}")
    closed = [n for n in args.names if n in CLOSED]
    if closed:
        parser.error(f"{', '.join(closed)}: closed, its remaining runs are not trained ({CLOSED[closed[0]]})")
    heavy = [n for n in args.names if n in ON_GPU]
    if heavy and not args.anyway:
        parser.error(f"{', '.join(heavy)}: over the two-core budget, a GPU window trains it; --anyway trains it here")
    compute(args.names or here, args.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
