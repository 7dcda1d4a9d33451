"""The reproduction report: every element listed, the paper's numbers beside ours where the paper prints them."""

import json
from pathlib import Path

import pytest

from gradalign.book.comparison import COMPARISONS, paper_vs_ours
from gradalign.papers import ISOLOSS_TABLE1, LGA_TABLE1
from gradalign.elements import ELEMENTS
from gradalign.book.report import report_markdown
from gradalign.records.results import ResultStore
from gradalign.training.ssl import TITLES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def committed_report() -> str:
    """The report of the committed records (8 s to compute; the tests below only read it)."""
    return report_markdown("auto", ResultStore())


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
    assert "11.00 ± 0.29 SE" in paper_vs_ours(_tab1_record(seeds=3))[1]["ours"]  # std 0.5 over 3 seeds
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


def test_metagrad_rows_put_the_papers_three_data_sets_beside_our_column():
    summary = {"best_test_error": {"mean": 12.345, "std": 0.5, "n": 3}}
    record = {"id": "metagrad.tab4", "metrics": {"table": {"fashion_mnist_1000": {"meta_mixup": summary}}}}
    (row,) = paper_vs_ours(record)
    assert "CIFAR-10-4k 7.78" in row["paper"] and row["ours"].startswith("12.35 ± 0.29 SE (Fashion-MNIST, 1,000 labels")


def test_elements_without_paper_numbers_have_no_rows():
    assert paper_vs_ours({"id": "lga.prop1"}) == []
    assert set(COMPARISONS) <= set(ELEMENTS)


def test_report_lists_every_element_and_the_stored_comparisons(tmp_path, committed_report):
    text = committed_report
    for element_id in ELEMENTS:
        assert f"`{element_id}`" in text
    stored = [i for i in COMPARISONS if ResultStore().files(i)]
    assert text.count("| quantity | paper | ours |") == len(stored) >= 3
    assert f"{LGA_TABLE1['LGA']['cifar10_4000'][0]:.2f} ± " in text
    assert text.count("Wall time: ") == text.count("Record: preset")
    assert "it reads the training runs stored once" in text and "whose training took" in text  # lga.fig5-7, tab1
    empty = report_markdown("auto", ResultStore(tmp_path))
    assert "| quantity | paper | ours |" not in empty and "no stored record" in empty


# --- verdicts with their scale, stale records, links, generated pages ----------------------------------


def _stored(element_id):
    from gradalign.records.runner import stored_record

    record = stored_record(element_id, "cpu")
    assert record is not None, f"the committed cpu record of {element_id} is missing"
    return record


def test_an_invalid_test_is_inconclusive_names_why_and_its_scale_and_is_counted_apart(committed_report):
    from gradalign.book.report import scale_of, split_counts, summary_counts, verdict_text

    record = _stored("sgr.lam")  # a one-seed pilot: not a valid test of a difference
    assert record["verdict"]["status"] == "inconclusive" and "enough_seeds" in record["verdict"]["unmet"]
    assert verdict_text(record).startswith("**inconclusive** (precondition not met: enough seeds to decide")
    scale = scale_of(_stored("lga.fig5"))  # Fashion-MNIST for CIFAR-10, 6,000 steps of a small CNN
    assert "Fashion-MNIST (paper: CIFAR-10)" in scale and "6,000 steps (paper: 500,000 steps)" in scale
    assert "3 seeds (paper: 5 seeds)" in scale and scale.endswith("runs finished learning")
    assert scale_of(_stored("lga.fig1")) == ""  # exact scope: nothing to name
    counts = summary_counts({"a": "not reproduced", "b": "inconclusive", "c": "reproduced"})
    assert counts == "**1** reproduced · **1** not reproduced · **1** inconclusive"
    split = split_counts({"lga.prop1": "reproduced", "lga.fig5": "inconclusive", "lga.fig7": "inconclusive"})
    assert split == {"analytic": "**1** reproduced (of 1)", "empirical": "**2** inconclusive (of 2)"}
    text = committed_report
    assert "**inconclusive** (precondition not met: enough seeds to decide a difference" in text
    assert "**Analytic:**" in text and "**Empirical:**" in text


def test_the_scale_line_counts_finished_runs_as_the_precondition_does():
    """One count of unfinished runs per page: the scale line reads the finished-learning precondition's own value
    (before, it counted runs at their best at the last evaluation, another number under the same words)."""
    from gradalign.book.report import scale_of

    record = json.loads(next((ROOT / "results" / "lga" / "lga.fig7").glob("cpu-*.json")).read_text())
    finished = record["preconditions"]["finished_learning"]["value"]
    line = scale_of(record)
    assert line.endswith(f"; {finished['finished']} of {finished['runs']} runs finished learning")
    assert "still improving" not in line
    record["preconditions"]["finished_learning"]["value"] = "not recorded"
    assert "finished learning" not in scale_of(record)


def test_a_record_whose_code_changed_is_stale(tmp_path):
    from gradalign.store.fingerprint import code_fingerprint
    from gradalign.book.report import stale_text
    from gradalign.records.runner import run, stale_files

    record = run("lga.fig2", "smoke", store=ResultStore(tmp_path))
    module = "gradalign.experiments.lga.shells_figure"
    assert record["provenance"]["code"] == code_fingerprint(module)
    assert (
        "experiments/lga/shells_figure.py" in record["provenance"]["code"]
        and "data/shells.py" in record["provenance"]["code"]
    )
    assert stale_files(record) == [] and stale_text(record) == "current"
    edited = {**record, "provenance": {**record["provenance"], "code": {**record["provenance"]["code"]}}}
    edited["provenance"]["code"]["data/shells.py"] = "0" * 16
    assert stale_files(edited) == ["data/shells.py"]
    assert stale_text(edited) == "current"  # the bytes moved, not one definition: current by behaviour
    edited["provenance"]["behaviour"] = {**record["provenance"]["behaviour"], "sample_shells": "0" * 16}
    assert stale_text(edited).startswith("**stale**: 1 definition changed since (sample_shells (data/\u200bshells.py)")
    assert stale_text(edited).endswith("no smoke canary stored with the record")
    del edited["provenance"]["code"]
    assert stale_files(edited) is None and stale_text(edited, short=True) == "unknown"


def test_the_fingerprint_follows_imports_and_names_changed_files():
    from gradalign.store.fingerprint import changed_files, code_fingerprint

    files = code_fingerprint("gradalign.experiments.lga.linear")
    assert {"experiments/lga/linear.py", "methods/lga_linear.py", "experiments/base.py"} <= set(files)
    assert "experiments/isoloss/toy.py" not in files  # the registry in experiments/__init__ is not followed
    assert changed_files({"a.py": "1", "b.py": "2"}, {"a.py": "1", "b.py": "3", "c.py": "4"}) == ["b.py", "c.py"]


def test_the_report_links_every_built_id_to_its_page(committed_report):
    from gradalign.experiments import EXPERIMENTS

    from gradalign.book.toc import in_book

    text = committed_report
    for element_id, exp in EXPERIMENTS.items():
        linked = f"[`{element_id}`](../{exp.notebook})" in text
        assert linked == in_book(exp.notebook), element_id  # a link only to a page the book has
    assert sum(in_book(exp.notebook) for exp in EXPERIMENTS.values()) >= 20
    from gradalign.elements import ELEMENTS

    unbuilt = [i for i in ELEMENTS if i not in EXPERIMENTS]
    assert all(f"[`{i}`]" not in text and f"`{i}`" in text for i in unbuilt)  # not built: named, no link


def test_targets_are_shown_apart_from_the_checks():
    from gradalign.experiments.base import check
    from gradalign.book.report import checks_markdown, targets_markdown

    record = {
        "checks": {"claim_holds": check(True, 0.5, "x < 1", "the paper's claim")},
        "targets": {"fast": check(False, 1.7, "ratio <= 1.6", "the project's speed target")},
    }
    assert "the paper's claim" in checks_markdown(record) and "speed target" not in checks_markdown(record)
    assert "do not enter the verdict" in targets_markdown(record) and "| ✘ |" in targets_markdown(record)
    assert targets_markdown({"checks": {}}) == ""


def test_markdown_cells_escape_pipes_and_round_values():
    from gradalign.experiments.base import check
    from gradalign.book.report import checks_markdown, format_value

    table = checks_markdown({"checks": {"a_b": check(False, 0.123456, "|x| < 1", "claim")}})
    assert "\\|x\\| < 1" in table and "0.123" in table and "0.123456" not in table
    assert table.splitlines()[2].startswith("| ✘ |")  # the pass mark first
    assert format_value({"lga": 0.123456, "n": 3}) == "lga: 0.123; n: 3"


def test_a_finished_learning_value_reads_as_words():
    from gradalign.book.report import format_value

    value = {"finished": 4, "runs": 6, "still_improving": ["a/seed0", "b/seed1"]}
    assert format_value(value, page=False) == "4 of 6 runs finished; still improving: a/seed0, b/seed1"
    value["budget_checked"] = {"a": {"full": 80.0, "half": 79.0, "gain": 1.0, "finished": False}}
    assert format_value(value, page=False).endswith("budget check, full budget vs half: a 80 vs 79 (+1: not finished)")


def test_book_markers_are_filled_from_the_store():
    from gradalign.book.pages import fill_markers

    text = fill_markers(
        "a <!-- gradalign: scoreboard -->\n<!-- gradalign: elements lga -->\n<!-- gradalign: references -->",
        "auto",
        ResultStore(),
        "../",
    )
    assert "<!--" not in text and "[`lga.fig1`](../notebooks/lga/01_linear_regression.ipynb)" in text
    assert "not yet built" not in text and "not run here" in text and "https://arxiv.org/abs/2406.05222" in text
    with pytest.raises(ValueError, match="unknown book marker"):
        fill_markers("<!-- gradalign: nonsense -->", "auto", ResultStore(), "")


def test_the_compute_page_lists_every_record_and_the_pinned_environment():
    from gradalign.book.pages import compute_markdown, how_to_run_markdown

    text = compute_markdown("auto", ResultStore())
    for element_id in ("lga.fig1", "lga.fig5", "isoloss.tab1"):
        assert f"[`{element_id}`]" in text
    assert "torch==" in text and "commit `" in text
    fig5 = next(line for line in text.splitlines() if line.startswith("| [`lga.fig5`]"))
    assert "training (stored runs)" in fig5  # not the 0.0 s it took to assemble from the run store
    how = how_to_run_markdown()
    assert "--device cuda" in how and "Fashion-MNIST" in how and "GRADALIGN_PRESET=smoke" in how


def test_scale_caption_names_the_training_time_of_shared_runs():
    from gradalign.book.plotting import TEXT_WIDTH_CHARS, scale_caption

    record = {
        "preset": "cpu",
        "config": {"seeds": 1},
        "metrics": {"train_seconds": 2630.0},
        "provenance": {
            "seeds": [0],
            "wall_time_s": 0.02,
            "hardware": "CPU: AMD EPYC 7B13, 1 thread of 2 cores",
            "torch": "2.13.0+cpu",
            "date": "2026-11-21T10:00:00+00:00",
        },
    }
    line = scale_caption(record)
    assert "43.8 min training (stored runs)" in line.replace("\n  ", " ") and "0.0 s" not in line
    assert max(map(len, line.splitlines())) <= TEXT_WIDTH_CHARS
    record["metrics"] = {}
    record["provenance"]["wall_time_s"] = 7.5
    assert "7.5 s on AMD EPYC 7B13, 1 thread" in scale_caption(record)


def test_an_id_links_to_its_page_only_when_the_page_is_in_the_book(tmp_path, monkeypatch):
    from gradalign.book import report, toc

    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - chapters:\n      - file: x/a\n")
    assert toc.toc_files(tmp_path) == ["book/intro", "x/a"]
    assert toc.in_book("x/a.ipynb", tmp_path) and not toc.in_book("x/b.ipynb", tmp_path)
    assert report.page_link("lga.fig1", "../") == "[`lga.fig1`](../notebooks/lga/01_linear_regression.ipynb)"
    monkeypatch.setattr(report, "in_book", lambda notebook: False)  # an element registered before its page is listed
    assert report.page_link("lga.fig1", "../") == "`lga.fig1`"


def test_verdict_rows_name_every_seed_and_the_training_time_of_shared_runs():
    from gradalign.book.report import provenance_line

    record = {
        "preset": "cpu",
        "config": {"seeds": 3},
        "metrics": {"train_seconds": 4573.0},
        "provenance": {
            "seeds": [0],
            "wall_time_s": 0.03,
            "hardware": "CPU: AMD EPYC, 1 thread of 2 cores",
            "torch": "2.13.0+cpu",
            "date": "2026-11-23T19:30:43+00:00",
            "git_commit": "a2dbf5f3180f0dc06c7a6973ad098311943d4484",
        },
    }
    line = provenance_line(record)
    assert "seeds 0-2" in line and "76.2 min training (stored runs)" in line and "0.0 s" not in line
    record["config"], record["metrics"] = {}, {}
    assert "seed 0 · 0.0 s" in provenance_line(record)


def test_our_table_cells_say_their_spread_is_a_standard_deviation():
    from gradalign.book.page_helpers import mean_std_cell

    assert mean_std_cell({"mean": 12.634, "std": 0.52, "n": 3}) == "12.63 ± 0.52 sd"
    assert mean_std_cell({"mean": 12.634, "std": 0.0, "n": 1}) == "12.63"  # one seed: no spread
    assert mean_std_cell({"mean": 10.0, "std": 0.0, "n": 3, "diverged": 1}) == "10.00 ± 0.00 sd (1 diverged)"


def committed_values():
    """(record id, table, name, value) of every check and precondition of every committed record."""
    import json

    from gradalign.environment import project_root

    root = project_root() / "results"
    for path in sorted(root.glob("*/*/*.json")):
        if path.parts[-3] in ("runs", "windows", "bench"):
            continue
        record = json.loads(path.read_text())
        for table in ("checks", "preconditions", "targets"):
            for name, c in (record.get(table) or {}).items():
                yield record, table, name, c["value"]


def test_every_measured_value_in_the_committed_records_reads_as_words_and_numbers():
    """The "measured" column: no Python dict (`{runs: 3, ...}`), no `nan`, no raw 6-decimal number, for every kind
    of check and precondition value the committed records hold."""
    import re

    from gradalign.book.measured import format_value

    seen, bad = 0, []
    for record, table, name, value in committed_values():
        for page in (True, False):
            text = format_value(value, page)
            seen += 1
            if re.search(r"\{[^}]*: ", text) or re.search(r"\bnan\b", text) or re.search(r"\d\.\d{6,}", text):
                bad.append(f"{record['id']} {table} {name}: {text[:120]}")
            if not text.strip() or text.startswith(("{", "[")):
                bad.append(f"{record['id']} {table} {name}: {text[:120]!r}")
    assert seen > 100, "no committed records found"
    assert not bad, f"{len(bad)} measured values not in words, e.g. {bad[:5]}"


def test_each_precondition_kind_in_words():
    from gradalign.book.measured import format_value, number

    assert format_value({"runs": 3, "worst": 4.53, "worst_run": "vat/250/seed 1"}) == (
        "worst run 4.53 % error (vat/250/seed 1; 3 runs)"
    )
    assert format_value({"arms": 12, "fewest": 3}) == "fewest seeds in an arm: 3 (12 arms)"
    assert format_value({"arms": 1}) == "1 arm checked"
    assert format_value({"least": 0.6324, "mean": 0.6408, "trials": 25}) == "mean 0.641, least 0.632 over 25 trials"
    assert format_value({"control": "lga.alpha_w = 0", "control_runs_missing": 18}) == (
        "control (lga.alpha_w = 0): 18 runs missing"
    )
    near = {"250 labels": {"baseline": 23.76, "gap": -0.56, "reference": 24.32}}
    assert format_value(near) == "250 labels: baseline 23.76 vs reference 24.32 (gap -0.56)"
    # without a usable reference (a fresh store at smoke) the value holds why, as a string
    missing = {"250 labels": {"baseline": 23.76, "reference": "no reference stored"}, "1,000 labels": {
        "baseline": None, "reference": "no reference stored"}}  # fmt: skip
    assert format_value(missing) == (
        "250 labels: baseline 23.76; no reference (no reference stored); "
        "1,000 labels: baseline not recorded; no reference (no reference stored)"
    )
    gains = {"arms_checked": 2, "gain_from_half": {"fashion_mnist/sgr": 2.917, "fashion_mnist/layerwise": 3.5}}
    assert format_value(gains, page=False) == (
        "2 arms checked; gain from half the budget to the full one: Fashion-MNIST/sgr +2.92; "
        "Fashion-MNIST/layerwise +3.5"
    )
    assert format_value({"arms_checked": 6, "gain_from_half": {}}, page=False) == "6 runs at both budgets"  # assess
    nested = {"fashion_mnist/plainnet32": {"layer-wise": 0.000798, "ratio": 0.21, "sgr": 0.000167}}
    assert format_value(nested, page=False) == (
        "Fashion-MNIST/plainnet32: (layer-wise: 7.98×10⁻⁴; ratio: 0.21; sgr: 1.67×10⁻⁴)"
    )
    assert [number(x) for x in (3121802, 0.0, float("nan"), True, 1.0135)] == [
        "3,121,802",
        "0",
        "not a number",
        "yes",
        "1.01",
    ]


def test_a_verdict_reason_names_claims_not_check_ids():
    from gradalign.book.measured import reason_text

    for record, table, name, _ in committed_values():
        if table != "checks" or record["verdict"]["status"] == "reproduced":
            continue
        text = reason_text(record)
        ids = [n for n in (*record["checks"], *record.get("preconditions", {})) if "_" in n and n in text]
        assert not ids, f"{record['id']}: the reason names check ids {ids}: {text}"


def test_runs_without_their_hardware_say_so_in_words():
    from gradalign.book.record_text import hardware_text, where_computed

    provenance = {
        "hardware": "CPU: AMD EPYC, 1 thread of 2 cores",
        "runs": {"unknown (read from the local run cache)": ["isoloss.siamese/a", "isoloss.siamese/b"]},
    }
    text = where_computed(provenance)
    assert "unknown" not in text and "2 runs on a machine not recorded" in text
    assert hardware_text("CPU: AMD EPYC, 2 threads of 2 cores") == "AMD EPYC, 2 threads"


def test_a_claim_its_runs_did_not_measure_is_marked_and_named_as_not_measured():
    """An undecided claim whose quantity no run recorded (`not_recorded`, listed with within_noise by the verdict)
    shows "–" and "not measured", never "≈" or "within noise"; a measured one within noise keeps both."""
    from gradalign.book.measured import reason_text
    from gradalign.book.report import checks_markdown, mark

    unmeasured = {"passed": False, "within_noise": True, "not_recorded": True, "value": "not recorded"}
    noisy = {"passed": False, "within_noise": True, "value": {"diff": 0.1}}
    record = {
        "checks": {
            "closer": {**unmeasured, "claim": "features drawn together", "rule": "MMD must be recorded"},
            "clusters": {**noisy, "claim": "classes separate", "rule": "Welch"},
        },
        "verdict": {"status": "inconclusive", "unmet": [], "unstable": [], "within_noise": ["closer", "clusters"]},
    }
    assert [mark(c) for c in record["checks"].values()] == ["–", "≈"]
    assert mark({"passed": False}) == "✘" and mark({"passed": True, "not_recorded": True}) == "✔"
    assert reason_text(record) == (
        "difference within noise: classes separate; not measured by these runs: features drawn together"
    )
    assert checks_markdown(record).splitlines()[2].startswith("| – |")
    from gradalign.experiments.verdict import reason  # the command line's words (by id): the same split

    assert reason(record["verdict"], {}, record["checks"]) == (
        "difference within noise: clusters; not measured by these runs: closer"
    )
    assert reason(record["verdict"]) == "difference within noise: closer, clusters"  # without the checks
