"""The paper's numbers beside ours, row by row, for the elements where a paper prints numbers.

`paper_vs_ours(record)` reads a stored record and `gradalign.papers`; the reproduction report and the element's
page show its rows. Ours is the mean over seeds ± its standard error (SE = std / sqrt(n)); the paper's as printed.
Each row says where our number comes from (data set, labels, preset), because the `cpu` and `gpu` presets often
run a substitute data set: a row compares like with like only at `paper`.
"""

from __future__ import annotations

from gradalign.data.image_sets import IMAGE_SETS
from gradalign.papers import (
    ISOLOSS_TABLE1,
    ISOLOSS_TABLE1_SEEDS,
    LGA_FIGURE1,
    LGA_TABLE1,
    LGA_TABLE1_TRIALS,
    METAGRAD_TABLE4,
    SGR_TABLE3,
    SGR_TABLE4,
    SGR_TABLE6,
    SGR_TABLE7,
)

FAMILY_DATA = {"cifar": "cifar10", "svhn": "svhn"}  # the data set each hyperparameter family was tuned on


def _title(dataset: str) -> str:
    return IMAGE_SETS[dataset].title if dataset in IMAGE_SETS else dataset


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def _lga_tab1(record: dict) -> list[dict]:
    from gradalign.training.ssl import TITLES

    rows = []
    paper_columns = (("cifar10_4000", "CIFAR-10, 4000 labels"), ("svhn_1000", "SVHN, 1000 labels"))
    for (key, by_method), (paper_key, paper_where) in zip(record["metrics"]["columns"].items(), paper_columns):
        dataset, family, labels = key.split("/")
        for method in record["config"]["methods"]:
            mean, std = LGA_TABLE1[TITLES[method]][paper_key]
            ours = by_method[method]
            spread = f" ± {ours['test_error_std'] / ours['seeds'] ** 0.5:.2f} SE" if ours["seeds"] > 1 else ""
            rows.append(
                {
                    "quantity": f"{TITLES[method]}: test error %",
                    "paper": f"{mean:.2f} ± {std:.2f} ({paper_where}, {LGA_TABLE1_TRIALS} trials)",
                    "ours": f"{ours['test_error']:.2f}{spread} ({_title(dataset)}, {labels} labels, "
                    f"{_title(FAMILY_DATA[family])} hyperparameters, {_seeds(ours['seeds'])})",
                }
            )
    return rows


def _isoloss_tab1(record: dict) -> list[dict]:
    rows = []
    names = {"L": "L", "iso": "L_iso"}
    seeds = record["config"]["seeds"]
    for dataset in record["config"]["datasets"]:
        paper_sets = [dataset] if dataset in ("cifar10", "stl10") else ["cifar10", "stl10"]
        for loss in ("L", "iso"):
            for ema in ("ema", "no_ema"):
                mean, std = zip(*(ISOLOSS_TABLE1[loss][f"{d}_{ema}"] for d in paper_sets))
                paper = "; ".join(f"{m} ± {s} ({_title(d)})" for m, s, d in zip(mean, std, paper_sets))
                ours = record["metrics"][f"{dataset}/{loss}/{ema}"]
                spread = f" ± {ours['probe_std'] / seeds**0.5:.1f} SE" if seeds > 1 else ""
                rows.append(
                    {
                        "quantity": f"{names[loss]}, {'EMA' if ema == 'ema' else 'no EMA'}: linear readout accuracy %",
                        "paper": f"{paper}, {ISOLOSS_TABLE1_SEEDS} seeds",
                        "ours": f"{ours['probe_mean']:.1f}{spread} ({_title(dataset)}, linear probe, {_seeds(seeds)})",
                    }
                )
    return rows


def _lga_fig1(record: dict) -> list[dict]:
    return [
        {"quantity": name, "paper": f"{LGA_FIGURE1[name]:g} (Figure 1 caption)", "ours": f"{record['config'][name]:g}"}
        for name in ("alpha_theta", "alpha_w", "eps_norm")
    ]


def _metagrad_tables(record: dict) -> list[dict]:
    """Tables 1 and 4: each row's error on the paper's three data sets beside ours (best test error over
    training, as the paper reports it), per column of our config."""
    rows, paper_row = (
        [],
        {"labeled_only": "labeled only", "meta": "meta", "mixup": "mixup", "meta_mixup": "meta + mixup"},
    )
    for column, table in record["metrics"]["table"].items():
        dataset, labels = column.rsplit("_", 1)
        for variant, summary in table.items():
            paper = METAGRAD_TABLE4[paper_row[variant]]
            s = summary["best_test_error"]
            spread = f" ± {s['std'] / s['n'] ** 0.5:.2f} SE" if s["n"] > 1 else ""
            rows.append(
                {
                    "quantity": f"{paper_row[variant]}: test error %",
                    "paper": f"SVHN-1k {paper['svhn']:.2f}, CIFAR-10-4k {paper['cifar10']:.2f}, "
                    f"CIFAR-100-10k {paper['cifar100']:.2f} (best over training)",
                    "ours": f"{s['mean']:.2f}{spread} ({_title(dataset)}, {int(labels):,} labels, best over training, "
                    f"{_seeds(s['n'])})",
                }
            )
    return rows


def mean_se(summary: dict) -> str:
    """`mean ± SE` of a summary over seeds ({"mean", "std", "n"}), the form every table of ours takes."""
    se = summary["std"] / summary["n"] ** 0.5 if summary["n"] > 1 else 0.0
    return f"{summary['mean']:.2f} ± {se:.2f} SE"


def _paper(cell) -> str:
    return "fail" if cell is None else (f"{cell[0]:.2f} ± {cell[1]:.2f}" if isinstance(cell, tuple) else f"{cell:.2f}")


SGR_TITLES = {
    "layerwise": "layer-wise",
    "reforward": "reforward",
    "sgr": "SGR",
    "greedy": "Greedy",
    "dgl": "DGL",
    "infopro": "InfoPro",
    "global_bp": "global BP",
    "fa": "FA",
    "dfa": "DFA",
    "drtp": "DRTP",
    "pepita": "PEPITA",
}


NETWORKS = {"resnet32": "ResNet-32", "plainnet32": "PlainNet-32"}


def _ours(s: dict, dataset: str, extra: str = "") -> str:
    return f"{mean_se(s)} ({_title(dataset)}{extra}, {_seeds(s['n'])})"


def _sgr_tab3(record: dict) -> list[dict]:
    keys = {"layerwise": "layer-wise", "reforward": "reforward", "sgr": "sgr"}
    rows = []
    for dataset, table in record["metrics"]["table"].items():
        for net, by_method in table.items():
            for m, s in by_method.items():
                paper = SGR_TABLE3[keys[m]][net]
                rows.append(
                    {
                        "quantity": f"{SGR_TITLES[m]}, {NETWORKS.get(net, net)}: final test accuracy %",
                        "paper": f"{_paper(paper)} (CIFAR-10)",
                        "ours": _ours(s, dataset),
                    }
                )
    return rows


def _sgr_tab6(record: dict) -> list[dict]:
    rows = []
    for dataset, table in record["metrics"]["table"].items():
        paper_set = dataset if dataset in ("cifar10", "cifar100") else "cifar10"
        for m, by_k in table.items():
            for k, s in by_k.items():
                paper = SGR_TABLE6[m][paper_set].get(int(k))
                rows.append(
                    {
                        "quantity": f"{SGR_TITLES[m]}, K = {k}: final test accuracy %",
                        "paper": f"{_paper(paper)} ({_title(paper_set)})" if paper else "not in the paper",
                        "ours": _ours(s, dataset),
                    }
                )
        g = record["metrics"]["global_bp"].get(dataset)
        if g:
            paper = SGR_TABLE6["global_bp"][paper_set]
            rows.append(
                {
                    "quantity": "global BP: final test accuracy %",
                    "paper": f"{_paper(paper)} ({_title(paper_set)})",
                    "ours": _ours(g, dataset),
                }
            )
    return rows


def _sgr_tab7(record: dict) -> list[dict]:
    rows, depths = [], list(SGR_TABLE7["depths"])
    for dataset, table in record["metrics"]["table"].items():
        for m, by_depth in table.items():
            if m not in SGR_TABLE7:  # layer-wise: our reference for SGR's term, not a row of the paper's table
                continue
            for d, s in by_depth.items():
                paper = SGR_TABLE7[m][depths.index(int(d))] if int(d) in depths else None
                rows.append(
                    {
                        "quantity": f"{SGR_TITLES[m]}, VGG-{d}: final test accuracy %",
                        "paper": f"{_paper(paper)} (CIFAR-10)" if int(d) in depths else "not in the paper",
                        "ours": _ours(s, dataset),
                    }
                )
    return rows


def _sgr_tab4(record: dict) -> list[dict]:
    keys = {"fa": "FA", "drtp": "DRTP", "pepita": "PEPITA", "layerwise": "layer-wise", "reforward": "reforward"}
    keys["sgr"] = "sgr"
    rows = []
    for dataset, table in record["metrics"]["table"].items():
        for m, s in table.items():
            paper = SGR_TABLE4.get(keys.get(m, ""), {})
            cells = "; ".join(f"{_paper(v)} ({_title(d)})" for d, v in paper.items()) or "not in the paper"
            rows.append(
                {"quantity": f"{SGR_TITLES[m]}: final test accuracy %", "paper": cells, "ours": _ours(s, dataset)}
            )
    return rows


COMPARISONS = {
    "sgr.tab3": _sgr_tab3,
    "sgr.tab4": _sgr_tab4,
    "sgr.tab6": _sgr_tab6,
    "sgr.tab7": _sgr_tab7,
    "lga.tab1": _lga_tab1,
    "isoloss.tab1": _isoloss_tab1,
    "lga.fig1": _lga_fig1,
    "metagrad.tab1": _metagrad_tables,
    "metagrad.tab4": _metagrad_tables,
}


def paper_vs_ours(record: dict) -> list[dict]:
    """Rows {'quantity', 'paper', 'ours'} for an element whose paper prints numbers; [] otherwise."""
    compare = COMPARISONS.get(record["id"])
    return compare(record) if compare else []
