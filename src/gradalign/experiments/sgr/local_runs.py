"""SGR part, local BP: the configs every table shares and the runs they read (sgr.tab3, tab6, tab7).

Every training run is stored once in the run cache (`training.local`, kind `sgr.local`), keyed by its
`LocalRunSpec` alone, so runs that several tables need (Table 3's ResNet-32 SGR at K = 16 and Table 6's)
train once. Summaries are over seeds: mean, sample std and count of the final test accuracy.

Decision rules: `experiments.rules` (A beats B by more than 2 standard errors of the difference; A at least
as good as B unless lower by more than 2 standard errors; at least 3 seeds each).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gradalign.config import Config, require
from gradalign.experiments.seed_stats import stats
from gradalign.experiments.base import plural, scale_text
from gradalign.methods.local import LocalSettings
from gradalign.methods.sgr import SGR_LAMBDA
from gradalign.store.run_unit import without_defaults
from gradalign.training.fast import FastPath
from gradalign.training.local import SGRProtocol

# λ and reduction of Eq. 5-6 calibrated by our pilot (sgr.lam, record cpu-0ba3c2d7fe17; issue 28): our choice. The
# pilot's rule picks the setting whose term acts in the most networks and K, then the best mean validation accuracy:
# mean λ = 1e3 acts in 2 of 4 (PlainNet-32 and ResNet-32 at K = 16: term at the end 0.45 and 0.47 x layer-wise's; at
# K = 2 0.59 and 0.73), mean validation accuracy 50.2 % (λ = 1: 52.9 %, acting nowhere); gradient ratio at the start
# 0.04-5.1 over modules (median 0.15-0.26). Short runs, one seed: a scale for λ, not a tuned value.
CALIBRATED = {"reduction": "mean", "lam": 1000.0}

TABLE3_NETWORKS = ("resnet32", "plainnet32")
TABLE3_METHODS = ("layerwise", "reforward", "sgr")
TABLE6_METHODS = ("greedy", "dgl", "infopro", "sgr")
TABLE6_SPLITS = (16, 3, 2)
PAPER_DATA = {
    "sgr.tab3": "CIFAR-10",
    "sgr.tab4": "CIFAR-10, CIFAR-100",
    "sgr.tab4conv": "CIFAR-10, CIFAR-100",
    "sgr.tab6": "CIFAR-10, CIFAR-100",
    "sgr.tab7": "CIFAR-10",
    "sgr.fig2": "CIFAR-10",
    "sgr.fig3": "CIFAR-10",
    "sgr.fig4": "CIFAR-10",
}


@dataclass(frozen=True)
class LocalBPConfig(Config):
    """What every run of the three tables shares: data, width, protocol, seeds, SGR's λ."""

    datasets: tuple[str, ...] = ("fashion_mnist",)
    width: float = 1.0  # channel multiplier of every network (1: the paper's)
    n_train: int = 0  # train subset, the same images for every run (0: the whole training split)
    n_test: int = 0  # test subset (0: the whole test split)
    seeds: int = 3  # runs seed, seed + 1, ...
    protocol: SGRProtocol = SGRProtocol()
    lam: float = SGR_LAMBDA  # λ of Eq. 5
    reduction: str = "mean"  # Algorithm 1's nn.MSELoss()
    data_seed: int = 0  # the train/test subsets: the same images for every method and seed (our choice)
    # the local runs' step under bf16 autocast / channels-last (training.fast). Off at cpu: SGR's double backward
    # ran 1.2x faster in bf16 alone and slower with channels-last on a loaded 2-core CPU (layer-wise: 1.5x)
    fast: FastPath = FastPath()

    def to_dict(self) -> dict:
        """`data_seed`, `fast` only when not their defaults: records stored before the fields keep their keys."""
        return without_defaults(self, super().to_dict(), ("data_seed", "fast"))

    def validate(self) -> None:
        from gradalign.data.image_sets import IMAGE_SETS
        from gradalign.methods.sgr import REDUCTIONS

        super().validate()
        require(self, "datasets", len(self.datasets) >= 1, "must name at least one data set")
        require(self, "datasets", set(self.datasets) <= set(IMAGE_SETS), f"must be among {tuple(IMAGE_SETS)}")
        require(self, "datasets", len(set(self.datasets)) == len(self.datasets), "must not repeat")
        require(self, "width", self.width > 0, "must be > 0")
        require(
            self,
            "n_train",
            self.n_train == 0 or self.n_train >= self.protocol.batch_size,
            "must be 0 or >= protocol.batch_size",
        )
        require(self, "n_test", self.n_test >= 0, "must be >= 0")
        require(self, "seeds", self.seeds >= 1, "must be >= 1")
        require(self, "lam", self.lam >= 0, "must be >= 0")
        require(self, "reduction", self.reduction in REDUCTIONS, f"must be one of {', '.join(REDUCTIONS)}")
        require(self, "fast.compile", not self.fast.compile, "is not supported by the local steps (autograd.grad)")

    def method(self, name: str, modules: int) -> LocalSettings:
        return LocalSettings(method=name, modules=modules, lam=self.lam, reduction=self.reduction)

    def spec(self, network: str, method: str, modules: int, dataset: str, seed: int):
        from gradalign.training.local import LocalRunSpec

        return LocalRunSpec(
            network=network,
            method=self.method(method, modules),
            protocol=self.protocol,
            dataset=dataset,
            width=self.width,
            n_train=self.n_train,
            n_test=self.n_test,
            seed=seed,
            data_seed=self.data_seed,
            fast=self.fast,
        )


@dataclass(frozen=True)
class Table3Config(LocalBPConfig):
    networks: tuple[str, ...] = TABLE3_NETWORKS
    methods: tuple[str, ...] = TABLE3_METHODS
    modules: int = 16  # Table 3: every block a module

    def validate(self) -> None:
        super().validate()
        require(self, "networks", len(self.networks) >= 1, "must name at least one network")
        require(self, "networks", set(self.networks) <= set(TABLE3_NETWORKS), f"must be among {TABLE3_NETWORKS}")
        require(self, "methods", "sgr" in self.methods, "must include sgr (the claim compares it with the others)")
        require(self, "methods", set(self.methods) <= set(TABLE3_METHODS), f"must be among {TABLE3_METHODS}")
        require(self, "modules", self.modules in (2, 3, 16), "must be 16 (Table 3), 3 or 2")


@dataclass(frozen=True)
class Table6Config(LocalBPConfig):
    splits: tuple[int, ...] = TABLE6_SPLITS
    methods: tuple[str, ...] = TABLE6_METHODS
    global_bp: bool = True  # also train the network end to end (the reference row)

    def validate(self) -> None:
        super().validate()
        require(self, "splits", len(self.splits) >= 1, "must name at least one K")
        require(self, "splits", set(self.splits) <= set(TABLE6_SPLITS), "must be among 16, 3, 2 (ResNet-32's splits)")
        require(self, "splits", len(set(self.splits)) == len(self.splits), "must not repeat")
        require(self, "methods", "sgr" in self.methods, "must include sgr (the claims are about it)")
        require(self, "methods", set(self.methods) <= set(TABLE6_METHODS), f"must be among {TABLE6_METHODS}")
        if "infopro" in self.methods:
            require(self, "datasets", "stl10" not in self.datasets, "cannot include stl10 with infopro (96 px)")


@dataclass(frozen=True)
class Table7Config(LocalBPConfig):
    depths: tuple[int, ...] = (12, 17, 27, 37, 47, 57)
    sgr_split: str = "layer"  # "layer": every conv a module (K = d − 2); "stage": K = 5 (our choice: layer)

    def validate(self) -> None:
        from gradalign.models.vgg_deep import VGG_DEPTHS

        super().validate()
        require(self, "depths", len(self.depths) >= 2, "must name at least two depths (the claim is a trend)")
        require(self, "depths", set(self.depths) <= set(VGG_DEPTHS), f"must be among Table 7's {VGG_DEPTHS}")
        require(self, "depths", list(self.depths) == sorted(set(self.depths)), "must be strictly increasing")
        require(self, "sgr_split", self.sgr_split in ("layer", "stage"), "must be 'layer' (K = d − 2) or 'stage'")

    def sgr_modules(self, depth: int) -> int:
        from gradalign.models.vgg_deep import VGG_STAGES

        return depth - 2 if self.sgr_split == "layer" else VGG_STAGES


# --- runs and their summaries ------------------------------------------------------------------------------


def run_group(cfg: LocalBPConfig, jobs: list[tuple[str, str, int, str]], device) -> dict[tuple, list[dict]]:
    """{(network, method, K, dataset): [one run per seed]}, each from the run cache when stored."""
    from gradalign.progress import progress
    from gradalign.training.local import local_unit

    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    todo = [(job, seed) for job in jobs for seed in seeds]
    runs: dict[tuple, list[dict]] = {}
    for job, seed in progress(todo, desc="local-BP runs"):
        runs.setdefault(job, []).append(local_unit(cfg.spec(*job, seed), device).run())
    return runs


def half_budget(cfg):
    """`cfg` with half its epochs (at least one): the budget check's runs (`sgr.budget`)."""
    return replace(cfg, protocol=replace(cfg.protocol, epochs=max(1, cfg.protocol.epochs // 2)))


def group_units(cfg: LocalBPConfig, jobs: list[tuple[str, str, int, str]]) -> list:
    """The runs `run_group(cfg, jobs, ...)` reads, as run-cache units (`gradalign sweep`)."""
    from gradalign.training.local import local_unit

    return [local_unit(cfg.spec(*job, seed)) for job in jobs for seed in range(cfg.seed, cfg.seed + cfg.seeds)]


def summary(runs: list[dict]) -> dict:
    """Final test accuracy over seeds, how many diverged or were still improving, the training time."""
    out = stats([r["final_test_acc"] for r in runs])
    out["diverged"] = sum(r["diverged"] is not None for r in runs)
    out["still_improving"] = sum(_still_improving(r["history"]) for r in runs)
    out["train_seconds"] = sum(r["train_seconds"] for r in runs)
    out["epoch_seconds"] = sum(sum(r["epoch_seconds"]) for r in runs) / max(1, sum(r["epochs_done"] for r in runs))
    return out


def summary_with_values(runs: list[dict]) -> dict:
    """`summary` with the per-seed final test accuracies (`values`), which `rules.decide` keeps, so that the budget
    check pairs the two budgets' differences by seed (`claim_budget.change`)."""
    return {**summary(runs), "values": [r["final_test_acc"] for r in runs]}


def _still_improving(history: dict) -> bool:
    acc = history.get("test_acc", [])
    return bool(acc) and len(acc) > 1 and max(range(len(acc)), key=acc.__getitem__) == len(acc) - 1


def curves_of(runs: list[dict]) -> dict:
    """Per-epoch curves of every seed that did not diverge: test accuracy and loss, train loss, mean SGR term; and
    how many seeds diverged (their result is stored at chance; they count as seeds, `validity._seeds`)."""
    kept = [r["history"] for r in runs if r["diverged"] is None]
    names = ("test_acc", "test_loss", "train_loss", "train_acc", "sgr")
    out = {"epoch": kept[0]["epoch"] if kept else [], "diverged": len(runs) - len(kept)}
    out.update({name: [h[name] for h in kept] for name in names})
    out["sgr_by_module"] = [h["sgr_by_module"][-1] for h in kept]  # the last epoch's, per module
    return out


def scope(cfg: LocalBPConfig, paper_datasets: tuple[str, ...]) -> str:
    full = cfg.width == 1 and cfg.n_train == 0 and cfg.n_test == 0 and cfg.protocol == SGRProtocol()
    return "exact" if full and cfg.seeds >= 3 and set(paper_datasets) <= set(cfg.datasets) else "reduced"


# --- scale -------------------------------------------------------------------------------------------------


def network_item(cfg: dict) -> tuple[str, str]:
    """The network against the paper's: the BP-free runs' MLP (a config with a `depth`) by its blocks and units, our
    reading of a network whose depth and width the paper does not state (the conv reading, `blocks` "conv", by its
    blocks and channels); the others by their width multiplier."""
    if cfg.get("blocks") == "conv":
        from gradalign.models.plain_conv import describe

        return f"{describe(cfg['depth'], cfg['width'])} (our reading)", "BP-free PlainNet, depth and width not stated"
    if "depth" in cfg:
        units = round(1024 * cfg["width"])
        ours = f"{cfg['depth']}-block MLP, {units:,} units (our reading)"
        return ours, "BP-free PlainNet, depth and width not stated"
    return f"width ×{cfg['width']:g}", "width ×1"


def local_scale(record: dict) -> str:
    """Data, width, train images, epochs and seeds against the paper's (how many runs finished learning is the
    precondition's count, which `report.scale_of` adds)."""
    from gradalign.data.image_sets import IMAGE_SETS, TRAIN_SIZES

    cfg = record["config"]
    data = ", ".join(IMAGE_SETS[d].title for d in cfg["datasets"])
    n_train = cfg["n_train"] or min(TRAIN_SIZES[d] for d in cfg["datasets"])
    text = scale_text(
        (data, PAPER_DATA[record["id"]]),
        network_item(cfg),
        (f"{n_train:,} training images", "50,000 training images"),
        (plural(cfg["protocol"]["epochs"], "epoch"), "200 epochs"),
        (plural(cfg["seeds"], "seed"), "3 seeds" if record["id"] != "sgr.tab7" else "1 run"),
    )
    if cfg["n_test"]:
        text += f"; test accuracy on {cfg['n_test']:,} test images"
    return text
