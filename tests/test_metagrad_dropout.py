"""Conv-Large's dropout is a setting of the meta-gradient runs (issue 27, item 1): the paper's 0.5 by default and
then out of the run key (stored runs keep their keys); any other rate reaches the model and the key; a bad rate or
a model without dropout is refused before any compute."""

from __future__ import annotations

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.experiments import get
from gradalign.models.conv_large import DROPOUT
from gradalign.training.semimeta import CONV_LARGE_DROPOUT, MODELS, SemiMetaRunSpec, semimeta_unit


def _spec(**kw) -> SemiMetaRunSpec:
    return get("metagrad.tab4").resolve("smoke", kw).spec("labeled_only", "fashion_mnist", 100, 0)


def test_the_paper_rate_keeps_the_key_and_another_rate_changes_it():
    default, paper, off = _spec(), _spec(dropout=0.5), _spec(dropout=0.0)
    assert "dropout" not in default.to_dict()
    assert semimeta_unit(paper).key == semimeta_unit(default).key  # the paper's rate, named or not
    assert semimeta_unit(off).key != semimeta_unit(default).key


def test_the_paper_rate_is_the_models():
    assert CONV_LARGE_DROPOUT == DROPOUT == 0.5


def test_the_rate_reaches_the_model():
    for rate in (None, 0.0, 0.3):
        model = MODELS["conv_large"](10, 1, 0.125, **({} if rate is None else {"dropout": rate}))
        rates = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout2d)]
        assert rates == [0.5 if rate is None else rate] * 2


@pytest.mark.parametrize("rate", [1.0, -0.1, 2.0])
def test_a_rate_outside_0_1_is_refused(rate):
    with pytest.raises(ConfigError, match="dropout must lie in"):
        get("metagrad.tab4").resolve("smoke", {"dropout": rate})


def test_a_model_without_dropout_refuses_a_rate():
    with pytest.raises(ConfigError, match="no dropout layer"):
        get("metagrad.tab2").resolve("smoke", {"dropout": 0.1})
