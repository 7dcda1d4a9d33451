"""The reproduction report: every element listed, the paper's numbers beside ours where the paper prints them."""

import pytest

from gradalign.comparison import COMPARISONS, paper_vs_ours
from gradalign.papers import ISOLOSS_TABLE1, LGA_TABLE1
from gradalign.elements import ELEMENTS
from gradalign.report import report_markdown
from gradalign.results import ResultStore
from gradalign.training.ssl import TITLES


def _tab1_record(seeds=1):
    methods = ["lga", "supervised"]
    column = {m: {"test_error": 10.0 + i, "test_error_std": 0.5, "seeds": seeds} for i, m in enumerate(methods)}
    return {
        "id": "lga.tab1",
        "config": {"methods": methods},
        "metrics": {"columns": {"cifar10/cifar/4000": column, "svhn/svhn/1000": column}},
    }


def test_lga_table1_rows_pair_each_method_with_the_papers_column():
    rows = paper_vs_ours(_tab1_record())
    assert len(rows) == 4
    assert rows[0]["quantity"].startswith("LGA") and f"{LGA_TABLE1['LGA']['cifar10_4000'][0]:.2f}" in rows[0]["paper"]
    assert rows[2]["quantity"].startswith("LGA") and f"{LGA_TABLE1['LGA']['svhn_1000'][0]:.2f}" in rows[2]["paper"]
    assert rows[1]["ours"].startswith("11.00 (CIFAR-10, 4000 labels, CIFAR-10 hyperparameters, 1 seed)")
    assert "SVHN hyperparameters" in rows[3]["ours"] and "±" not in rows[3]["ours"]
    assert "11.00 ± 0.50" in paper_vs_ours(_tab1_record(seeds=3))[1]["ours"]
    assert set(TITLES.values()) == set(LGA_TABLE1)  # every method of the loop has a paper row


@pytest.mark.parametrize("dataset, paper_sets", [("cifar10", 1), ("fashion_mnist", 2)])
def test_isoloss_rows_name_the_paper_data_set(dataset, paper_sets):
    metrics = {
        f"{dataset}/{loss}/{ema}": {"probe_mean": 70.0, "probe_std": 1.0}
        for loss in ("L", "iso")
        for ema in ("ema", "no_ema")
    }
    rows = paper_vs_ours({"id": "isoloss.tab1", "config": {"datasets": [dataset], "seeds": 1}, "metrics": metrics})
    assert len(rows) == 4 and all(r["paper"].count("±") == paper_sets for r in rows)
    assert str(ISOLOSS_TABLE1["iso"]["cifar10_no_ema"][0]) in rows[3]["paper"]


def test_elements_without_paper_numbers_have_no_rows():
    assert paper_vs_ours({"id": "lga.prop1"}) == []
    assert set(COMPARISONS) <= set(ELEMENTS)


def test_report_lists_every_element_and_the_stored_comparisons(tmp_path):
    text = report_markdown("auto", ResultStore())  # the committed records
    for element_id in ELEMENTS:
        assert f"`{element_id}`" in text
    assert text.count("| quantity | paper | ours |") == len(COMPARISONS)
    assert f"{LGA_TABLE1['LGA']['cifar10_4000'][0]:.2f} ± " in text
    assert text.count("Wall time: ") == text.count("Record: preset")
    assert "it reads the training runs stored once" in text and "whose training took" in text  # lga.fig5-7, tab1
    empty = report_markdown("auto", ResultStore(tmp_path))
    assert "| quantity | paper | ours |" not in empty and "no stored record" in empty
