"""SGR part, BP-free training (notebook sgr/04): Figures 2, 3 and 4 of Yang et al. (2024), on the runs of Table 4's
network (`bp_free`: its config, presets and runs).

- `sgr.fig2`: the SGR term averaged over neighbouring modules, and the test accuracy, over training, with and
  without SGR. Claims (§4.2): the term is lower with SGR, and the test accuracy is higher throughout training.
- `sgr.fig3`: ΔL_k, the change of module k's loss caused by the updates of the modules before it in one step
  (`training.local.input_effect`), averaged per epoch, with and without SGR (§4.4, on a 4-layer PlainNet as
  ours is). Claims: without SGR its scale grows with depth and the deeper layers' ΔL is above zero most of
  the time; with SGR the scale stays smaller and the last layer's ΔL is below zero in most epochs.
- `sgr.fig4`: train loss, train accuracy and test loss over training, with and without SGR (App. F). The paper
  states no claim about them; ours, what the figure shows: at the last epoch SGR's train loss and test loss are
  lower and its train accuracy higher.
"""

from __future__ import annotations

from gradalign.experiments.base import check, outcome
from gradalign.experiments.rules import all_of, compare
from gradalign.experiments.rules import summary as summary_of
from gradalign.experiments.sgr.bp_free import (
    BPFreeConfig,
    _experiment,
    _prefixed,
    figure_runs,
    unused_settings,
)
from gradalign.experiments.sgr.bp_free_presets import FIGURE_PRESETS
from gradalign.experiments.sgr.local_runs import curves_of, scope


def _at_epoch(rows: list[list], epoch: int) -> dict | None:
    """Summary over seeds of one epoch's values (None when a seed has none)."""
    values = [row[epoch] for row in rows if epoch < len(row) and row[epoch] is not None]
    return summary_of(values) if len(values) == len(rows) and values else None


def _epoch_compare(sgr: dict, layerwise: dict, key: str, epoch: int, higher: bool, quantity: str, claim: str):
    a, b = _at_epoch(sgr[key], epoch), _at_epoch(layerwise[key], epoch)
    if a is None or b is None:
        return None
    names = ("SGR", "layer-wise")
    return compare(a, b, relation="beats", higher_is_better=higher, quantity=quantity, names=names, claim=claim)


def figure2_checks(sgr: dict, layerwise: dict) -> dict:
    """`sgr`, `layerwise`: per-seed curves {"sgr": [[...]], "test_acc": [[...]]} (seed × epoch). The SGR term is
    lower with SGR at the last epoch, and the test accuracy higher at every epoch of the second half of training,
    each beyond 2 standard errors over seeds."""
    epochs = min(len(row) for row in sgr["test_acc"])
    claim_term = "with SGR the average SGR loss of neighbouring layers is significantly lower than without (Figure 2)"
    claim_acc = "with SGR the test accuracy is better throughout training (Figure 2)"
    term = _epoch_compare(sgr, layerwise, "sgr", epochs - 1, False, "SGR term at the last epoch", claim_term)
    acc = {
        f"epoch {e + 1}": _epoch_compare(sgr, layerwise, "test_acc", e, True, "test accuracy", claim_acc)
        for e in range(epochs // 2, epochs)
    }
    acc = {k: v for k, v in acc.items() if v is not None}
    checks = {}
    if term is not None:
        checks["sgr_term_lower_with_sgr"] = term
    if acc:
        out = all_of(acc, "at every epoch of the second half: SGR's test accuracy higher by more than 2 SE", claim_acc)
        higher = [e for e, c in acc.items() if c["passed"]]
        lower = [e for e, c in acc.items() if not c["passed"] and not c.get("within_noise")]
        last = list(acc)[-1]
        out["value"] = {  # the count per outcome and the last epoch's comparison, not one line per epoch
            "epochs": len(acc),
            "higher": len(higher),
            "within noise": len(acc) - len(higher) - len(lower),
            "lower": len(lower),
            last: acc[last]["value"],
        }
        checks["test_accuracy_higher_throughout"] = out
    return checks


def figure4_checks(sgr: dict, layerwise: dict) -> dict:
    """The last epoch's train loss, train accuracy and test loss over seeds, with against without SGR."""
    rules = {"train_loss": ("lower", False), "train_acc": ("higher", True), "test_loss": ("lower", False)}
    out = {}
    for name, (word, higher) in rules.items():
        last = min(len(row) for row in sgr[name]) - 1
        quantity = f"{name.replace('_', ' ')} at the last epoch"
        claim = f"with SGR the {name.replace('_', ' ')} ends {word} (Figure 4; our reading of the curves)"
        c = _epoch_compare(sgr, layerwise, name, last, higher, quantity, claim)
        if c is not None:
            out[f"final_{name}_{word}_with_sgr"] = c
    return out


def _metrics(cfg: BPFreeConfig, runs: dict, tuning: dict, **more) -> dict:
    seconds = sum(r["train_seconds"] for group in runs.values() for r in group)
    return {**more, "train_seconds": seconds, "network": cfg.network} | ({"tuning": tuning} if tuning else {})


def _figure(cfg: BPFreeConfig, device, checks_of) -> dict:
    runs, tuning = figure_runs(cfg, device)
    checks, curves = {}, {}
    for d in cfg.datasets:
        for m in ("layerwise", "sgr"):
            c = curves_of(runs[(cfg.network, m, cfg.depth, d)])
            curves[f"{d}/{m}"] = c
        checks.update(_prefixed(cfg, d, checks_of(curves[f"{d}/sgr"], curves[f"{d}/layerwise"])))
    return outcome(checks, _metrics(cfg, runs, tuning), curves, scope=scope(cfg, ("cifar10",)))


def figure2(cfg: BPFreeConfig, device) -> dict:
    return _figure(cfg, device, figure2_checks)


def figure4(cfg: BPFreeConfig, device) -> dict:
    return _figure(cfg, device, figure4_checks)


# --- Figure 3 ----------------------------------------------------------------------------------------------


def _mean_abs(values: list) -> float:
    return sum(abs(v) for v in values) / len(values)


def figure3_checks(effect: dict) -> dict:
    """`effect[method][k]` = the per-epoch ΔL_k (mean over seeds), k = 2 … K, for layerwise and sgr: the four
    statements of §4.4 about a 4-layer PlainNet."""
    without, with_sgr = effect["layerwise"], effect["sgr"]
    ks = sorted(without, key=int)
    deep, last = ks[1:], ks[-1]
    scale = {k: round(_mean_abs(without[k]), 6) for k in ks}

    def share_above(values):
        return sum(v > 0 for v in values) / len(values)

    return {
        "scale_grows_with_depth_without_sgr": check(
            all(scale[a] < scale[b] for a, b in zip(ks, ks[1:])),
            scale,
            "without SGR, the mean |ΔL_k| over epochs strictly increases with k",
            "without SGR the scale of ΔL grows in deeper layers: discordant local updates accumulate (Figure 3)",
        ),
        "sgr_keeps_deep_scale_smaller": check(
            _mean_abs(with_sgr[last]) < _mean_abs(without[last]),
            {"sgr": round(_mean_abs(with_sgr[last]), 6), "without": scale[last]},
            f"mean |ΔL_{last}| over epochs with SGR < without",
            "with SGR the scale of ΔL does not grow apparently in deep layers (Figure 3)",
        ),
        "deep_layers_not_helped_without_sgr": check(
            all(share_above(without[k]) > 0.5 for k in deep),
            {f"ΔL_{k} > 0": round(share_above(without[k]), 3) for k in deep},
            "without SGR, ΔL_k > 0 in more than half of the epochs, for k = 3 … K",
            "without SGR the deeper layers' curves are above zero most of the time: the prior updates contribute "
            "little to their learning (Figure 3)",
        ),
        "last_layer_helped_with_sgr": check(
            share_above(with_sgr[last]) < 0.5,
            {f"ΔL_{last} < 0": round(1 - share_above(with_sgr[last]), 3)},
            f"with SGR, ΔL_{last} < 0 in more than half of the epochs",
            "with SGR the last layer's curve is below zero in most epochs: the first layers hand it a better "
            "input (Figure 3)",
        ),
    }


def figure3(cfg: BPFreeConfig, device) -> dict:
    runs, tuning = figure_runs(cfg, device)
    checks, effects, curves = {}, {}, {}
    for d in cfg.datasets:
        effect = {}
        for m in ("layerwise", "sgr"):
            curves[f"{d}/{m}"] = curves_of(runs[(cfg.network, m, cfg.depth, d)])  # the preconditions read them
            histories = [r["history"]["input_effect_by_module"] for r in runs[(cfg.network, m, cfg.depth, d)]]
            epochs = min(len(h) for h in histories)  # seed -> epoch -> module 1 ... K (module 1: None)
            effect[m] = {
                str(k): [sum(h[e][k - 1] for h in histories) / len(histories) for e in range(epochs)]
                for k in range(2, cfg.depth + 1)
            }
        effects[d] = effect
        checks.update(_prefixed(cfg, d, figure3_checks(effect)))
    metrics = _metrics(cfg, runs, tuning, input_effect=effects)
    return outcome(checks, metrics, curves, scope=scope(cfg, ("cifar10",)))


# --- presets -----------------------------------------------------------------------------------------------


EXPERIMENTS = [
    _experiment("sgr.fig2", figure2, FIGURE_PRESETS, unused_settings),
    _experiment("sgr.fig3", figure3, FIGURE_PRESETS, unused_settings),
    _experiment("sgr.fig4", figure4, FIGURE_PRESETS, unused_settings),
]
