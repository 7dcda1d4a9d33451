"""SGR part, memory (notebook sgr/03): the activation memory of one training step, local against global BP.

The paper (Yang et al. 2024, Table 5 and §4) measures the GPU memory of whole ImageNet trainings (ResNet-50/101,
ViT-S, Swin-T/S at batch 256) and claims local learning with SGR saves memory, more than 40 % on several of
them. Here the saving is measured exactly on the networks this book trains: ResNet-32, PlainNet-32 (Tables 3
and 6) and a VGG of Table 7, at the paper's CIFAR input (batch 128 of 32×32×3 images). The quantity is the
bytes autograd saves for backward (`gradalign.analysis.activation_memory`: each storage once, parameters and
buffers left out), for global BP (the whole graph alive) and for K local modules, each with its local head
(Belilovsky et al.'s, as SGR's CIFAR experiments) and freed before the next module runs: peak = the max over
modules. Two local objectives: layer-wise (the local loss only) and SGR (Eq. 5, whose input gradient is
taken with `create_graph=True`: its graph is counted too). On a CUDA device the same steps also run for real
and `torch.cuda.max_memory_allocated` is recorded beside the exact counts (which are always computed on the
CPU, so a record's exact numbers do not depend on where it ran).

The same count runs on the ImageNet networks of Tables 2 and 5 (`models.imagenet`: ResNet-18 at K = 4 by stages;
ResNet-50/101, ViT-S and Swin-T/S at K = 2 and 3, each cut where its method peaks least) at a small batch of
224 × 224 images (metrics["imagenet"]; the page of Tables 2 and 5 shows them beside the paper's memory column).

Each CIFAR peak is also given without the local heads' share (`step_memory_with_head_share`), so that the page
shows what sets a ratio: at K = 16 the modules are small and the heads weigh. A lighter head, labelled as a
variant (`pooled_belilovsky_head`: the same head after an average pool, our choice), is measured beside it; its
accuracy is not measured.

The checks test the paper's claims (local learning saves memory; more modules save more, as Table 5's K = 3
against K = 2). The project's own goals (≤ 0.3× global BP at K = 16 and ≤ 0.7× at K = 2, for SGR on ResNet-32)
are targets, shown apart from the verdict. The Transformers' "more than 40 %" (§4.2) is checked on ViT-S and
Swin-T/S at K = 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gradalign.config import Config, require
from gradalign.analysis.head_share import pooled_belilovsky_head, step_memory_with_head_share
from gradalign.experiments.base import Experiment, check, outcome, same_as_cpu

NOTEBOOK = "notebooks/sgr/03_memory.ipynb"
RESNET_SPLITS = (16, 3, 2)  # App. E: K = 16 (stem and each block), 3 (by resolution), 2 (last stage apart)
MEMORY_TARGETS = {16: 0.3, 2: 0.7}  # the project's goals for SGR on ResNet-32 (not the paper's claims)
TARGET_NETWORK = "resnet32"
IMAGENET_SPLITS = {"resnet18": (4,), "resnet50": (2, 3), "resnet101": (2, 3), "vit_small": (2, 3)}
IMAGENET_SPLITS |= {"swin_t": (2, 3), "swin_s": (2, 3)}
"""The K measured per ImageNet network: Table 2's 4 stages of ResNet-18; Table 5's K = 2 and 3."""
TRANSFORMERS = ("vit_small", "swin_t", "swin_s")
TRANSFORMER_SAVING = 0.4  # §4.2: SGR "saves more than 40% memory" on the three Transformers (K = 3)
POOLED_NETWORKS = ("resnet32", "plainnet32")  # where the pooled-head variant is measured (our choice)


@dataclass(frozen=True)
class MemoryConfig(Config):
    """One batch of random images (memory does not depend on the pixel values) through each network."""

    batch: int = 128  # App. E: batch 128 on CIFAR
    image_size: int = 32
    in_channels: int = 3
    classes: int = 10
    resnet_splits: tuple[int, ...] = RESNET_SPLITS
    resnet_width: float = 1.0
    vgg_depth: int = 57  # our choice: the deepest VGG of Table 7, where global BP fails in the paper
    vgg_width: float = 1.0
    head: str = "belilovsky"  # SGR's CIFAR local head (App. E)
    imagenet_networks: tuple[str, ...] = tuple(IMAGENET_SPLITS)  # Tables 2 and 5's networks (`models.imagenet`)
    imagenet_batch: int = 8  # our choice: the saved bytes grow in proportion to the batch, so ratios hardly move
    imagenet_image_size: int = 224
    bench_splits: tuple[int, ...] = (16, 2)  # the step-time benchmark: ResNet-32 at these K (issue's benchmark)
    bench_repeats: int = 5  # timed steps per method (median), after one warm-up
    pooled_head_factors: tuple[int, ...] = (2, 4)  # the variant's average pool before the head's conv (our choice)

    def validate(self) -> None:
        from gradalign.models.local_heads import HEADS
        from gradalign.models.vgg_deep import VGG_DEPTHS

        super().validate()
        require(self, "batch", self.batch >= 2, "must be >= 2 (BatchNorm in training mode needs two samples)")
        require(self, "image_size", self.image_size >= 8, "must be >= 8 pixels")
        require(self, "in_channels", self.in_channels >= 1, "must be >= 1")
        require(self, "classes", self.classes >= 2, "must be >= 2")
        require(self, "resnet_splits", len(self.resnet_splits) >= 1, "must name at least one K")
        require(self, "resnet_splits", all(k in RESNET_SPLITS for k in self.resnet_splits), "must be among 16, 3, 2")
        require(self, "resnet_splits", len(set(self.resnet_splits)) == len(self.resnet_splits), "must not repeat")
        require(self, "vgg_depth", self.vgg_depth in VGG_DEPTHS, f"must be one of Table 7's depths {VGG_DEPTHS}")
        for name in ("resnet_width", "vgg_width"):
            require(self, name, getattr(self, name) > 0, "must be > 0")
        require(self, "head", self.head in HEADS, f"must be one of {sorted(HEADS)}")
        known = all(n in IMAGENET_SPLITS for n in self.imagenet_networks)
        require(self, "imagenet_networks", known, f"must be among {tuple(IMAGENET_SPLITS)}")
        require(self, "imagenet_batch", self.imagenet_batch >= 2, "must be >= 2 (BatchNorm in training mode)")
        ok = all(k in RESNET_SPLITS for k in self.bench_splits)
        require(self, "bench_splits", ok, "must be among 16, 3, 2")
        require(self, "bench_repeats", self.bench_repeats >= 1, "must be >= 1")
        ok = all(isinstance(f, int) and f >= 2 for f in self.pooled_head_factors)
        require(self, "pooled_head_factors", ok, "must be integers >= 2 (pool size and stride)")
        ok = self.imagenet_image_size >= 32 and self.imagenet_image_size % 16 == 0
        require(self, "imagenet_image_size", ok, "must be >= 32 and a multiple of 16 (ViT-S/16's patches)")


def memory_checks(ratios: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """The paper's claims on the measured ratios {network: {method: {K: peak(K) / peak(global BP)}}}."""
    worst = {
        f"{net}/{method}": max(by_k.values()) for net, methods in ratios.items() for method, by_k in methods.items()
    }
    falling = {}
    for net, methods in ratios.items():
        by_k = methods["sgr"]
        ordered = [by_k[k] for k in sorted(by_k, key=int, reverse=True)] + [1.0]  # finest split first, then BP
        falling[net] = all(a < b for a, b in zip(ordered, ordered[1:]))
    return {
        "local_learning_saves_memory": check(
            all(r < 1 for r in worst.values()),
            worst,
            "peak saved bytes of every local split / global BP < 1, every network, layer-wise and SGR",
            "local learning, with or without SGR, needs less activation memory than global BP (Table 5)",
        ),
        "more_modules_less_memory": check(
            all(falling.values()),
            falling,
            "SGR's peak strictly falls as K grows (ratio at the finest K < ... < coarsest K < 1)",
            "more local modules save more memory (Table 5: K = 3 below K = 2 for ResNet-50 and ResNet-101)",
        ),
    }


def transformer_check(ratios: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """§4.2's claim on the Transformers measured (none measured: no check)."""
    measured = {n: ratios[n]["sgr"]["3"] for n in TRANSFORMERS if n in ratios and "3" in ratios[n]["sgr"]}
    if not measured:
        return {}
    return {
        "transformers_save_40_percent": check(
            all(1 - r > TRANSFORMER_SAVING for r in measured.values()),
            measured,
            f"SGR's peak saved bytes at K = 3 / global BP < {1 - TRANSFORMER_SAVING:.1f} on every Transformer measured "
            "(activations only; the paper's GB also hold weights, gradients and optimizer state)",
            "on ViT-S, Swin-T and Swin-S, SGR saves more than 40 % of global BP's memory (§4.2, Table 5)",
        )
    }


def memory_targets(ratios: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict]:
    """The project's memory goals for SGR on ResNet-32 (not claims of the paper): targets beside the verdict."""
    measured = ratios.get(TARGET_NETWORK, {}).get("sgr", {})
    return {
        f"resnet32_sgr_k{k}": check(
            measured[str(k)] <= limit,
            measured[str(k)],
            f"SGR peak saved bytes at K = {k} / global BP <= {limit} (ResNet-32, batch of the preset)",
            f"one SGR step with K = {k} needs at most {limit}x the activation memory of global BP (project goal)",
        )
        for k, limit in MEMORY_TARGETS.items()
        if str(k) in measured
    }


def paper_table5_ratios() -> list[dict]:
    """Table 5's memory column as ratios to global BP (theirs: ImageNet, whole-GPU memory at batch 256)."""
    from gradalign.papers import SGR_TABLE5_MEMORY

    rows = []
    for network, cells in SGR_TABLE5_MEMORY.items():
        global_gb = cells["global_bp"][1]
        for method in ("sgr", "infopro"):
            for k, gb in cells[method]:
                rows.append({"network": network, "method": method, "K": k, "memory_gb": gb, "ratio": gb / global_gb})
    return rows


def memory_targets_pooled(pooled: dict[str, dict]) -> dict[str, dict]:
    """The K = 16 goal for SGR on ResNet-32 with the pooled-head variant, one per pool factor (labelled as a
    variant: the paper's head is Belilovsky et al.'s without the pool)."""
    limit = MEMORY_TARGETS[16]
    out = {}
    for factor, ratios in pooled.items():
        measured = ratios.get(TARGET_NETWORK, {}).get("sgr", {})
        if "16" in measured:
            out[f"resnet32_sgr_k16_pooled{factor}"] = check(
                measured["16"] <= limit,
                measured["16"],
                f"SGR peak saved bytes at K = 16 / global BP <= {limit}, local heads after a {factor}×{factor} "
                "average pool (ResNet-32; a variant, accuracy not measured)",
                f"with a lighter local head, one SGR step with K = 16 needs at most {limit}x the activation memory "
                "of global BP (project goal)",
            )
    return out


def _networks(cfg: MemoryConfig) -> dict[str, tuple[torch.nn.Module, tuple[int, ...]]]:
    from gradalign.models.resnet_cifar import resnet32
    from gradalign.models.vgg_deep import VGG_STAGES, vgg_deep

    args = (cfg.classes, cfg.in_channels)
    vgg_splits = (cfg.vgg_depth - 2, VGG_STAGES)  # our choice: each conv layer a module, and one per stage
    return {
        "resnet32": (resnet32(*args, width=cfg.resnet_width), cfg.resnet_splits),
        "plainnet32": (resnet32(*args, width=cfg.resnet_width, plain=True), cfg.resnet_splits),
        f"vgg{cfg.vgg_depth}": (vgg_deep(cfg.vgg_depth, *args, width=cfg.vgg_width), vgg_splits),
    }


def activation_memory(cfg: MemoryConfig, device) -> dict:
    """Peak saved bytes of one step for every network, K and method; ratios to global BP; checks and targets."""
    from gradalign.analysis.activation_memory import METHODS, cuda_step_peak_bytes, step_activation_memory

    gen = torch.Generator().manual_seed(cfg.seed)
    x = torch.randn(cfg.batch, cfg.in_channels, cfg.image_size, cfg.image_size, generator=gen)
    y = torch.randint(0, cfg.classes, (cfg.batch,), generator=gen)
    on_cuda = torch.device(device).type == "cuda"
    rows, global_bytes, ratios, cuda_rows = [], {}, {}, []
    without_heads = {}
    pooled = {str(f): {} for f in cfg.pooled_head_factors}
    for name, (model, splits) in _networks(cfg).items():
        torch.manual_seed(cfg.seed)
        global_bytes[name] = step_activation_memory(model, 1, x, y, cfg.head)["peak_bytes"]
        ratios[name], without_heads[name] = {}, {}
        for method in METHODS:
            ratios[name][method], without_heads[name][method] = {}, {}
            for k in splits:
                measured = step_memory_with_head_share(model, k, x, y, cfg.head, method)
                ratio = measured["peak_bytes"] / global_bytes[name]
                ratios[name][method][str(k)] = ratio
                without = measured["peak_without_heads_bytes"] / global_bytes[name]
                without_heads[name][method][str(k)] = without
                rows.append({"network": name, "method": method, "K": k, "ratio": ratio,
                             "ratio_without_heads": without, **measured})  # fmt: skip
        if name in POOLED_NETWORKS:
            channels = _module_channels(model)
            for factor in cfg.pooled_head_factors:
                by_method = pooled[str(factor)].setdefault(name, {})
                for method in METHODS:
                    by_method[method] = {}
                    for k in splits:
                        heads = [pooled_belilovsky_head(c, cfg.classes, factor) for c in channels(k)[:-1]]
                        measured = step_memory_with_head_share(model, k, x, y, cfg.head, method, heads)
                        by_method[method][str(k)] = measured["peak_bytes"] / global_bytes[name]
        if on_cuda:
            cuda_rows += _cuda_rows(name, model, splits, x, y, cfg.head, device, cuda_step_peak_bytes, METHODS)
    metrics = {"global_bp_bytes": global_bytes, "rows": rows, "ratios": ratios, "paper_table5": paper_table5_ratios()}
    metrics |= {"ratios_without_heads": without_heads, "pooled_head": pooled}
    if on_cuda:
        metrics["cuda_peak"] = cuda_rows
    metrics["step_time"] = step_time(cfg, device)
    imagenet = imagenet_memory(cfg)
    metrics["imagenet"] = imagenet
    every = {**ratios, **imagenet["ratios"]}
    checks = {**memory_checks(every), **transformer_check(imagenet["ratios"])}
    targets = {**memory_targets(ratios), **memory_targets_pooled(pooled)}
    return outcome(checks, metrics, scope="exact", targets=targets)


def step_time(cfg: MemoryConfig, device) -> dict[str, dict]:
    """The time of one SGR step against one layer-wise and one global-BP step (ResNet-32, the preset's batch), on
    the device asked for: a benchmark beside the memory (`benchmarks.sgr_step`), by K."""
    from gradalign.benchmarks.sgr_step import measure_sgr_step

    return {
        str(k): measure_sgr_step(device, k, cfg.batch, cfg.image_size, cfg.in_channels, cfg.bench_repeats)
        for k in cfg.bench_splits
    }


def imagenet_memory(cfg: MemoryConfig) -> dict:
    """Tables 2 and 5's networks at a small batch: global BP against layer-wise and SGR at each K, each split
    where it peaks least for its method (`analysis.activation_memory.set_boundaries`; Table 2's ResNet-18 by stages)."""
    from gradalign.analysis.activation_memory import METHODS, step_activation_memory
    from gradalign.analysis.activation_memory import set_boundaries
    from gradalign.models.imagenet import imagenet_network
    from gradalign.progress import progress

    gen = torch.Generator().manual_seed(cfg.seed + 1)
    size = cfg.imagenet_image_size
    x = torch.randn(cfg.imagenet_batch, 3, size, size, generator=gen)
    y = torch.randint(0, 1000, (cfg.imagenet_batch,), generator=gen)
    rows, global_bytes, ratios = [], {}, {}
    for name in progress(cfg.imagenet_networks, desc="ImageNet networks"):
        torch.manual_seed(cfg.seed)
        model = imagenet_network(name, 1000, size)
        global_bytes[name] = step_activation_memory(model, 1, x, y)["peak_bytes"]
        ratios[name] = {method: {} for method in METHODS}
        for k in IMAGENET_SPLITS[name]:
            for method in METHODS:
                rule = "stages" if name == "resnet18" else "memory"
                cuts = set_boundaries(model, k, rule, x, "sgr" if method == "sgr" else "local")
                measured = step_activation_memory(model, k, x, y, method=method)
                ratio = measured["peak_bytes"] / global_bytes[name]
                ratios[name][method][str(k)] = ratio
                rows.append({"network": name, "method": method, "K": k, "cuts": list(cuts), "units": len(model.units),
                             "ratio": ratio, **_bytes_of(measured)})  # fmt: skip
    return {"batch": cfg.imagenet_batch, "image_size": size, "global_bp_bytes": global_bytes, "rows": rows,
            "ratios": ratios}  # fmt: skip


def _module_channels(model: torch.nn.Module):
    """K ↦ the output channels of the K modules of a CIFAR ResNet (`models.resnet_cifar.module_channels`)."""
    from gradalign.models.resnet_cifar import module_channels

    return lambda k: module_channels(model, k)


def _bytes_of(measured: dict) -> dict:
    return {"peak_bytes": measured["peak_bytes"], "per_module_bytes": measured["per_module_bytes"]}


def _cuda_rows(name, model, splits, x, y, head, device, measure, methods) -> list[dict]:
    """torch.cuda.max_memory_allocated of real steps (global BP, then each method and K), with ratios."""
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    global_peak = measure(model, 1, x, y, head)
    rows = [{"network": name, "method": "global_bp", "K": 1, "peak_bytes": global_peak, "ratio": 1.0}]
    for method in methods:
        for k in splits:
            peak = measure(model, k, x, y, head, method)
            rows.append({"network": name, "method": method, "K": k, "peak_bytes": peak, "ratio": peak / global_peak})
    model.to("cpu")
    return rows


SMOKE = {"batch": 4, "image_size": 16, "vgg_width": 0.25, "imagenet_networks": ("resnet18", "vit_small", "swin_t")}
SMOKE |= {"imagenet_batch": 2, "imagenet_image_size": 32, "bench_repeats": 1}

EXPERIMENTS = [
    Experiment(
        "sgr.mem",
        activation_memory,
        MemoryConfig,
        same_as_cpu({}, SMOKE),
        1,
        NOTEBOOK,
        uses_accelerator=True,
        note="the exact counts run on the CPU; on a CUDA device the record adds torch.cuda.max_memory_allocated "
        "of the same steps; the step-time benchmark runs on the device asked for",
        choices={
            "quantity": "bytes of the tensors autograd saves for backward, each storage once, parameters and "
            "buffers excluded, the input batch counted where a layer saves it; the peak of a local step is the "
            "max over modules of module + local head + loss",
            "models": "ResNet-32 and PlainNet-32 with 1x1-conv shortcuts (InfoPro's ResNet-32); VGG-57 without BN (the "
            "network of sgr.tab7nobn; the sgr.tab7 record's runs add BN after every conv), split into its 55 conv "
            "layers and into its 5 stages (the paper gives no VGG split)",
            "local head": "Belilovsky et al.'s k = 2 head (conv3x3 C->C, BN, ReLU, 2x2 pool, BN, linear) on every "
            "module but the last, which uses the network's own classifier",
            "heads' share": "per module, the bytes its local head and loss save (with SGR also the graph of their "
            "input gradient), measured alone on the module's output, which counts as the module's",
            "pooled head (variant)": "Belilovsky et al.'s head after a 2x2 or 4x4 average pool (stride = size), on "
            "ResNet-32 and PlainNet-32; its accuracy is not measured",
            "SGR": "Eq. 5 as methods.sgr.module_step builds it (lambda = 1, mean reduction); the stored delta "
            "(one tensor of the module input's size) is not a saved tensor and is not counted",
            "batch": "128 random 32x32x3 images (App. E's CIFAR batch); memory does not depend on pixel values",
            "ImageNet networks": "8 random 224x224 images (the paper measures at 256: saved bytes grow in proportion "
            "to the batch); ResNet-18 cut by stages (Table 2), the others where the method's peak is least (App. E)",
        },
    ),
]
