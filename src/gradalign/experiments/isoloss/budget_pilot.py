"""IsoLoss part, Table 1's budget: does a longer pre-training lift every arm above the trivial rows? (our pilot;
notebook isoloss/03)

Table 1's `cpu` record is inconclusive because no self-supervised arm's probe beats raw pixels' (78.2 %): 16 epochs of
5,000 images are about 300 SGD steps. Before a rerun's seeds are trained, this pilot asks whether a longer budget is
enough: seed 0 of each arm, trained on the `cpu` preset's images at `EPOCHS` epochs (the `gpu` preset's budget, our
candidate), everything else unchanged. Its probes are compared with seed 0's trivial rows in the `cpu` record: the
same images, the same probe and the same initial network (`trivial_rows`). The answer (ours): every arm's probe above
both raw pixels and the better of the two untrained-network rows.

The pilot's runs train here (`python -m gradalign.experiments.isoloss.budget_pilot`: `isoloss.tab1`'s units at the
overrides `OVERRIDES`, trained and committed as every run). A run's key names the device it trained on, so a GPU
window's runs at the `gpu` preset are other runs. A run the divergence rule stops is not stored as a run; it is a
result of the pilot all the same (that arm does not reach the trivial rows at this budget), so `train` writes its
error line, with its provenance and digest, to `DIVERGED` under the results store, and the page shows it.
"""

from __future__ import annotations

EPOCHS = 48
OVERRIDES = {"epochs": [EPOCHS], "seeds": 1}
"""The pilot's runs: `isoloss.tab1`'s `cpu` preset at the `gpu` preset's epochs, seed 0 only."""
ARMS = ("L/ema", "L/no_ema", "iso/ema", "iso/no_ema")
DIVERGED = "pilots/isoloss.budget/diverged.json"  # under the results store: arm -> the stopped run's error line


def diverged(root=None) -> dict[str, dict]:
    """The pilot's diverged runs (arm -> {"why", provenance}); an edited or cut file is an error, never read."""
    from gradalign.store.atomic import StoredJSONError, content_digest, read_json_strict
    from gradalign.store.store_root import results_root

    path = (root or results_root()) / DIVERGED
    if not path.exists():
        return {}
    document = read_json_strict(path)
    if document.get("digest") != content_digest(document):
        raise StoredJSONError(f"{path}: its digest does not match its content (edited?)")
    return document["runs"]


def train(device="cpu", echo=print) -> None:
    """Train the pilot's runs not committed yet, one at a time here; a diverged one is written to `DIVERGED`."""
    from gradalign.environment import git_commit, hardware
    from gradalign.errors import DivergenceError
    from gradalign.store.atomic import content_digest, write_json_atomically
    from gradalign.store.run_unit import committed_runs, read_entry
    from gradalign.store.store_root import results_root

    runs, done = results_root() / "runs", diverged()
    for arm, unit in zip(ARMS, pilot_units(device)):
        if arm in done or read_entry(runs, unit) is not None:
            continue
        try:
            with committed_runs(runs, write=True):
                unit.run()
            echo(f"ok   {unit.label}")
        except DivergenceError as err:
            done[arm] = {"why": str(err).rsplit("; ", 1)[0], "git_commit": git_commit(), "hardware": hardware(device)}
            document = {"runs": done}
            write_json_atomically(results_root() / DIVERGED, {**document, "digest": content_digest(document)})
            echo(f"diverged: {done[arm]['why']}")


def pilot_units(device=None) -> list:
    """The pilot's runs (one per arm, seed 0), as `isoloss.tab1`'s units at `OVERRIDES`."""
    from gradalign.experiments import get
    from gradalign.experiments.isoloss.deep_siamese import siamese_units

    return siamese_units(get("isoloss.tab1").resolve("cpu", OVERRIDES), device)


def answer(probes: dict[str, float | None], raw_pixels: float, untrained: float, failed=()) -> str:
    """In words: whether every arm's probe (None: not trained; an arm in `failed`: diverged) is above both trivial
    rows; a diverged arm answers no."""
    if failed:
        rest = [a for a in ARMS if a not in failed and probes.get(a) is not None]
        below = [a for a in rest if probes[a] <= max(raw_pixels, untrained)]
        return (
            f"no: at {EPOCHS} epochs {', '.join(failed)} diverged (the divergence rule stopped it), and "
            f"{len(below)} of the {len(rest)} other trained arms are not above both trivial rows"
        )
    missing = [a for a in ARMS if probes.get(a) is None]
    if missing:
        return f"not answered yet: {len(ARMS) - len(missing)} of {len(ARMS)} runs trained"
    below = [a for a in ARMS if probes[a] <= max(raw_pixels, untrained)]
    if not below:
        return f"yes: at {EPOCHS} epochs every arm's probe is above raw pixels and the untrained network"
    return f"no: at {EPOCHS} epochs {len(below)} of {len(ARMS)} arms are not above both trivial rows"


def pilot_rows(record: dict, entries: dict[str, dict | None], failed=None) -> tuple[list[dict], str]:
    """One row per arm (seed 0's probe at the record's budget and at `EPOCHS`) and the answer; `entries`: arm ->
    the committed run entry of the pilot (None: not trained); `failed`: arm -> why it diverged."""
    failed = failed or {}
    name = record["config"]["datasets"][0]
    trivial = record["metrics"]["trivial"][name]
    raw, untrained = trivial["raw_pixels"][0], max(trivial["random_init"][0], trivial["random_init_data_bn"][0])
    probes = {a: (100 * e["value"]["probe_test_acc"] if e else None) for a, e in entries.items()}
    epochs = record["config"]["epochs"][0]
    rows = [
        {
            "arm": arm,
            f"probe at {epochs} epochs (%)": record["metrics"][f"{name}/{arm}"]["probe"][0],
            f"probe at {EPOCHS} epochs (%)": failed[arm] if arm in failed else probes.get(arm),
            "raw pixels (%)": raw,
            "untrained network, better BN reading (%)": untrained,
        }
        for arm in ARMS
    ]
    titles = [a for a in ARMS if a in failed]
    return rows, answer(probes, raw, untrained, titles)


def pilot_view(record: dict):
    """The page's table (a data frame) and answer, from the committed runs only (never trains)."""
    import pandas as pd

    from gradalign.experiments.isoloss.deep_siamese import TITLES
    from gradalign.store.run_unit import read_entry
    from gradalign.store.store_root import results_root

    units = pilot_units("cpu")
    entries = {arm: read_entry(results_root() / "runs", u) for arm, u in zip(ARMS, units)}
    stopped = diverged()
    failed = {arm: "diverged at " + d["why"].split(" diverged at ")[-1].split(":")[0] for arm, d in stopped.items()}
    rows, text = pilot_rows(record, entries, failed)
    for row in rows:
        row["arm"] = TITLES.get(row["arm"], row["arm"])
    frame = pd.DataFrame(rows).set_index("arm")
    for arm, d in stopped.items():
        text = text.replace(arm, TITLES[arm]) + f"; {d['why']} ({d['hardware']}, commit {d['git_commit'][:7]})"
    return frame.map(lambda v: "not trained" if v is None else v if isinstance(v, str) else f"{v:.2f}"), text


if __name__ == "__main__":
    from gradalign.runtime import pin_threads

    pin_threads(1)
    train()
