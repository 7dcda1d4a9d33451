"""SGR part, the λ calibration pilot (notebook sgr/02, issue 28): which λ and reduction of Eq. 5-6 make the term act.

App. E sets λ = 1 on CIFAR with Algorithm 1's `nn.MSELoss()`, the mean over batch × D features of the squared
difference of two unit-norm gradients: about 2/D per sample, so that at λ = 1 the term's gradient is a small
fraction of the cross-entropy's. Eq. 6 writes ‖·‖², a sum over features, D times larger. The pilot (`sgr.lam`)
measures, for PlainNet-32 and ResNet-32 at K = 16 and K = 2, each reduction and each λ (and `sgr.lam7`, the same for
Table 7's VGG-12 and VGG-37 with every conv a module, `PRESETS7`):

- the gradient ratio ‖λ∇_θk L_k^SGR‖ / ‖∇_θk L_k‖ of every module k ≥ 2 at initialisation, on one batch
  (`gradient_ratios`; linear in λ, so measured at λ = 1 and scaled);
- the SGR term at the last epoch of a short run (mean over modules 2 … K), against layer-wise training's
  (the same network trained without the term; its term converted to the sum reduction module by module, × D_k);
- the validation accuracy of that run, on training images held out from its training subset (the test split is
  not read: the choice is made on it).

The term *acts* where it ends at most half of layer-wise training's (`ACTIVE_RATIO`, the precondition of every SGR
training page, `sgr.validity`). The choice (`choose`): among the settings where it acts in the most networks and K,
the highest mean validation accuracy (ties: the smaller λ). A run that diverges (`training.local.divergence`)
counts at chance accuracy, its term not acting (it is not stored: a rerun of the pilot trains it again). The claim
checked: App. E's λ = 1 with the mean reduction makes the term act (one seed of short runs: the verdict stays
inconclusive, `sgr.validity`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from gradalign.config import Config, require
from gradalign.models.vgg_deep import VGG_DEPTHS
from gradalign.experiments.base import Experiment, check, outcome
from gradalign.training.local import SGRProtocol, network_depth

NOTEBOOK = "notebooks/sgr/02_local_bp.ipynb"
ACTIVE_RATIO = 0.5  # the term acts: SGR's at the end <= 0.5 x layer-wise training's (issue 28's rule)
PILOT_VERSION = 1


@dataclass(frozen=True)
class LambdaPilotConfig(Config):
    networks: tuple[str, ...] = ("plainnet32", "resnet32")
    splits: tuple[int, ...] = (16, 2)
    mean_lams: tuple[float, ...] = (1.0, 1e2, 1e3, 1e4)  # λ with Algorithm 1's mean reduction
    sum_lams: tuple[float, ...] = (1.0,)  # λ with Eq. 6's sum over features: the paper's λ read at face value
    dataset: str = "fashion_mnist"
    width: float = 0.25  # the cpu preset's width of the local-BP tables
    n_train: int = 2560  # training images of each short run (our choice: sized to one CPU core)
    validation: int = 2000  # held-out training images scoring each run
    protocol: SGRProtocol = SGRProtocol(epochs=4)  # App. E's protocol, cosine over the short run

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS

        super().validate()
        known = all(n in ("plainnet32", "resnet32") or network_depth(n) for n in self.networks)
        require(self, "networks", known, "must be among resnet32, plainnet32, vgg<d> (Table 7's depths)")
        require(self, "networks", len(self.networks) >= 1, "must name at least one network")
        require(self, "splits", len(self.splits) >= 1 and set(self.splits) <= {2, 3, 16}, "must be among 2, 3, 16")
        for network in self.networks:
            require(self, "networks", network_depth(network) in (None, *VGG_DEPTHS), f"{network}: not a Table 7 VGG")
        require(self, "mean_lams", 1.0 in self.mean_lams, "must include App. E's λ = 1 (the claim checked)")
        require(self, "mean_lams", all(v > 0 for v in self.mean_lams), "must be > 0")
        require(self, "sum_lams", all(v > 0 for v in self.sum_lams), "must be > 0")
        require(self, "dataset", self.dataset in IMAGE_SETS, f"must be one of {tuple(IMAGE_SETS)}")
        require(self, "width", self.width > 0, "must be > 0")
        require(self, "n_train", self.n_train >= self.protocol.batch_size, "must be >= protocol.batch_size")
        require(self, "validation", self.validation >= 1, "must be >= 1 (the choice is made on validation accuracy)")

    def settings(self) -> list[tuple[str, float]]:
        return [("mean", v) for v in self.mean_lams] + [("sum", v) for v in self.sum_lams]

    def pairs(self) -> list[tuple[str, int]]:
        """(network, K) of every run group: ResNet-32 and PlainNet-32 at each of `splits`; a VGG-d at Table 7's
        split for SGR, every conv a module (K = d − 2, `Table7Config.sgr_modules`)."""
        return [
            (net, K)
            for net in self.networks
            for K in ((network_depth(net) - 2,) if network_depth(net) else self.splits)
        ]

    def spec(self, network: str, method: str, modules: int, reduction: str = "mean", lam: float = 1.0):
        from gradalign.methods.local import LocalSettings
        from gradalign.training.local import LocalRunSpec

        return LocalRunSpec(
            network=network,
            method=LocalSettings(method=method, modules=modules, lam=lam, reduction=reduction),
            protocol=self.protocol,
            dataset=self.dataset,
            width=self.width,
            n_train=self.n_train,
            seed=self.seed,
            validation=self.validation,
        )


def setting_name(reduction: str, lam: float) -> str:
    return f"{reduction} λ={lam:g}"


# --- the gradient ratio at the start ------------------------------------------------------------------------


def _norm(grads) -> float:
    return float(torch.sqrt(sum((g.detach() ** 2).sum() for g in grads if g is not None)))


def gradient_ratios(modules, heads, x: torch.Tensor, y: torch.Tensor, reduction: str) -> tuple[list, list]:
    """([‖∇_θk L_k^SGR‖ / ‖∇_θk L_k‖ for k = 2 … K], [D_k, the features of module k's input]) on one batch, at
    λ = 1 (the ratio at λ is λ times it), with δ of the previous module's loss stored as in training (Eq. 5-6)."""
    from gradalign.methods.sgr import reconciliation_loss

    ratios, features, h, delta_pre = [], [], x, None
    for module, head in zip(modules, heads):
        params = [p for p in module.parameters() if p.requires_grad]
        inp = h.detach().requires_grad_(True)
        out = module(inp)
        loss = F.cross_entropy(head(out), y)
        if delta_pre is not None:
            delta_now, delta_out = torch.autograd.grad(loss, (inp, out), retain_graph=True, create_graph=True)
            term = reconciliation_loss(delta_now, delta_pre, reduction)
            g_ce = torch.autograd.grad(loss, params, retain_graph=True)
            g_sgr = torch.autograd.grad(term, params, allow_unused=True)
            ratios.append(_norm(g_sgr) / max(_norm(g_ce), 1e-30))
            features.append(inp[0].numel())
        else:
            (delta_out,) = torch.autograd.grad(loss, out)
        h, delta_pre = out.detach(), delta_out.detach()
    return ratios, features


def start_ratios(cfg: LambdaPilotConfig, network: str, K: int, device) -> dict:
    """Per reduction: the gradient ratios at λ = 1 of modules 2 … K at SGR's initialisation, and each D_k."""
    from gradalign.data.augment import normalise
    from gradalign.training.local import LocalRun
    from gradalign.training.local_data import local_data

    data = local_data(cfg.dataset, cfg.n_train, 0, device, 0, cfg.validation)
    B = cfg.protocol.batch_size
    x = normalise(data.images[:B].float() / 255, data.mean, data.std)
    out = {}
    for reduction in ("mean", "sum"):
        run = LocalRun(cfg.spec(network, "sgr", K, reduction), data, device)
        ratios, features = gradient_ratios(run.modules, run.heads, x, data.labels[:B], reduction)
        out[reduction] = [round(r, 8) for r in ratios]
        out["features"] = features
    return out


# --- the short runs --------------------------------------------------------------------------------------------


def _term_in(per_module: list, features: list, reduction: str) -> float:
    """Mean over modules 2 … K of a mean-reduced per-module term, in `reduction` (sum: × D_k)."""
    values = [v * (d if reduction == "sum" else 1) for v, d in zip(per_module[1:], features)]
    return sum(values) / len(values)


def choose(rows: list[dict]) -> dict:
    """The (reduction, λ) whose term acts in the most networks and K of the pilot, and among those the highest mean
    validation accuracy (ties: the smaller λ); None where the term acts nowhere."""
    by_setting: dict[tuple, list[dict]] = {}
    for r in rows:
        by_setting.setdefault((r["reduction"], r["lam"]), []).append(r)
    candidates = [
        {
            "reduction": red,
            "lam": lam,
            "mean_val_acc": round(sum(r["val_acc"] for r in group) / len(group), 2),
            "acts_in": sum(bool(r["active"]) for r in group),
            "of": len(group),
        }
        for (red, lam), group in by_setting.items()
    ]
    most = max((c["acts_in"] for c in candidates), default=0)
    active = [c for c in candidates if c["acts_in"] == most and most > 0]
    best = max(active, key=lambda c: (c["mean_val_acc"], -c["lam"])) if active else None
    return {"chosen": best, "candidates": candidates}


def lambda_pilot(cfg: LambdaPilotConfig, device) -> dict:
    from gradalign.data.image_sets import image_set_info
    from gradalign.errors import DivergenceError
    from gradalign.progress import progress
    from gradalign.training.local import local_unit

    chance = image_set_info(cfg.dataset).chance_accuracy
    rows, ratios, curves, layerwise, seconds = [], {}, {}, {}, 0.0
    jobs = cfg.pairs()
    for net, K in progress(jobs, desc="λ pilot"):
        key = f"{net}/K={K}"
        ratios[key] = start_ratios(cfg, net, K, device)
        features = ratios[key]["features"]
        ref = local_unit(cfg.spec(net, "layerwise", K), device).run()
        seconds += ref["train_seconds"]
        ref_last = ref["history"]["sgr_by_module"][-1]
        layerwise[key] = {"val_acc": round(ref["final_test_acc"], 2), "term_by_module": ref_last}
        curves[f"{key}/layerwise"] = {k: ref["history"][k] for k in ("test_acc", "sgr")}
        for reduction, lam in cfg.settings():
            reference = _term_in(ref_last, features, reduction)
            start = [lam * r for r in ratios[key][reduction]]
            row = {"network": net, "K": K, "reduction": reduction, "lam": lam, "layerwise_term_end": reference}
            row |= {"grad_ratio_min": min(start), "grad_ratio_median": sorted(start)[len(start) // 2]}
            row["grad_ratio_max"] = max(start)
            try:
                run = local_unit(cfg.spec(net, "sgr", K, reduction, lam), device).run()
            except DivergenceError as err:  # a λ too large for the run: a result of the pilot, at chance
                rows.append(row | {"val_acc": chance, "term_end": None, "term_ratio": None, "active": False})
                rows[-1]["diverged"] = str(err).split(";")[0]
                continue
            seconds += run["train_seconds"]
            term = run["history"]["sgr"][-1]
            row |= {"val_acc": round(run["final_test_acc"], 2), "term_end": term}
            row |= {"term_ratio": round(term / reference, 4), "active": term <= ACTIVE_RATIO * reference}
            rows.append(row | {"diverged": None})
            curves[f"{key}/{setting_name(reduction, lam)}"] = {k: run["history"][k] for k in ("test_acc", "sgr")}
    checks = pilot_checks(rows)
    metrics = {
        "rows": rows,
        "start_ratios": ratios,
        "layerwise": layerwise,
        "choice": choose(rows),
        "train_seconds": seconds,
    }
    return outcome(checks, metrics, curves, scope="reduced")


def pilot_scale(record: dict) -> str:
    from gradalign.experiments.base import plural

    cfg = record["config"]
    return (
        f"{cfg['dataset']}, width ×{cfg['width']:g}, {cfg['n_train']:,} training images, "
        f"{plural(cfg['protocol']['epochs'], 'epoch')} of {cfg['n_train'] // cfg['protocol']['batch_size']} steps, "
        f"1 seed; validation accuracy on {cfg['validation']:,} held-out training images; "
        f"{record['metrics']['train_seconds'] / 60:.0f} min of training on {record['provenance'].get('device', 'cpu')}"
    )


PRESETS = {
    "smoke": {
        "networks": ("resnet32",),
        "splits": (3,),
        "mean_lams": (1.0, 1e3),
        "sum_lams": (1.0,),
        "width": 0.125,
        "n_train": 128,
        "validation": 128,
        "protocol.epochs": 2,
        "protocol.batch_size": 64,
    },
    "cpu": {},  # the defaults: sized to one CPU core (about 20 minutes)
    "gpu": {"width": 1.0, "n_train": 12800, "protocol.epochs": 8},  # estimated, not timed
    "paper": {"width": 1.0, "n_train": 12800, "protocol.epochs": 8},
}
CHOICES = {
    "pilot": "our study (issue 28): the paper gives λ = 1 for CIFAR and no calibration; one seed of short runs",
    "active": "the term acts when SGR's term at the last epoch is at most half of layer-wise training's",
    "choice": "among the settings whose term acts in the most networks and K, the highest mean validation accuracy",
    "validation": "held-out training images (the test split is not read)",
}


def pilot_checks(rows: list[dict]) -> dict[str, dict]:
    """The pilot's claim: at the paper's setting (mean reduction, λ = 1) the SGR term acts (ends at most
    `ACTIVE_RATIO` × layer-wise training's) for every network and K in `rows`."""
    paper = [r for r in rows if r["reduction"] == "mean" and r["lam"] == 1.0]
    return {
        "paper_lambda_acts": check(
            bool(paper) and all(r["active"] for r in paper),
            {f"{r['network']}/K={r['K']}": r["term_ratio"] for r in paper},
            f"at λ = 1 with the mean reduction, SGR's term at the last epoch <= {ACTIVE_RATIO:g} x layer-wise "
            "training's (mean over modules 2 … K), for every network and K",
            "App. E: λ = 1 on CIFAR with Algorithm 1's nn.MSELoss(), the setting under which SGR reconciles the "
            "gradients of neighbouring modules (§3.2)",
        )
    }


# Table 7's VGGs (`sgr.lam7`): the λ of `sgr.lam` (10³, mean), chosen on ResNet-32 and PlainNet-32, left SGR at
# chance on VGG-12 with every conv a module in Table 7's pilot (30 epochs: test accuracy 16 % after the first epoch,
# then about 10 %), where layer-wise training reached 85 %. The gradient ratios at initialisation (λ = 1, mean, the
# cpu width ×0.125) show why: 4e-5 to 9e-3 in modules 2 … K − 1, but 2.1 (VGG-12) and 2.2 (VGG-37) in the last,
# whose input has D = 64 features, so at 10³ the last module learns the term and not the labels. Our grid: the mean
# reduction from 0.1 to 10³, a decade apart, for VGG-12 and VGG-37 (VGG-57 at gpu: about 4 times VGG-37's cost)
PRESETS7 = {
    "smoke": {
        "networks": ("vgg12",),
        "mean_lams": (1.0, 10.0),
        "sum_lams": (),
        "width": 0.0625,
        "n_train": 128,
        "validation": 128,
        "protocol.epochs": 2,
        "protocol.batch_size": 64,
    },
    "cpu": {
        "networks": ("vgg12", "vgg37"),
        "mean_lams": (0.1, 1.0, 10.0, 100.0, 1000.0),
        "sum_lams": (),
        "width": 0.125,
    },
    "gpu": {  # estimated, not timed
        "networks": ("vgg12", "vgg37", "vgg57"),
        "mean_lams": (0.1, 1.0, 10.0, 100.0, 1000.0),
        "sum_lams": (),
        "width": 0.125,
    },
    "paper": {"networks": ("vgg12", "vgg37", "vgg57"), "mean_lams": (0.1, 1.0, 10.0, 100.0, 1000.0), "sum_lams": ()},
}
CHOICES7 = {
    **CHOICES,
    "networks": "Table 7's VGG-12 and VGG-37 (VGG-57 at gpu), SGR's split every conv (K = d − 2), as Table 7's",
    "grid": "the mean reduction, λ from 0.1 to sgr.lam's choice 10³, a decade apart (our grid)",
}


def _only_vggs(cfg: LambdaPilotConfig) -> bool:
    return all(network_depth(n) for n in cfg.networks)


EXPERIMENTS = [
    Experiment(
        "sgr.lam",
        lambda_pilot,
        LambdaPilotConfig,
        PRESETS,
        PILOT_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note="a pilot of ours, not an element of the paper: short runs on Fashion-MNIST, one seed",
        choices=CHOICES,
        scale=pilot_scale,
    ),
    Experiment(
        "sgr.lam7",
        lambda_pilot,
        LambdaPilotConfig,
        PRESETS7,
        PILOT_VERSION,
        NOTEBOOK,
        uses_accelerator=True,
        note="a pilot of ours, not an element of the paper: λ for Table 7's VGGs, short runs on Fashion-MNIST, "
        "one seed",
        choices=CHOICES7,
        scale=pilot_scale,
        unused=lambda cfg: {"splits": "a VGG is split at every conv (K = d − 2)"} if _only_vggs(cfg) else {},
    ),
]
