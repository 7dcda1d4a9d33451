"""Every committed record is found by today's code: the book and `gradalign run` look a record up by the digest
of today's config at its preset and overrides, so a config field added with a default that enters the digest
hides every record stored before it. On 2026-12-07 `sgr.tab7nobn`'s 28-pixel record had been hidden so since
`pad_to` was added: its page said "No record stored"."""

import json

from gradalign.elements import PARTS
from gradalign.environment import project_root


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def hidden_records(records: list[dict]) -> list[str]:
    """The records that `stored_record` does not find at their preset with the overrides their config implies
    (its values that differ from the preset's, as dotted names), with what today's config has that theirs lacks."""
    from gradalign.experiments import get
    from gradalign.records.runner import stored_record

    hidden = []
    for record in records:
        base = _flat(get(record["id"]).resolve(record["preset"], {}).to_dict())
        theirs = _flat(record["config"])
        overrides = {k: v for k, v in theirs.items() if base.get(k, object()) != v}
        found = stored_record(record["id"], record["preset"], overrides)
        if found is None or found["config_hash"] != record["config_hash"]:
            lacking = sorted(set(base) - set(theirs))
            hidden.append(f"{record['id']} [{record['preset']}] (its config lacks: {', '.join(lacking) or 'nothing'})")
    return hidden


def test_every_committed_record_is_found_at_its_preset_and_overrides():
    root = project_root() / "results"
    records = [json.loads(p.read_text()) for part in PARTS for p in sorted((root / part).glob("*/*.json"))]
    assert len(records) >= 40, "the committed records are not where the test reads them"
    assert hidden_records(records) == [], "leave a field added later out of the config's digest at its default"


def test_a_record_whose_config_lacks_a_field_that_enters_the_digest_is_reported(monkeypatch):
    """The failing case: with `pad_to` back in the no-BN study's digest at its default (as before 2026-12-07),
    the 28-pixel record, stored before the field, is hidden; the padded one is not."""
    from gradalign.experiments.sgr.local_runs import Table7Config
    from gradalign.experiments.sgr.vgg_without_bn import NoBNConfig
    from gradalign.records.runner import stored_record

    plain, padded = stored_record("sgr.tab7nobn", "cpu"), stored_record("sgr.tab7nobn", "cpu", {"pad_to": 32})
    assert hidden_records([plain, padded]) == []
    monkeypatch.setattr(NoBNConfig, "to_dict", Table7Config.to_dict)  # every field, pad_to = 0 included
    assert hidden_records([plain, padded]) == ["sgr.tab7nobn [cpu] (its config lacks: pad_to)"]
