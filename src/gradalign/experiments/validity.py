"""Which elements are empirical, and how each one's preconditions and claims are derived from its record.

An element listed here is *empirical* (`gradalign.experiments.verdict`): its verdict needs a valid test. Each entry is
(preconditions, claims): `preconditions(record)` measures the test's validity from the record's metrics and
curves; `claims(record)` re-derives the claim checks from the stored per-seed metrics under the current rules
(None: the experiment's own checks stand). Every other element is analytic.
"""

from __future__ import annotations

from typing import Callable

from gradalign.experiments.isoloss.validity import VALIDITY as ISOLOSS
from gradalign.experiments.lga.validity import VALIDITY as LGA
from gradalign.experiments.metagrad.validity import VALIDITY as METAGRAD
from gradalign.experiments.sgr.validity import VALIDITY as SGR

from gradalign.experiments.rules import not_recorded

Assessment = tuple[Callable[[dict], dict], Callable[[dict], dict | None] | None]


def imagenet(record: dict) -> dict:
    """The ImageNet rows (sgr.tab2, sgr.tab5, metagrad.tab3) record no per-seed curves a valid test needs yet."""
    return {"finished_learning": not_recorded("the runs finished learning", "the validation curve of every seed")}


IMAGENET = {eid: (imagenet, None) for eid in ("sgr.tab2", "sgr.tab5", "metagrad.tab3")}
EMPIRICAL: dict[str, Assessment] = {**LGA, **METAGRAD, **ISOLOSS, **SGR, **IMAGENET}


def evidence_of(element_id: str) -> str:
    return "empirical" if element_id in EMPIRICAL else "analytic"
