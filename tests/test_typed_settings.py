"""List settings are checked item by item, and one setting has one value (issue 48, items 2 and 3).

Every list field of every experiment declares its item type (`tuple[int, ...]`, pairs, ...); its items follow
the scalar rules (a bool is not a number, floats are finite, integers are integers), and a list of sizes is
bounded by the product it allocates, not only item by item. A setting given twice, in any form (dotted and
nested, or a JSON key repeated), is one line, before any compute.
"""

from __future__ import annotations

import typing

import pytest

from gradalign.config import _settings_class, _type_hints
from gradalign.errors import ConfigError
from gradalign.experiments import EXPERIMENTS
from gradalign.compute.overrides import parse_overrides


def _bare_tuple(hint) -> bool:
    return hint is tuple or any(_bare_tuple(a) for a in typing.get_args(hint))


def _list_fields():
    """(element id, dotted name, hint) of every list field, nested settings walked."""
    out = []

    def walk(eid, cls, prefix):
        for name, hint in _type_hints(cls).items():
            sub = _settings_class(hint)
            if sub is not None:
                walk(eid, sub, f"{prefix}{name}.")
            elif typing.get_origin(hint) is tuple or hint is tuple:
                out.append((eid, prefix + name, hint))

    for eid, exp in EXPERIMENTS.items():
        walk(eid, exp.config, "")
    return out


def test_every_list_setting_declares_its_item_type():
    fields = _list_fields()
    assert len(fields) > 20  # the walk reaches the nested settings too
    bare = [f"{eid}: {name}" for eid, name, hint in fields if _bare_tuple(hint)]
    assert not bare, f"list settings with no item type: {bare}"


CASES = [
    # (element, overrides, what the one-line error says)
    ("sgr.tab8", {"sizes": [[16.5, 8]]}, "must be a list of"),
    ("sgr.tab8", {"sizes": [[True, 8]]}, "must be a list of"),
    ("sgr.tab8", {"sizes": [[16, 8, 4]]}, "must be a list of"),
    ("sgr.tab8", {"sizes": [[9_000_000, 9_000_000], [2, 2]]}, "elements"),
    ("sgr.tab8", {"sizes": [[-16, 8]]}, "sizes >= 1"),
    ("isoloss.a1", {"dims": [4, 16.5]}, "must be a list of integers"),
    ("isoloss.a1", {"dims": [4, True]}, "must be a list of integers"),
    ("isoloss.a1", {"dims": [4, 0]}, "strictly increasing"),
    ("isoloss.eq5-8", {"alphas": [True]}, "must be a list of finite numbers"),
    ("isoloss.eq5-8", {"alphas": [float("inf")]}, "must be a list of finite numbers"),
    ("isoloss.eq5-8", {"alphas": [1.0, "x"]}, "must be a list of finite numbers"),
    ("lga.prop1", {"lambda_l": [True, 2.0]}, "must be a list of finite numbers"),
    ("lga.prop1", {"lambda_u": [1e400]}, "must be a list of finite numbers"),
    ("lga.fig1", {"lambda_l": [[1.0]]}, "must be a list of finite numbers"),
    ("sgr.eq7", {"shapes": [[3.5, 2]]}, "must be a list of"),
    ("sgr.eq7", {"shapes": [[10**6, 10**6]]}, "elements"),
    ("sgr.thm33", {"rates": [[1.0, "a"]]}, "must be a list of"),
    ("sgr.thm33", {"rates": [[1.0, float("nan")]]}, "must be a list of"),
    ("metagrad.tab1", {"columns": [["fashion_mnist", 1000.5]]}, "must be a list of"),
    ("metagrad.tab1", {"columns": [["fashion_mnist", True]]}, "must be a list of"),
]


@pytest.mark.parametrize("element_id, overrides, message", CASES)
def test_a_bad_list_item_is_one_line_before_compute(element_id, overrides, message):
    with pytest.raises(ConfigError) as err:
        EXPERIMENTS[element_id].resolve("smoke", overrides)
    text = str(err.value)
    assert message in text and "\n" not in text, text


def test_the_presets_still_resolve_with_typed_lists():
    for exp in EXPERIMENTS.values():
        for preset in exp.presets:
            exp.resolve(preset)


@pytest.mark.parametrize(
    "texts",
    [
        ["protocol.steps=5", 'protocol={"steps":6}'],
        ['protocol={"steps":6}', "protocol.steps=5"],
        ['protocol={"steps":5,"steps":6}'],
        ['trial={"lr":0.1,"lr":0.2}'],
        ['protocol={"inner":{"a":1,"a":2}}'],
    ],
)
def test_a_setting_given_twice_in_any_form_is_refused(texts):
    with pytest.raises(ConfigError) as err:
        parse_overrides(texts)
    assert "given twice" in str(err.value) and "\n" not in str(err.value)


def test_distinct_settings_of_one_nested_object_are_accepted():
    assert parse_overrides(["protocol.steps=5", "protocol.lr=0.1"]) == {"protocol.steps": 5, "protocol.lr": 0.1}
    assert parse_overrides(['protocol={"steps":5}', "trial.lr=0.1"]) == {"protocol": {"steps": 5}, "trial.lr": 0.1}
