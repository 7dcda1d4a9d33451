"""What a verdict can speak for (rules version 4): claims tested on a substitute data set, claims that are our
reading, and which elements share their runs. The scoreboards count these apart.

- **Tested on a substitute** (`SUBSTITUTE`). A claim whose content is specific to a data set we do not have here
  (CIFAR-10's or SVHN's numbers and curves) is run on Fashion-MNIST. Its checks still decide the claims about a
  method's behaviour (A beats B), with the substitute named. But a "not reproduced" there is not evidence against
  the paper's CIFAR-10 or SVHN result, so the scoreboards count such an element apart, whatever its verdict.
- **Our reading** (`OUR_READING`). The paper's text states no claim for the element; its checks are our reading of
  the paper's figure. Shown with its verdict, not counted.
- **Independent run sets** (`run_sets`). Elements that read the same committed runs (`lga.fig5` and `fig7` share
  their Fashion-MNIST runs; `sgr.tab4` and Figures 2-4 share one set) are one test, however many elements show it.
"""

from __future__ import annotations

SUBSTITUTE = {
    "lga.fig5": "CIFAR-10",
    "lga.fig6": "SVHN",
    "lga.tab1": "CIFAR-10 and SVHN",
}
"""Element -> the data set its claims are about (LGA's Figures 5 and 6 and Table 1, `elements.py`)."""

PAPER_DATA = ("cifar10", "svhn")  # the names of those data sets in a config

OUR_READING = {
    "sgr.fig4": "the paper's text states no claim about Figure 4; its checks are our reading of the curves",
}


def on_substitute(record: dict) -> str | None:
    """The paper's data set the record stands in for, when it ran on a substitute; None otherwise."""
    if record["id"] not in SUBSTITUTE:
        return None
    config = record.get("config", {})
    used = {config.get("dataset"), *config.get("datasets", []), *(c[0] for c in config.get("columns", []))}
    return None if used & set(PAPER_DATA) else SUBSTITUTE[record["id"]]


def counted(record: dict | None, element_id: str) -> bool:
    """Whether an element's verdict counts in the scoreboard's tallies (not a substitute, not our reading)."""
    if element_id in OUR_READING:
        return False
    return record is None or on_substitute(record) is None


def run_sets(records: dict[str, dict]) -> list[list[str]]:
    """The empirical records grouped by the committed runs they read (`committed.units`): records that share a
    run are one set (connected components of "shares a run"). A record with no units is a set of its own."""
    from gradalign.experiments.committed import units

    keys = {eid: {(u.kind, u.key) for u in units(r)} for eid, r in records.items()}
    sets: list[tuple[set, list[str]]] = []
    for eid in records:
        mine, members = set(keys[eid]), [eid]
        for other in [s for s in sets if s[0] & mine]:
            sets.remove(other)
            mine |= other[0]
            members = other[1] + members
        sets.append((mine, members))
    return [sorted(members) for _, members in sets]
