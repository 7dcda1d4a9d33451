"""Small helpers the notebooks share: table cells and learning-curve panels drawn from stored records.

Every notebook imports what it needs from here instead of defining its own copy (a test fails on a notebook
that defines one of these names again). Colours live in `gradalign.book.plotting.METHOD_COLORS`, figure sizes in
`gradalign.book.plotting`.
"""

from __future__ import annotations


def mean_std_cell(summary: dict, metric: str | None = None, digits: int = 2) -> str:
    """A table cell "mean ± std sd" from a stored summary ({'mean', 'std', optional 'n', optional 'diverged'}), or
    from `summary[metric]`; only the mean when one seed was run, and "(k diverged)" when runs diverged. The "sd"
    tells it from the paper-vs-ours tables' "± SE" (`comparison`), a spread over seeds against an error of the
    mean."""
    s = summary[metric] if metric is not None else summary
    text = f"{s['mean']:.{digits}f}"
    if s.get("n", 2) > 1 and s.get("std") is not None:
        text += f" ± {s['std']:.{digits}f} sd"
    if s.get("diverged"):
        text += f" ({s['diverged']} diverged)"
    return text


def paper_cell(value, digits: int = 2) -> str:
    """A paper's number as a table cell: (mean, std) as "mean ± std", one number as itself, None as "—"."""
    if value is None:
        return "—"
    if isinstance(value, (tuple, list)):
        return f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"
    return f"{value:.{digits}f}"


def seeds_mean_std(rows):
    """Mean and sample std over seeds (rows) of per-epoch values, None read as missing; std is None for one seed."""
    import numpy as np

    a = np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)
    return np.nanmean(a, 0), (np.nanstd(a, 0, ddof=1) if len(a) > 1 else None)


def curve_panel(ax, curve: dict, key: str, color, label: str, **plot) -> bool:
    """One per-epoch curve of a stored record (`curve[key]`: one list per seed, `curve['epoch']`) as a mean line
    with a ± std band over seeds, on integer epoch ticks. Draws nothing (returns False) when the record has no
    value for `key`, e.g. the SGR term of a method that does not compute it."""
    from matplotlib.ticker import MaxNLocator

    from gradalign.book.plotting import band

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    values = curve.get(key)
    if not values or all(v is None for row in values for v in row):
        return False
    mean, std = seeds_mean_std(values)
    band(ax, curve["epoch"], mean, std, color=color, label=label, **plot)
    return True


def data_title(name: str) -> str:
    """A data set as people write it: `fashion_mnist` -> Fashion-MNIST (`gradalign.data.image_sets`)."""
    from gradalign.data.image_sets import IMAGE_SETS

    return IMAGE_SETS[name].title if name in IMAGE_SETS else name.replace("_", " ")


def split_title(key: str) -> str:
    """A benchmark column `<data set>_<labels>` as people write it: `cifar10_4000` -> CIFAR-10, 4,000 labels."""
    data, _, labels = key.rpartition("_")
    return f"{data_title(data)}, {int(labels):,} labels" if data and labels.isdigit() else data_title(key)


def field_title(name: str) -> str:
    """A config field as a table label: `weight_decay` -> weight decay."""
    return name.replace("_", " ")


SUBSCRIPTS = dict(zip("0123456789+-=()aehijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ"))


def plain_math(text: str) -> str:
    """ASCII subscripts in a table cell written as people read them: `δ_{l+1} W_{l+1}` -> δₗ₊₁ Wₗ₊₁, `a_l` -> aₗ
    (only where every character has a Unicode subscript; other text is left as it is)."""
    import re

    def sub(match):
        body = match.group(1) or match.group(2)
        return "".join(SUBSCRIPTS[c] for c in body) if all(c in SUBSCRIPTS for c in body) else match.group(0)

    return re.sub(r"(?<=\w)_(?:\{([^{}]+)\}|([A-Za-z0-9]))(?![A-Za-z0-9_])", sub, text)


NETWORKS = {
    "resnet18": "ResNet-18",
    "resnet32": "ResNet-32",
    "resnet50": "ResNet-50",
    "resnet101": "ResNet-101",
    "plainnet32": "PlainNet-32",
    "vit_small": "ViT-S",
    "swin_t": "Swin-T",
    "swin_s": "Swin-S",
    "wrn28_2": "WRN-28-2",
    "conv_large": "Conv-Large",
}


def network_title(name: str) -> str:
    """A network as the papers write it: `resnet32` -> ResNet-32, `vgg12` -> VGG-12."""
    if name in NETWORKS:
        return NETWORKS[name]
    if name.startswith("vgg") and name[3:].isdigit():
        return f"VGG-{name[3:]}"
    return name.replace("_", "-")


def pilot_view(name: str, xlabel: str, ylabel: str) -> None:
    """A page's view of pilot `name`: its question and candidate, each committed run's curve of the metric its
    element's finished-learning rule reads (the shaded window: the last 20 % of its evaluations), and a table of
    whether each run finished learning; runs not committed yet are named, never trained here."""
    import math

    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import Markdown, display

    from gradalign.experiments.rules import LAST_SHARE
    from gradalign.compute.pilots import CLOSED, ON_GPU, PILOTS, stored
    from gradalign.book.plotting import fit, legend_below, panels, ramp

    pilot, rows = PILOTS[name], stored(name)
    candidate = ", ".join(f"{k} = {v}" for k, v in pilot.overrides.items())
    head = f"**Pilot for `{pilot.element}`:** {pilot.question} Candidate, over the `cpu` preset: {candidate}."
    display(Markdown(head))
    done = [r for r in rows if r["done"]]
    drawn = [r for r in done if r["curve"]]  # a run that diverged on a NaN has no curve
    if drawn:
        fig, ax = panels(1, height=2.8)
        for r, color in zip(drawn, ramp(len(drawn))):
            x = r["x"] or list(range(1, len(r["curve"]) + 1))
            ax.plot(x, r["curve"], "o-", ms=2, color=color, label=r["arm"])
        first = x[-max(1, math.ceil(LAST_SHARE * len(x)))]
        ax.axvspan(first, x[-1], color="0.9", zorder=0)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        legend_below(fig, ax, columns=min(3, len(drawn)))  # arm names as long as "Layer-wise, VGG-37"
        plt.show()
    if done:
        table = pd.DataFrame(
            {
                r["arm"]: {
                    ylabel + (", best" if pilot.higher_is_better else ", lowest"): (
                        (max(r["curve"]) if pilot.higher_is_better else min(r["curve"]))
                        if r["curve"]
                        else "diverged" + (f", {r['final']:g} stored" if r["final"] is not None else "")
                    ),
                    "finished learning": {True: "yes", False: "no", None: "too few evaluations"}[r["finished"]],
                    **(
                        {"labeled-set error (%)": round(r["labeled_error"], 2)}
                        if r.get("labeled_error") is not None
                        else {}
                    ),
                    "minutes": round((r["wall_time_s"] or 0) / 60, 1),
                    "hardware": r["hardware"],
                }
                for r in done
            }
        ).T
        display(table)
    missing = [r["arm"] for r in rows if not r["done"]]
    if missing:
        print(
            fit(
                f"Not committed yet ({len(missing)} of {len(rows)}): {'; '.join(missing)}. "
                + (
                    CLOSED[name]
                    if name in CLOSED
                    else "Over the two-core budget, they are in the GPU backlog (the compute page)."
                    if name in ON_GPU
                    else f"They train with: python -m gradalign.compute.pilots {name}"
                )
            )
        )


def rerun_view(element: str, reference: str, overrides: dict | None = None) -> None:
    """An SGR local-BP element's `cpu` runs (with `overrides`, by default `pilots.RERUNS[element]` where a rerun is
    pending): its committed
    runs by network, method and K, where each was trained, and, where an arm has all its seeds, SGR against the
    `reference` arm at the same K (difference ± SE) and SGR's term against the reference's (the mechanism-active
    precondition's reference, as `validity`: Greedy for Table 6). Not a record: the verdict is the record's, drawn
    once every run is committed."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.display import Markdown, display

    from gradalign.experiments import get
    from gradalign.experiments.rules import decide
    from gradalign.experiments.seed_stats import difference, stats
    from gradalign.experiments.sgr.validity import ACTIVE_RATIO, TOLERANCE
    from gradalign.experiments.units import units_of
    from gradalign.compute.gpu_sizing import hardware_class
    from gradalign.methods.local import TITLES
    from gradalign.compute.pilots import RERUNS, stored_units
    from gradalign.book.plotting import METHOD_COLORS, SMALL_PT, panels

    def arm(spec: dict) -> tuple:
        return spec["network"], spec["method"]["method"], spec["method"]["modules"]

    overrides = RERUNS.get(element, {}) if overrides is None else overrides
    rows = stored_units(units_of(element, get(element).resolve("cpu", overrides)), arm, "test_acc", True, TOLERANCE)
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["arm"], []).append(row)
    done = sum(r["done"] for r in rows)
    where = (
        "its rerun so far (`pilots.RERUNS`)"
        if overrides and overrides == RERUNS.get(element)
        else f"its `cpu` preset with {', '.join(f'{k} = {v}' for k, v in overrides.items())}"
        if overrides
        else "its `cpu` preset"
    )
    display(Markdown(f"**{element}, {where}:** {done} of {len(rows)} runs committed."))
    table, full = {}, {}
    for (net, method, k), runs in groups.items():
        ready = [r for r in runs if r["done"]]
        if not ready:
            continue
        acc = stats([r["final"] for r in ready])  # a diverged run: its stored result, at chance
        terms = [(r["history"].get("sgr") or [None])[-1] for r in ready]  # global BP has none (K = 1), nor a NaN run
        term = stats(terms) if None not in terms else None
        if len(ready) == len(runs):
            full[(net, method, k)] = (acc, term)
        where = [hardware_class(r["hardware"] or "") or "other" for r in ready]
        table[(network_title(net), f"{TITLES[method]}, K = {k}")] = {
            "seeds": f"{len(ready)} of {len(runs)}",
            "final test accuracy (%)": mean_std_cell(acc),
            "flat tail (last 20 %)": f"{sum(bool(r['finished']) for r in ready)} of {len(ready)}",
            "diverged": sum(r["diverged"] is not None for r in ready),
            "SGR term, last epoch": "—" if term is None else f"{term['mean']:.2e}",
            "trained on": ", ".join(f"{where.count(c)} {c.upper()}" for c in dict.fromkeys(where)),
            "minutes per run (mean)": round(sum(r["wall_time_s"] for r in ready) / len(ready) / 60, 1),
        }
    if not table:
        return
    display(pd.DataFrame(table).T)
    lines = []
    for (net, method, k), (acc, term) in full.items():
        if method != "sgr" or (net, reference, k) not in full:
            continue
        other_acc, other_term = full[(net, reference, k)]
        if term is None or other_term is None:
            continue
        d, name = difference(acc, other_acc), {"layerwise": "layer-wise"}.get(reference, TITLES[reference])
        decision = decide(acc, other_acc, True)["decision"]
        word = {"beats": "above", "loses": "below"}.get(decision, "within noise of")
        ratio = term["mean"] / other_term["mean"]
        lines.append(
            f"- {network_title(net)}, K = {k}: SGR − {name} = {d['diff']:+.2f} ± {d['se']:.2f} SE points "
            f"(SGR {word} {name}, Welch's t at 5 %); SGR's term / {name}'s = {ratio:.2f} (the precondition asks ≤ "
            f"{ACTIVE_RATIO:g}: {'met' if ratio <= ACTIVE_RATIO else 'not met'})."
        )
    if lines:
        display(Markdown("From the arms whose seeds are all committed:\n\n" + "\n".join(lines)))
    shown = list(dict.fromkeys((net, k) for (net, _, k), runs in groups.items() if any(r["done"] for r in runs)))
    fig, axes = panels(len(shown), columns=min(2, len(shown)), height=2.8)
    for ax, (net, k) in zip(fig.axes, shown):
        for (n, method, modules), runs in groups.items():
            ready = [r for r in runs if r["done"] and r["curve"]]  # a run that diverged on a NaN has no curve
            if (n, modules) != (net, k) or not ready:
                continue
            length = min(len(r["curve"]) for r in ready)
            mean = [sum(r["curve"][i] for r in ready) / len(ready) for i in range(length)]
            label = f"{TITLES[method]} ({len(ready)} seed{'s' if len(ready) > 1 else ''})"
            ax.plot(ready[0]["x"][:length], mean, color=METHOD_COLORS.get(method), label=label)
        ax.set(title=f"{network_title(net)}, K = {k}", xlabel="epoch", ylabel="test accuracy (%), mean over seeds")
        ax.legend(loc="lower right", fontsize=SMALL_PT)
    plt.show()


def table2_projection() -> dict | None:
    """What Table 2's `cpu` preset would take on this machine, from stored measurements only: the shake-shake /
    Conv-Large step ratio of `bench fast_path` (fp32, cpu) and the training times of Table 4's committed `cpu` runs of
    the same variants and column that ran on this kind of CPU (`gpu_sizing.hardware_class`). None when either is
    missing."""
    from gradalign.compute.bench import BenchStore
    from gradalign.experiments import get
    from gradalign.experiments.metagrad.backbones import projected_hours
    from gradalign.experiments.units import units_of
    from gradalign.store.run_unit import read_entry
    from gradalign.compute.sweep import _committed_folder

    from gradalign.compute.gpu_sizing import hardware_class, run_seconds

    from gradalign.experiments.metagrad.ssl_runs import MODEL_TITLES

    bench = BenchStore().load("fast_path", "cpu")
    networks = (bench or {}).get("measurement", {}).get("by_network", {})
    models = {"shake_shake26_x0.125": "shake_shake26", "conv_large_x0.125": "conv_large"}  # benchmark -> model
    if not set(models) <= set(networks):
        return None
    fp32 = {name: networks[name]["seconds_per_step"]["fp32"] for name in models}
    ratio = fp32["shake_shake26_x0.125"] / fp32["conv_large_x0.125"]
    step = {f"{MODEL_TITLES[model]}, width ×0.125": fp32[name] for name, model in models.items()}
    cfg = get("metagrad.tab2").resolve("cpu")
    seconds: dict[str, list[float]] = {"labeled_only": [], "meta_mixup": []}
    hardware = set()
    for unit in units_of("metagrad.tab4", get("metagrad.tab4").resolve("cpu")):
        variant = unit.spec["method"]["variant"]
        entry = read_entry(_committed_folder("cpu"), unit) if variant in seconds else None
        if entry is not None and hardware_class(entry["provenance"].get("hardware", "")) == "cpu":
            seconds[variant].append(run_seconds(entry))  # a resumed run: its whole training, not its last sitting
            hardware.add(entry["provenance"]["hardware"])
    if not all(seconds.values()):
        return None
    return {
        "step_ratio": ratio,
        "steps_seconds": step,  # by the networks' names, as the page shows them
        "conv_large_seconds": seconds,
        "conv_large_hardware": sorted(hardware),
        "bench_hardware": bench["provenance"].get("hardware", ""),
        "hours": projected_hours(ratio, seconds, cfg.seeds),
        "runs": len(cfg.columns) * 2 * cfg.seeds,
    }


def per_seed_table(record: dict):
    """A DataFrame of each check's result in each initialisation (`toy_seeds`: a check passes only in every one),
    ✔ or ✘; None when the record's checks keep no per-seed results."""
    import pandas as pd

    rows = {  # rows named by the claim, as the checks table names them (identifiers stay out of headers)
        c["claim"]: {seed: "✔" if r["passed"] else "✘" for seed, r in c["per_seed"].items()}
        for c in record["checks"].values()
        if "per_seed" in c
    }
    return pd.DataFrame(rows).T if rows else None


def readable(frame):
    """A DataFrame's numbers as a page shows them (`measured.number`: three significant digits, a small one as a
    power of ten, never "0.000798" or "1.013500"), and a missing value as "—", never "nan"."""
    import math

    from gradalign.book.measured import number

    def one(v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        return number(v) if isinstance(v, (int, float)) else v

    return frame.map(one)


def fits_view() -> None:
    """The meta-gradient fits pilot (`metagrad_pilots.FITS_GRID`): each candidate scale, each arm's error on its own
    labeled images (eval mode, the final model), whether every arm fits, and the answer; from the committed runs
    only."""
    import pandas as pd
    from IPython.display import Markdown, display

    from gradalign.compute.metagrad_pilots import fits_answer
    from gradalign.compute.pilots import ON_GPU, stored

    answer = fits_answer(stored)
    rows = {}
    for row in answer["rows"]:
        width, steps, gamma, dropout = row["candidate"]
        cells = {arm: "not trained" if e is None else f"{e:.1f}" for arm, e in row["errors"].items()}
        rows[f"×{width:g}, {steps:,} steps, γ {gamma:g}, dropout {dropout:g}"] = {
            **cells,
            "runs committed": f"{row['done']} of {row['runs']}",
            "every arm fits": "yes" if row["fits"] else "no" if row["done"] == row["runs"] else "not yet",
            "trains": "GPU backlog" if row["name"] in ON_GPU else "here",
        }
    display(
        Markdown(f"**Labeled-set error (%) of each arm, one seed, 1,000 labels (fits: ≤ {answer['threshold']:g} %):**")
    )
    display(pd.DataFrame(rows).T)
    chosen = answer["chosen"]
    text = "no candidate has every arm fitting yet" if chosen == "none yet" else f"the first that fits is `{chosen}`"
    display(Markdown(f"**The pilot's answer so far:** {text}."))
