"""IsoLoss part, Table 1's budget: does a longer pre-training lift every arm above the trivial rows? (our pilot;
notebook isoloss/03)

Table 1's `cpu` record is inconclusive because no self-supervised arm's probe beats raw pixels' (78.2 %): 16 epochs of
5,000 images are about 300 SGD steps. Before a rerun's seeds are trained, this pilot tries longer budgets, one
`Candidate` at a time (ours): seed 0 of each arm at `isoloss.tab1`'s `cpu` preset with the candidate's overrides,
everything else unchanged. Its probes are compared with seed 0's trivial rows on the same images, through the same
probe and from the same initial network (`trivial_rows`). The answer (ours): every arm's probe above both raw pixels
and the better of the two untrained-network rows.

- `48 epochs` (the `gpu` preset's budget) trains on the record's 5,000 images, so the record's trivial rows apply.
- `all images` trains 16 epochs on all 60,000 training images (3,744 steps). Its probe is fit on those images, so
  its trivial rows are computed on them too, and stored (`train`) with their commit, hardware and digest.
- `48 epochs, all images` joins the two (11,232 steps; 6 to 9 hours of one thread here for its four arms, from the
  16-epoch runs' times): more epochs narrowed the gap to raw pixels on 5,000 images, and all the images alone did
  not close it.

The pilot's runs train here (`python -m gradalign.experiments.isoloss.budget_pilot`, and `... --reverse` in a
second process to share them; `--arms L/ema,iso/ema` trains those arms, in that order), committed as every run.
A run's key names the device it trained on, so a GPU window's runs are other runs. A run whose readout collapses trains
on and is stored with its probe and where it collapsed (`training.siamese.first_collapse`; until 2026-11-28 a collapse
stopped the run, and the two it stopped here were trained again). A run the divergence rule stops (a NaN, an exploding
loss) is not stored as a run; it is a result all the same (that arm does not reach the trivial rows at this budget), so
`train` writes its error line with its provenance under the candidate's folder (`diverged.json`, with a digest), and the
page shows it. An edited or cut stored file is an error, never read.
"""

from __future__ import annotations

from dataclasses import dataclass

ARMS = ("L/ema", "L/no_ema", "iso/ema", "iso/no_ema")


@dataclass(frozen=True)
class Candidate:
    """One budget the pilot tries: `isoloss.tab1`'s `cpu` preset at `overrides`, seed 0 only."""

    name: str  # in words, as the page and the answer say it
    overrides: dict
    folder: str  # under the results store: its diverged runs, and its trivial rows when `own_images`
    own_images: bool  # trains (and probes) on other images than the record: its trivial rows are computed


CANDIDATES = (
    Candidate("48 epochs, 5,000 images", {"epochs": [48], "seeds": 1}, "pilots/isoloss.budget", False),
    Candidate(
        "16 epochs, all 60,000 images", {"train_subset": 0, "seeds": 1}, "pilots/isoloss.budget/all_images", True
    ),
    Candidate(
        "48 epochs, all 60,000 images",
        {"epochs": [48], "train_subset": 0, "seeds": 1},
        "pilots/isoloss.budget/all_images_48_epochs",
        True,
    ),
)


def _stored(root, candidate: Candidate, name: str) -> dict | None:
    """The candidate's stored document `name` (None: not written yet); an edited or cut file is an error."""
    from gradalign.store.atomic import read_digested
    from gradalign.store.store_root import results_root

    return read_digested((root or results_root()) / candidate.folder / name)


def _store(candidate: Candidate, name: str, document: dict) -> None:
    from gradalign.store.atomic import write_digested
    from gradalign.store.store_root import results_root

    write_digested(results_root() / candidate.folder / name, document)


def diverged(root=None, candidate: Candidate = CANDIDATES[0]) -> dict[str, dict]:
    """The candidate's diverged runs (arm -> {"why", provenance})."""
    return (_stored(root, candidate, "diverged.json") or {"runs": {}})["runs"]


def stored_trivial(root=None, candidate: Candidate = CANDIDATES[1]) -> dict | None:
    """The trivial rows computed on the candidate's images ({"rows": {row: [percent]}, provenance}), or None."""
    return _stored(root, candidate, "trivial.json")


def pilot_units(device=None, candidate: Candidate = CANDIDATES[0]) -> list:
    """The candidate's runs (one per arm, seed 0), as `isoloss.tab1`'s units at its overrides."""
    from gradalign.experiments import get
    from gradalign.experiments.isoloss.deep_siamese import siamese_units

    return siamese_units(get("isoloss.tab1").resolve("cpu", candidate.overrides), device)


def check_order(order: tuple[str, ...]) -> None:
    """A ValueError unless `order` names distinct arms among `ARMS`, at least one."""
    if not order or set(order) - set(ARMS) or len(set(order)) != len(order):
        raise ValueError(f"order: distinct arms among {', '.join(ARMS)}, got {order!r}")


def train(device="cpu", echo=print, reverse: bool = False, order: tuple[str, ...] = ARMS) -> None:
    """Each candidate's trivial rows (where it has its own images) and runs not committed yet, one at a time here;
    a diverged run is written to the candidate's `diverged.json`. `order`: the arms to train, in that order (the
    arms the answer needs first, say); `reverse`: last to first, so that a second process can share the work (a
    run in progress holds its key's lock: the other process waits for it and reads it, never trains it twice)."""
    check_order(order)
    from gradalign.environment import git_commit, hardware
    from gradalign.errors import DivergenceError
    from gradalign.experiments import get
    from gradalign.experiments.isoloss.deep_siamese import trivial
    from gradalign.store.run_unit import committed_runs, read_entry
    from gradalign.store.store_root import results_root

    runs = results_root() / "runs"
    for candidate in CANDIDATES:
        cfg = get("isoloss.tab1").resolve("cpu", candidate.overrides)
        if candidate.own_images and stored_trivial(None, candidate) is None:
            rows = trivial(cfg, cfg.datasets[0], cfg.epochs[0], device)
            _store(candidate, "trivial.json", {"rows": rows, "git_commit": git_commit(), "hardware": hardware(device)})
            echo(f"ok   {candidate.name}: trivial rows {rows}")
        units = dict(zip(ARMS, pilot_units(device, candidate)))
        pairs = [(arm, units[arm]) for arm in order]
        for arm, unit in reversed(pairs) if reverse else pairs:
            done = diverged(None, candidate)  # read again per arm: another process may have written it
            if arm in done or read_entry(runs, unit) is not None:
                continue
            try:
                with committed_runs(runs, write=True):
                    unit.run()
                echo(f"ok   {candidate.name}: {unit.label}")
            except DivergenceError as err:
                done[arm] = {
                    "why": str(err).rsplit("; ", 1)[0],
                    "git_commit": git_commit(),
                    "hardware": hardware(device),
                }
                _store(candidate, "diverged.json", {"runs": done})
                echo(f"diverged: {done[arm]['why']}")


def answer(
    probes: dict[str, float | None], raw_pixels: float, untrained: float, failed=(), at: str = "48 epochs, 5,000 images"
) -> str:
    """In words: whether every arm that Table 1's claims say holds up (`validity.HOLDS_UP`; its probe in `probes`,
    None: not trained; an arm in `failed`: diverged) is above both trivial rows, at the candidate named `at`. One of
    them diverged, or one trained below, answers no; L without EMA may fall (two claims say it loses accuracy)."""
    from gradalign.experiments.isoloss.validity import HOLDS_UP

    collapsed = [a for a in failed if a not in HOLDS_UP]
    note = f"; {', '.join(collapsed)} diverged, as two claims say it loses accuracy" if collapsed else ""
    failed = [a for a in failed if a in HOLDS_UP]
    if failed:
        rest = [a for a in HOLDS_UP if a not in failed and probes.get(a) is not None]
        below = [a for a in rest if probes[a] <= max(raw_pixels, untrained)]
        return (
            f"no: with {at}, {', '.join(failed)} diverged (the divergence rule stopped it), and "
            f"{len(below)} of the {len(rest)} other trained arms the claims need are not above both trivial rows{note}"
        )
    missing = [a for a in HOLDS_UP if probes.get(a) is None]
    below = [a for a in HOLDS_UP if a not in missing and probes[a] <= max(raw_pixels, untrained)]
    if below:  # decided: one arm below is enough
        trained, rest = len(HOLDS_UP) - len(missing), f" ({len(missing)} not trained yet)" if missing else ""
        return (
            f"no: with {at}, {len(below)} of the {trained} trained arms the claims need are not above both trivial "
            f"rows{rest}{note}"
        )
    if missing:
        trained = len(HOLDS_UP) - len(missing)
        return f"not answered yet with {at}: {trained} of the {len(HOLDS_UP)} runs the claims need trained{note}"
    return f"yes: with {at}, every arm the claims need is above raw pixels and the untrained network{note}"


RAW, UNTRAINED = "raw pixels", "untrained network, better BN reading"


def step_of(why: str) -> str:
    """ "step N" from a divergence or collapse line (`methods.divergence`: "<run> diverged at step N: ...",
    `training.siamese.first_collapse`: "... collapsed at step N: ..."); a line in another form is an error."""
    import re

    found = re.search(r" (?:diverged|collapsed) at (step \d+):", why)
    if found is None:
        raise ValueError(f"no 'diverged/collapsed at step N:' in {why!r}")
    return found.group(1)


def _collapsed(probe: float | None, entry: dict | None):
    """A run's probe (%), marked when its readout collapsed on the way (`training.siamese.first_collapse`)."""
    collapsed = entry and entry["value"].get("collapsed")
    return f"{probe:.2f} (collapsed at {step_of(collapsed)})" if collapsed else probe


def _trivial_pair(rows: dict[str, list[float]]) -> tuple[float, float]:
    """Seed 0's raw-pixel row and the better of its two untrained-network rows."""
    return rows["raw_pixels"][0], max(rows["random_init"][0], rows["random_init_data_bn"][0])


def pilot_columns(record: dict, pilots: list[tuple[Candidate, dict, dict, dict | None]]) -> tuple[dict, list[str]]:
    """The page's columns ({title: {row: value}}: the record's seed 0, then each candidate) and one answer per
    candidate. `pilots`: (candidate, arm -> its committed run entry or None, arm -> why it diverged, its stored
    trivial rows or None); a candidate without `own_images` is compared with the record's trivial rows."""
    name = record["config"]["datasets"][0]
    record_pair = _trivial_pair(record["metrics"]["trivial"][name])
    epochs, subset = record["config"]["epochs"][0], record["config"]["train_subset"]
    first = {a: record["metrics"][f"{name}/{a}"]["probe"][0] for a in ARMS}
    columns = {
        f"{epochs} epochs, {subset:,} images (the record)": {**first, RAW: record_pair[0], UNTRAINED: record_pair[1]}
    }
    answers = []
    for candidate, entries, failed, stored in pilots:
        probes = {a: (100 * e["value"]["probe_test_acc"] if e else None) for a, e in entries.items()}
        pair = (
            record_pair
            if not candidate.own_images
            else _trivial_pair(stored["rows"])
            if stored
            else ("not computed",) * 2
        )
        shown = {a: failed.get(a, _collapsed(probes.get(a), entries.get(a))) for a in ARMS}
        columns[candidate.name] = {**shown, RAW: pair[0], UNTRAINED: pair[1]}
        if stored is None and candidate.own_images:
            answers.append(f"not answered yet with {candidate.name}: the trivial rows on its images are not computed")
        else:
            answers.append(answer(probes, *pair, [a for a in ARMS if a in failed], candidate.name))
    return columns, answers


def cell(value) -> str:
    """A table cell: a percentage to 2 decimals, words as they are, a missing run (None, or NaN in a data frame's
    float column) as "not trained"."""
    import math

    if isinstance(value, str):
        return value
    return "not trained" if value is None or math.isnan(value) else f"{value:.2f}"


def pilot_view(record: dict):
    """The page's table (a data frame: arms and trivial rows by budget) and its answers, one per candidate, from the
    committed runs and stored files only (never trains)."""
    import pandas as pd

    from gradalign.experiments.isoloss.deep_siamese import TITLES
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    pilots, notes = [], []
    for candidate in CANDIDATES:
        units = pilot_units("cpu", candidate)
        entries = {arm: read_entry(results_root() / "runs", u) for arm, u in zip(ARMS, units)}
        stopped = diverged(None, candidate)
        failed = {a: f"diverged at {step_of(d['why'])}" for a, d in stopped.items()}
        pilots.append((candidate, entries, failed, stored_trivial(None, candidate) if candidate.own_images else None))
        notes.append([f"; {d['why']} ({d['hardware']}, commit {d['git_commit'][:7]})" for d in stopped.values()])
    columns, answers = pilot_columns(record, pilots)
    for i, arm_names in enumerate(notes):
        for arm in ARMS:
            answers[i] = answers[i].replace(arm, TITLES[arm])
        answers[i] += "".join(arm_names)
    frame = pd.DataFrame(columns).rename(index=TITLES)
    frame.index.name = "probe accuracy (%)"
    return frame.map(cell), answers


if __name__ == "__main__":
    import argparse

    from gradalign.runtime import pin_threads

    parser = argparse.ArgumentParser(prog="python -m gradalign.experiments.isoloss.budget_pilot")
    parser.add_argument("--reverse", action="store_true", help="the arms last to first (a second process)")
    parser.add_argument("--arms", default=",".join(ARMS), help="the arms to train, in that order (comma-separated)")
    args = parser.parse_args()
    try:
        check_order(tuple(args.arms.split(",")))
    except ValueError as err:
        parser.error(str(err))
    pin_threads(1)
    train(reverse=args.reverse, order=tuple(args.arms.split(",")))
