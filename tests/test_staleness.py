"""Staleness by behaviour (`fingerprint.behaviour_fingerprint`, `canary.code_status`).

A record is current when the code it ran cannot have changed its numbers: the same bytes, or the same
definitions (docstrings, comments, formatting and the file a definition lives in do not count), or, failing
both, the same outcome of its smoke canary, which is then said ("current by canary"), never hidden.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from gradalign.store.fingerprint import PACKAGE, behaviour_fingerprint, changed_files, module_behaviour

BEFORE = '''
"""A module."""
import math

SCALE = 2.0


def loss(x):
    """The loss."""
    # a comment
    return SCALE * math.sqrt(x)
'''


def test_docstrings_comments_and_formatting_do_not_move_the_fingerprint():
    edited = BEFORE.replace('"""The loss."""', '"""The loss, Eq. 3 (better words)."""').replace("# a comment", "")
    edited = edited.replace("SCALE * math.sqrt(x)", "SCALE*math.sqrt( x )") + "\n\n"
    assert module_behaviour(edited) == module_behaviour(BEFORE)


@pytest.mark.parametrize(
    "edit, moved",
    [
        (("SCALE = 2.0", "SCALE = 3.0"), ["SCALE"]),
        (("return SCALE", "return 1 + SCALE"), ["loss"]),
        (("def loss(x)", "def objective(x)"), ["loss", "objective"]),
        (("import math", "import cmath as math"), ["import math"]),
    ],
)
def test_a_change_of_behaviour_moves_exactly_the_definition_it_touches(edit, moved):
    assert changed_files(module_behaviour(BEFORE), module_behaviour(BEFORE.replace(*edit))) == moved


def _copy_package(tmp_path: Path) -> Path:
    copy = tmp_path / "gradalign"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _experiment_modules() -> dict[str, str]:
    from gradalign.experiments import EXPERIMENTS

    return {eid: exp.run.__module__ for eid, exp in EXPERIMENTS.items()}


def test_moving_a_module_to_a_new_file_name_keeps_every_experiments_fingerprint(tmp_path):
    copy = _copy_package(tmp_path)
    (copy / "sizes.py").rename(copy / "allocation_sizes.py")  # imported by the experiments' config layer
    for path in copy.rglob("*.py"):
        text = path.read_text()
        if "gradalign.sizes" in text:
            path.write_text(text.replace("gradalign.sizes", "gradalign.allocation_sizes"))
    modules = _experiment_modules()
    users = [eid for eid, m in modules.items() if (copy / "allocation_sizes.py") in _closure(m, copy)]
    assert users, "sizes.py is in no experiment's closure: the test would prove nothing"
    for eid, module in modules.items():
        assert behaviour_fingerprint(module, copy) == behaviour_fingerprint(module), eid


def _closure(module: str, package: Path) -> list[Path]:
    from gradalign.store.fingerprint import library_closure

    return library_closure(f"import {module}", parents=False, package=package)


def test_the_module_index_finds_what_import_finds_a_package_before_a_module_of_its_name(tmp_path):
    from gradalign.store.fingerprint import module_index

    for rel in ("__init__.py", "a.py", "b.py", "b/__init__.py", "b/c.py", "b/c/__init__.py", "b/d.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    index = {name: Path(path).relative_to(tmp_path).as_posix() for name, path in module_index(tmp_path).items()}
    assert index == {
        "gradalign": "__init__.py",
        "gradalign.a": "a.py",
        "gradalign.b": "b/__init__.py",
        "gradalign.b.c": "b/c/__init__.py",
    }


@pytest.mark.parametrize(
    "edit, named",
    [
        (("clamp_min(TINY)", "clamp_min(2 * TINY)"), ["normalized"]),  # a constant inside the loss's body
        (("TINY = 1e-12", "TINY = 1e-10"), ["TINY"]),  # the module's constant itself
    ],
)
def test_one_constant_in_one_loss_makes_exactly_its_users_stale_and_names_it(tmp_path, edit, named):
    copy = _copy_package(tmp_path)
    loss = copy / "methods" / "sgr.py"
    text = loss.read_text()
    assert text.count(edit[0]) == 1
    loss.write_text(text.replace(*edit))
    users = 0
    for eid, module in _experiment_modules().items():
        moved = changed_files(behaviour_fingerprint(module), behaviour_fingerprint(module, copy))
        uses = loss in _closure(module, copy)
        users += uses
        assert moved == (named if uses else []), eid
    assert users, "no experiment runs methods/sgr.py: the test would prove nothing"


@pytest.fixture(scope="module")
def _computed_record(tmp_path_factory):
    """lga.prop1 computed at smoke in a scratch store, stamped with its canary as `canary.stamp` does: once per
    module (3.5 s of compute), as nothing here edits the store it was saved in (each test gets a copy of it)."""
    from gradalign.records.canary import FORMAT, _torch_version, run_canary
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import run

    folder = tmp_path_factory.mktemp("staleness")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADALIGN_CACHE", str(folder / "cache"))
        mp.setenv("GRADALIGN_RESULTS", str(folder / "results"))
        record = run("lga.prop1", "smoke", store=ResultStore(folder / "results"), device="cpu", force=True)
        digest = run_canary("lga.prop1")[FORMAT]
    record["provenance"]["canary"] = {"digest": digest, "format": FORMAT, "torch": _torch_version()}
    return record, folder / "results"


@pytest.fixture
def smoke_record(_computed_record, tmp_path, monkeypatch):
    """The record above (a fresh copy), its store copied to this test's scratch store, where today's canaries are
    kept (`GRADALIGN_RESULTS`), with a fresh run cache."""
    record, results = _computed_record
    shutil.copytree(results, tmp_path / "results")
    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    return copy.deepcopy(record)


def _as_if_code_changed(record: dict, name: str = "shells_prop1") -> dict:
    """The record as if computed by other code: one file's bytes and one definition's digest differ."""
    provenance = {**record["provenance"]}
    provenance["code"] = {**provenance["code"], next(iter(provenance["code"])): "0" * 16}
    provenance["behaviour"] = {**provenance["behaviour"], name: "0" * 16}
    return {**record, "provenance": provenance}


def test_a_fresh_record_is_current_and_an_edited_file_with_the_same_definitions_stays_current(smoke_record):
    from gradalign.records.canary import code_status

    assert code_status(smoke_record)["state"] == "current"
    bytes_only = {**smoke_record, "provenance": {**smoke_record["provenance"]}}
    bytes_only["provenance"]["code"] = {k: "0" * 16 for k in smoke_record["provenance"]["code"]}
    status = code_status(bytes_only, run=False)
    assert status["state"] == "current" and "no definition changed" in status["why"]


def test_a_change_the_canary_does_not_see_is_current_by_canary_and_names_what_changed(smoke_record):
    from gradalign.records.canary import code_status, stale_files

    name = next(iter(smoke_record["provenance"]["behaviour"]))
    status = code_status(_as_if_code_changed(smoke_record, name))
    assert status["state"] == "current by canary" and status["why"] == "smoke canary identical"
    assert status["changed"] and status["changed"][0].startswith(name)
    assert stale_files(_as_if_code_changed(smoke_record, name)) == []


@pytest.mark.parametrize(
    "canary, why",
    [
        ({"digest": "f" * 16}, "smoke canary differs"),
        ({"digest": None}, "no smoke canary stored with the record"),
        (None, "no smoke canary stored with the record"),
        ({"digest": "f" * 16, "torch": "1.0"}, "its canary ran under torch 1.0"),
    ],
)
def test_a_record_whose_canary_differs_or_is_missing_is_stale(smoke_record, canary, why):
    from gradalign.records.canary import code_status, machine_kind, stale_files

    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    if canary is None:
        record["provenance"].pop("canary")
    else:
        record["provenance"]["canary"] = {"torch": record["provenance"]["canary"]["torch"], **canary}
    status = code_status(record)
    if why == "smoke canary differs":  # the record's canary names no kind: compared with today's on this kind
        here = machine_kind()
        why = f"smoke canary differs on this CPU kind ({here}) and on every kept one (the record's names no kind)"
    assert status["state"] == "stale" and status["why"] == why
    assert stale_files(record) == status["changed"] != []


def test_the_canary_leaves_timing_out_of_its_digest_and_nothing_else():
    from gradalign.records.canary import outcome_digest

    record = {"metrics": {"error": 0.25, "train_seconds": 3.0, "benchmark": {"jvp_over_fd": 1.2}}, "curves": {}}
    timed = {**record, "metrics": {**record["metrics"], "train_seconds": 9.0, "benchmark": {"jvp_over_fd": 2.0}}}
    assert outcome_digest(timed) == outcome_digest(record)
    assert outcome_digest({**record, "metrics": {**record["metrics"], "error": 0.2500001}}) != outcome_digest(record)


def test_format_2_ignores_what_lies_below_1e_12_and_a_format_1_canary_is_read_in_format_1(smoke_record):
    from gradalign.records.canary import code_status, outcome_digest, run_canary

    tiny = {"metrics": {"bound": 1.40435238e-12, "error": 0.25}, "curves": {}}
    noisy = {"metrics": {"bound": 1.40432582e-12, "error": 0.25}, "curves": {}}
    assert outcome_digest(tiny, 2) == outcome_digest(noisy, 2) and outcome_digest(tiny, 1) != outcome_digest(noisy, 1)
    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    record["provenance"]["canary"] = {
        "digest": run_canary("lga.prop1")[1],
        "torch": record["provenance"]["canary"]["torch"],
    }
    assert code_status(record)["state"] == "current by canary"  # no format named: format 1
    record["provenance"]["canary"]["format"] = 2  # the format-1 digest read as format 2 differs
    assert code_status(record)["state"] == "stale"


def test_todays_canary_is_kept_beside_the_records_and_read_only_for_its_own_id_and_torch(smoke_record, tmp_path):
    import json

    from gradalign.records.canary import FORMAT, _cache_path, todays_canary
    from gradalign.store.fingerprint import behaviour_fingerprint

    behaviour = behaviour_fingerprint("gradalign.experiments.lga.linear")
    digest = todays_canary("lga.prop1", behaviour)
    path = _cache_path("lga.prop1", behaviour)
    assert path.is_relative_to(tmp_path / "results" / "canaries") and json.loads(path.read_text())["id"] == "lga.prop1"
    assert digest == smoke_record["provenance"]["canary"]["digest"]
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "id": "lga.fig1", "digests": {str(FORMAT): "0" * 16}}))
    assert todays_canary("lga.prop1", behaviour) == digest  # another id's entry is not read: the canary ran again


def test_a_canary_is_compared_with_one_of_the_records_cpu_kind_where_it_can_be(smoke_record, monkeypatch):
    """Seeded CPU runs differ across kinds of CPU: a kept canary of another kind than the record's is passed over
    where this machine is of the record's kind (the canary runs here, and the kept one stays); where no canary of
    the record's kind can be had, a differing digest says that the CPUs differ."""
    import json

    from gradalign.records import canary
    from gradalign.records.canary import _cache_path, code_status, machine_kind
    from gradalign.store.fingerprint import behaviour_fingerprint

    here = machine_kind()
    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    record["provenance"]["canary"] = {**record["provenance"]["canary"], "cpu": here}
    path = _cache_path("lga.prop1", behaviour_fingerprint("gradalign.experiments.lga.linear"))
    other = {
        "id": "lga.prop1",
        "digests": {"1": "0" * 16, "2": "0" * 16},
        "torch": record["provenance"]["canary"]["torch"],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**other, "cpu": "OTHER"}))
    assert code_status(record)["state"] == "current by canary"  # ran here, on the record's kind
    assert json.loads(path.read_text())["cpu"] == "OTHER"  # the kept canary stays, for its own kind
    kept = json.loads(path.read_text())
    assert kept["by_cpu"][here] == {"1": kept["by_cpu"][here]["1"], "2": record["provenance"]["canary"]["digest"]}
    ran = []
    monkeypatch.setattr(canary, "run_canary", lambda element_id: ran.append(element_id))
    assert code_status(record)["state"] == "current by canary" and ran == []  # kept beside the other: read, not run
    path.write_text(json.dumps({**other, "cpu": "OTHER"}))
    stale = code_status(record, run=False)  # not to run here: the other kind's canary is all there is
    assert stale["state"] == "stale" and "of kind OTHER and the record's on one of kind " + here in stale["why"]
    record["provenance"]["canary"]["cpu"] = "THIRD"  # a kind this machine is not: the kept one is compared
    assert code_status(record)["state"] == "stale" and ran == []
    path.write_text(json.dumps(other))  # a kept canary that names no kind: compared as it is
    record["provenance"]["canary"]["cpu"] = here
    assert code_status(record)["why"] == "smoke canary differs" and ran == []


def test_a_canary_that_names_no_cpu_kind_is_compared_with_this_kinds_and_with_each_kept_one(smoke_record, monkeypatch):
    """A record stamped before canaries named their CPU kind: a kept canary of any kind equal to its digest clears
    it; else today's canary on this kind is run (or read) and compared, never another kind's alone. The failing
    cases: a digest no kind gives is stale and says the record's canary names no kind; not to run here, with only
    another kind's kept, the canary is missing."""
    import json

    from gradalign.records import canary
    from gradalign.records.canary import _cache_path, code_status, machine_kind
    from gradalign.store.fingerprint import behaviour_fingerprint

    here = machine_kind()
    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    assert "cpu" not in record["provenance"]["canary"]
    path = _cache_path("lga.prop1", behaviour_fingerprint("gradalign.experiments.lga.linear"))
    other = {"id": "lga.prop1", "digests": {"1": "0" * 16, "2": "0" * 16}, "cpu": "OTHER"}
    other["torch"] = record["provenance"]["canary"]["torch"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(other))
    assert code_status(record, run=False)["why"] == "smoke canary not run on today's code"  # OTHER's is not here's
    assert code_status(record)["state"] == "current by canary"  # ran here: this kind gives the record's digest
    assert json.loads(path.read_text())["by_cpu"][here]["2"] == record["provenance"]["canary"]["digest"]
    ran = []
    monkeypatch.setattr(canary, "run_canary", lambda element_id: ran.append(element_id))
    record["provenance"]["canary"]["digest"] = "0" * 16  # OTHER's kept digest: OTHER is the record's kind
    cleared = code_status(record)
    assert cleared["state"] == "current by canary" and "kind OTHER" in cleared["why"] and ran == []
    record["provenance"]["canary"]["digest"] = "f" * 16  # no kind gives it
    stale = code_status(record)
    assert (
        stale["state"] == "stale" and f"on this CPU kind ({here})" in stale["why"] and "names no kind" in stale["why"]
    )
    kept = json.loads(path.read_text())
    path.write_text(json.dumps({**kept, "by_cpu": {**kept["by_cpu"], "BROKEN": "f" * 16}}))  # not a dict of digests
    assert code_status(record)["state"] == "stale"  # read past, never raised
    del kept["cpu"], kept["by_cpu"]  # a kept canary that names no kind, with the record's digest
    path.write_text(json.dumps({**kept, "digests": {"1": "f" * 16, "2": "f" * 16}}))
    same = code_status(record, run=False)
    assert same["state"] == "current by canary"
    assert same["why"] == "smoke canary identical (the record's canary names no kind)"
    assert ran == []


def test_a_record_stamped_on_this_cpu_kind_too_is_compared_with_that_canary(smoke_record):
    """A record whose canary ran on another CPU kind, and whose code's canary on this kind was added while it was
    current (`by_cpu`): today's canary here is compared with that one. The failing cases: a `by_cpu` digest that
    today's canary does not give leaves the record stale, and says on which kind it differs; and where only another
    kind's canary of today's code is kept and none may run here, the record is not cleared by it, even where its
    digest equals `by_cpu`'s: the canary is missing."""
    import json

    from gradalign.records.canary import _cache_path, code_status, machine_kind, missing_canaries
    from gradalign.store.fingerprint import behaviour_fingerprint

    here = machine_kind()
    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    today = record["provenance"]["canary"]["digest"]
    record["provenance"]["canary"] = {**record["provenance"]["canary"], "digest": "e" * 16, "cpu": "OTHER"}
    record["provenance"]["canary"]["by_cpu"] = {here: today}
    path = _cache_path("lga.prop1", behaviour_fingerprint("gradalign.experiments.lga.linear"))
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {"id": "lga.prop1", "digests": {"1": today, "2": today}, "torch": record["provenance"]["canary"]["torch"]}
    path.write_text(json.dumps({**kept, "cpu": "THIRD"}))  # another kind's, with the very digest of by_cpu
    status = code_status(record, run=False)
    assert status["state"] == "stale" and status["why"] == "smoke canary not run on today's code"
    assert missing_canaries([record]) == ["lga.prop1"]
    path.unlink()
    assert (
        code_status(
            {
                **record,
                "provenance": {
                    **record["provenance"],
                    "canary": {k: v for k, v in record["provenance"]["canary"].items() if k != "by_cpu"},
                },
            }
        )["state"]
        == "stale"
    )
    status = code_status(record)  # runs here, kept beside nothing else
    assert status["state"] == "current by canary" and f"on this CPU kind ({here})" in status["why"]
    record["provenance"]["canary"]["by_cpu"] = {here: "f" * 16}
    status = code_status(record)
    assert status["state"] == "stale" and status["why"] == f"smoke canary differs (on this CPU kind, {here})"


def test_a_record_whose_code_ran_on_a_kind_this_machine_is_not_is_cleared_by_todays_kept_canary_of_that_kind(
    smoke_record, monkeypatch
):
    """On a machine of a kind the record's canary never ran on, today's kept canaries on the kinds it did run on
    (its own, and those in `by_cpu`) compare like with like, and nothing runs: equal on one and differing on none,
    the record is current by canary, also where its own canary names no kind. The failing cases: a difference on
    any such kind, even beside an equality on another, makes it stale; a kept canary of a kind the record names not
    decides nothing (compared across kinds, stale)."""
    import json

    from gradalign.records import canary
    from gradalign.records.canary import _cache_path, code_status
    from gradalign.store.fingerprint import behaviour_fingerprint

    ran = []
    monkeypatch.setattr(canary, "run_canary", lambda element_id: ran.append(element_id))
    record = _as_if_code_changed(smoke_record, next(iter(smoke_record["provenance"]["behaviour"])))
    torch_version = record["provenance"]["canary"]["torch"]
    record["provenance"]["canary"] = {
        **record["provenance"]["canary"],
        "digest": "a" * 16,
        "cpu": "OTHER",
        "by_cpu": {"SECOND": "b" * 16},
    }
    path = _cache_path("lga.prop1", behaviour_fingerprint("gradalign.experiments.lga.linear"))
    path.parent.mkdir(parents=True, exist_ok=True)

    def keep(cpu: str, digest: str, **by_cpu: str) -> None:
        entry = {"id": "lga.prop1", "torch": torch_version, "cpu": cpu, "digests": {"1": digest, "2": digest}}
        path.write_text(json.dumps({**entry, "by_cpu": {k: {"1": d, "2": d} for k, d in by_cpu.items()}}))

    keep("OTHER", "a" * 16, SECOND="b" * 16)  # equal on both kinds the record ran on
    status = code_status(record, run=False)
    assert status["state"] == "current by canary" and "kind SECOND and OTHER" in status["why"] and ran == []
    keep("SECOND", "b" * 16)  # only one of them kept, equal there
    status = code_status(record, run=False)
    assert status["state"] == "current by canary" and "kind SECOND" in status["why"] and ran == []
    keep("OTHER", "c" * 16, SECOND="b" * 16)  # equal on SECOND, but the record's own kind differs
    status = code_status(record)
    assert status["state"] == "stale" and "differs on a CPU of kind OTHER" in status["why"] and ran == []
    keep("THIRD", "b" * 16)  # SECOND's digest, on a kind the record never ran on: not like with like
    status = code_status(record, run=False)
    assert status["state"] == "stale" and ran == []
    assert status["why"].endswith(canary.BARE)  # OTHER names no vendor: a label no machine reports now
    del record["provenance"]["canary"]["cpu"]  # stamped before canaries named their kind, with a by_cpu
    keep("SECOND", "b" * 16)
    status = code_status(record, run=False)
    assert status["state"] == "current by canary" and "kind SECOND" in status["why"] and ran == []


def test_stamp_this_cpu_adds_this_kinds_canary_to_current_records_only(smoke_record, tmp_path):
    """`stamp_this_cpu` gives a record that is current by a canary of its own kind (OTHER, kept) its code's canary
    on this kind, in the record's format; a stale record (its canary differs on its own kind) gets none, and a
    record that has one is left as it is."""
    import json

    from gradalign.records.canary import _cache_path, code_status, machine_kind, run_canary
    from gradalign.records.canary_stamp import stamp_this_cpu
    from gradalign.records.results import ResultStore
    from gradalign.store.fingerprint import behaviour_fingerprint

    here, store = machine_kind(), ResultStore(tmp_path / "results")
    (path,) = store.root.glob("lga/*/*.json")
    torch_version = smoke_record["provenance"]["canary"]["torch"]
    kept = _cache_path("lga.prop1", behaviour_fingerprint("gradalign.experiments.lga.linear"))
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(
        json.dumps(
            {"id": "lga.prop1", "digests": {"1": "a" * 16, "2": "b" * 16}, "torch": torch_version, "cpu": "OTHER"}
        )
    )
    for digest, expect in (("e" * 16, 0), ("a" * 16, 1)):  # stale on its own kind (differs), then current by it
        record = _as_if_code_changed(json.loads(path.read_text()))
        record["provenance"]["canary"] = {"digest": digest, "format": 1, "torch": torch_version, "cpu": "OTHER"}
        record["stamped"] = {"date": "2026-01-01", "note": "an earlier stamp"}  # as records stamped once hold it
        store.save(record)
        assert stamp_this_cpu(store, echo=lambda line: None)["stamped"] == expect
    stamps = json.loads(path.read_text())["stamped"]  # the earlier stamp kept, this one after it
    assert len(stamps) == 2 and stamps[0]["note"] == "an earlier stamp" and f"kind {here} added" in stamps[1]["note"]
    canary = json.loads(path.read_text())["provenance"]["canary"]
    assert canary["by_cpu"] == {here: run_canary("lga.prop1")[1]} and canary["digest"] == "a" * 16
    assert code_status(json.loads(path.read_text()))["state"] == "current by canary"
    assert stamp_this_cpu(store, echo=lambda line: None)["already"] == 1
    record = json.loads(path.read_text())  # stamped again (its canary here dropped): a third stamp, none lost
    del record["provenance"]["canary"]["by_cpu"]
    store.save(record)
    assert stamp_this_cpu(store, echo=lambda line: None)["stamped"] == 1
    assert [s["note"] for s in json.loads(path.read_text())["stamped"]][:2] == [s["note"] for s in stamps]
    assert len(json.loads(path.read_text())["stamped"]) == 3


def test_stamp_gives_a_current_record_its_canary_with_the_cpu_kind_it_ran_on(tmp_path, monkeypatch):
    import json

    from gradalign.records.canary import machine_kind
    from gradalign.records.canary_stamp import stamp
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import run

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADALIGN_RESULTS", str(tmp_path / "results"))
    store = ResultStore(tmp_path / "results")
    run("lga.prop1", "smoke", store=store, device="cpu", force=True)
    (path,) = store.root.glob("lga/*/*.json")
    lines: list[str] = []
    assert stamp(store, echo=lines.append, force=True)["stamped"] == 1 and lines
    canary = json.loads(path.read_text())["provenance"]["canary"]
    assert canary["cpu"] == machine_kind() and canary["preset"] == "smoke" and len(canary["digest"]) == 16


def test_a_changed_record_without_todays_canary_is_listed_until_the_canary_is_kept(smoke_record):
    """`missing_canaries`, fed a record whose code changed: listed while today's canary is not kept, not once it is;
    a current record is never listed (it needs no canary)."""
    from gradalign.records.canary import _module, missing_canaries, todays_canary
    from gradalign.store.fingerprint import behaviour_fingerprint

    changed = _as_if_code_changed(smoke_record)
    assert missing_canaries([smoke_record]) == []
    assert missing_canaries([changed, changed]) == ["lga.prop1"]
    todays_canary("lga.prop1", behaviour_fingerprint(_module("lga.prop1")))
    assert missing_canaries([changed]) == []


def test_an_unreadable_kept_canary_is_listed_as_missing_and_runs_nothing(smoke_record, monkeypatch):
    """`missing_canaries` reads files only: a kept canary cut short is a missing one, never a reason to run it."""
    from gradalign.records import canary
    from gradalign.store.fingerprint import behaviour_fingerprint

    changed = _as_if_code_changed(smoke_record)
    path = canary._cache_path("lga.prop1", behaviour_fingerprint(canary._module("lga.prop1")))
    canary.todays_canary("lga.prop1", behaviour_fingerprint(canary._module("lga.prop1")))
    path.write_text(path.read_text()[:20])  # cut short

    def ran(element_id):
        raise AssertionError(f"a canary ran for {element_id}")

    monkeypatch.setattr(canary, "run_canary", ran)
    assert canary.missing_canaries([changed]) == ["lga.prop1"]
    assert canary.code_status(changed, run=False)["why"] == "smoke canary not run on today's code"


def test_every_committed_record_reads_a_committed_canary_of_todays_code():
    """A record whose code changed is cleared or found stale by its smoke canary on today's code; the checkout
    keeps those canaries under `results/canaries/`, committed, so that the book, the report and this suite on a
    fresh clone read them instead of running one smoke run per record."""
    import json
    import subprocess

    from gradalign.elements import PARTS
    from gradalign.environment import project_root
    from gradalign.records.canary import _cache_path, _module, code_status, missing_canaries
    from gradalign.store.fingerprint import behaviour_fingerprint

    root = project_root()
    records = [
        json.loads(path.read_text()) for part in PARTS for path in sorted((root / "results" / part).glob("*/*.json"))
    ]
    assert records, "no committed record found"
    how = "run `gradalign stale` on the committed code and commit results/canaries/"
    assert missing_canaries(records) == [], how
    listed = subprocess.run(["git", "ls-files", "results/canaries"], cwd=root, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: which canaries are committed is unknown")
    tracked = set(listed.stdout.split())
    needed = {
        str(_cache_path(r["id"], behaviour_fingerprint(_module(r["id"]))).relative_to(root))
        for r in records
        if (why := str((code_status(r, run=False) or {}).get("why", ""))).startswith("smoke canary")
        and why != "smoke canary not run on today's code"
    }
    assert sorted(needed - tracked) == [], how  # kept, but written by this run (the report tests), not committed


def test_a_moved_module_re_executes_no_notebook(tmp_path, monkeypatch):
    """The book's notebook cache keys the library by behaviour: the same code in a renamed file, the same key."""
    from gradalign.book import build as book
    from gradalign.store.fingerprint import library_closure
    from gradalign.records.results import ResultStore

    notebook = Path(book.__file__).parents[3] / "notebooks" / "sgr" / "01_theory.ipynb"
    store = ResultStore(tmp_path / "results")
    before = book.input_key(notebook, "smoke", store)
    copy = _copy_package(tmp_path)
    (copy / "sizes.py").rename(copy / "allocation_sizes.py")
    for path in copy.rglob("*.py"):
        path.write_text(path.read_text().replace("gradalign.sizes", "gradalign.allocation_sizes"))
    moved = lambda source, parents=True: library_closure(source, parents, package=copy)  # noqa: E731
    monkeypatch.setattr(book, "library_closure", moved)
    assert any(p.name == "allocation_sizes.py" for p in moved(book.notebook_code(notebook)))
    assert book.input_key(notebook, "smoke", store) == before
    (copy / "methods" / "sgr.py").write_text(
        (copy / "methods" / "sgr.py").read_text().replace("TINY = 1e-12", "TINY = 1e-9")
    )
    assert any(p.name == "sgr.py" and p.parent.name == "methods" for p in moved(book.notebook_code(notebook)))
    assert book.input_key(notebook, "smoke", store) != before  # a change of behaviour re-executes it


def test_every_committed_record_carries_its_smoke_canary():
    """A record stored without its canary turns stale at the first change of its code, with nothing that could clear
    it; `gradalign stale --stamp` on the code that computed it adds one (the smoke outcome, run twice)."""
    import json

    from gradalign.elements import PARTS
    from gradalign.environment import project_root

    root = project_root()
    missing = [
        str(path.relative_to(root))
        for part in PARTS
        for path in sorted((root / "results" / part).glob("*/*.json"))
        if not isinstance(json.loads(path.read_text()).get("provenance", {}).get("canary"), dict)
    ]
    assert missing == [], "run `gradalign stale --stamp` on the committed code that computed them and commit them"
