"""Numbers the papers report, transcribed once (pages and the report read them from here).

Each entry names its source in the paper. Error rates are in percent, as printed (mean, std over
the paper's trials). Entries for parts not built yet are added with those parts.
"""

from __future__ import annotations

PAPERS = {
    # The four papers, one per part: how the book cites them, and where to read them.
    "lga": {
        "cite": "Jackson, J. & Schulman, J. (2019). Semi-Supervised Learning by Label Gradient Alignment. "
        "arXiv:1902.02336",
        "url": "https://arxiv.org/abs/1902.02336",
    },
    "metagrad": {
        "cite": "Zhang, X.-Y., Jia, H.-L., Xiao, T., Cheng, M.-M. & Yang, M.-H. (2020). Semi-Supervised Learning "
        "with Meta-Gradient. arXiv:2007.03966; AISTATS 2021, PMLR 130:73-81",
        "url": "https://arxiv.org/abs/2007.03966",
    },
    "isoloss": {
        "cite": "Halvagal, M. S., Laborieux, A. & Zenke, F. (2022). Predictor networks and stop-grads provide "
        "implicit variance regularization in BYOL/SimSiam. arXiv:2212.04858 (v1; NeurIPS 2023 as "
        "Implicit variance regularization in non-contrastive SSL)",
        "url": "https://arxiv.org/abs/2212.04858",
    },
    "sgr": {
        "cite": "Yang, Y., Li, X., Alfarra, M., Hammoud, H., Bibi, A., Torr, P. & Ghanem, B. (2024). Towards "
        "Interpretable Deep Local Learning with Successive Gradient Reconciliation. ICML 2024, arXiv:2406.05222",
        "url": "https://arxiv.org/abs/2406.05222",
    },
}

LGA_TABLE1 = {
    # Jackson & Schulman (2019), Table 1: test error %, CIFAR-10 4000 labels / SVHN 1000 labels, 5 trials.
    # Rows other than LGA are quoted from Oliver et al. (2018), Table 1.
    "LGA": {"cifar10_4000": (12.91, 0.15), "svhn_1000": (7.56, 0.19)},
    "LGA + VAT": {"cifar10_4000": (12.06, 0.19), "svhn_1000": (6.58, 0.36)},
    "VAT": {"cifar10_4000": (13.86, 0.27), "svhn_1000": (5.63, 0.20)},
    "VAT + EntMin": {"cifar10_4000": (13.13, 0.39), "svhn_1000": (5.35, 0.19)},
    "Π-Model": {"cifar10_4000": (16.37, 0.63), "svhn_1000": (7.19, 0.27)},
    "Mean Teacher": {"cifar10_4000": (15.87, 0.28), "svhn_1000": (5.65, 0.47)},
    "Pseudo-Label": {"cifar10_4000": (17.78, 0.57), "svhn_1000": (7.62, 0.29)},
    "Supervised": {"cifar10_4000": (20.26, 0.38), "svhn_1000": (12.83, 0.47)},
}
LGA_TABLE1_TRIALS = 5

LGA_FIGURE1 = {
    # §3.1 and Figure 1's caption: hyperparameters, and the claims the figure supports.
    "alpha_theta": 1e-3,
    "alpha_w": 1e-3,
    "eps_norm": 1e-3,
    "claims": (
        "c_{k,i} converges to 1 faster for larger lambda^u_i",
        "c_{k,i} converges to 1 faster for larger lambda^l_i",
        "every c_{k,i} converges to 1 (the fully supervised fixed point)",
    ),
}

METAGRAD_TABLE1 = {
    # Zhang et al. (2020), Table 1, Conv-Large: test error % (also the official README's numbers).
    "svhn_1000": 3.15,
    "cifar10_4000": 7.78,
    "cifar100_10000": 30.74,
}

ISOLOSS_TABLE1 = {
    # Halvagal, Laborieux & Zenke (2022), Table 1: linear readout validation accuracy %, mean ± std over 4 seeds.
    "L": {
        "cifar10_ema": (74.0, 0.6),
        "cifar10_no_ema": (59.9, 2.1),
        "stl10_ema": (63.8, 1.2),
        "stl10_no_ema": (33.0, 1.9),
    },
    "iso": {
        "cifar10_ema": (72.5, 0.4),
        "cifar10_no_ema": (73.5, 0.5),
        "stl10_ema": (67.1, 0.4),
        "stl10_no_ema": (65.7, 0.8),
    },
}
ISOLOSS_TABLE1_SEEDS = 4

PAPER_NUMBERS = {
    "lga.tab1": LGA_TABLE1,
    "lga.fig1": LGA_FIGURE1,
    "metagrad.tab1": METAGRAD_TABLE1,
    "isoloss.tab1": ISOLOSS_TABLE1,
}

# Yang et al. (2024), SGR. Accuracies in percent (mean, std over the paper's trials), as printed.
SGR_TABLE3 = {
    # Table 3: local training on CIFAR-10, each ResNet-32 / PlainNet block a local module (K = 16),
    # local head conv + linear. Test accuracy %.
    "layer-wise": {"resnet32": (84.49, 0.36), "plainnet32": (80.66, 0.42)},
    "reforward": {"resnet32": (84.38, 0.52), "plainnet32": (80.74, 0.44)},
    "sgr": {"resnet32": (85.65, 0.38), "plainnet32": (81.67, 0.29)},
}

SGR_TABLE4 = {
    # Table 4: BP-free PlainNet, fixed ETF heads, test accuracy %. The FA / DRTP / PEPITA rows are quoted
    # by the paper from Dellaferrera & Kreiman (2022), not run by its authors.
    "FA": {"cifar10": (57.51, 0.57), "cifar100": (27.15, 0.53)},
    "DRTP": {"cifar10": (50.53, 0.81), "cifar100": (20.14, 0.68)},
    "PEPITA": {"cifar10": (56.33, 1.35), "cifar100": (27.56, 0.60)},
    "layer-wise": {"cifar10": (69.17, 0.91), "cifar100": (48.30, 0.64)},
    "reforward": {"cifar10": (69.05, 0.63), "cifar100": (47.12, 0.55)},
    "sgr": {"cifar10": (72.40, 0.75), "cifar100": (49.41, 0.44)},
}

SGR_TABLE6 = {
    # Table 6: ResNet-32 with K local modules, test accuracy %. Global BP: CIFAR-10 92.82 ± 0.22,
    # CIFAR-100 74.78 ± 0.31. (Two cells are printed with a comma, "70,68" and "70,59": read as decimals.)
    "global_bp": {"cifar10": (92.82, 0.22), "cifar100": (74.78, 0.31)},
    "greedy": {
        "cifar10": {16: (76.96, 0.54), 3: (85.12, 0.35), 2: (90.06, 0.43)},
        "cifar100": {16: (48.77, 0.41), 3: (63.55, 0.32), 2: (70.68, 0.38)},
    },
    "dgl": {
        "cifar10": {16: (84.01, 0.40), 3: (87.61, 0.51), 2: (91.05, 0.27)},
        "cifar100": {16: (63.31, 0.28), 3: (70.59, 0.39), 2: (72.34, 0.31)},
    },
    "infopro": {
        "cifar10": {16: (85.69, 0.47), 3: (90.43, 0.36), 2: (91.74, 0.29)},
        "cifar100": {16: (66.27, 0.44), 3: (71.44, 0.24), 2: (73.59, 0.25)},
    },
    "sgr": {
        "cifar10": {16: (85.65, 0.38), 3: (91.34, 0.45), 2: (92.91, 0.36)},
        "cifar100": {16: (66.61, 0.31), 3: (72.15, 0.27), 2: (74.63, 0.20)},
    },
}

SGR_TABLE7 = {
    # Table 7: VGG of depth d on CIFAR-10, test accuracy % (one number per cell; None: "fail").
    "depths": (12, 17, 27, 37, 47, 57),
    "global_bp": (90.76, 90.95, 90.46, 78.47, 37.68, None),
    "sgr": (84.81, 86.38, 86.95, 86.09, 85.30, 85.51),
}

SGR_TABLE2 = {
    # Table 2: ResNet-18 on ImageNet, 4 local modules by spatial resolution, top-1 accuracy %. "Greedy" is the
    # authors' implementation of Belilovsky et al. (2019); "non-greedy" is layer-wise training without SGR.
    "greedy": 63.65,
    "layerwise": 69.44,
    "sgr": {1000: 70.32, 2000: 70.53, 3000: 70.62, 5000: 70.73, 7000: 70.69},
}

SGR_TABLE5 = (
    # Table 5: ImageNet on 8 A100s: (network, method, K, top-1 %, top-5 %, train hours, memory GB per GPU at
    # batch 256). K None: global BP. The self-supervised ResNet-50 rows (Barlow Twins) are left out: the book
    # covers the supervised rows. The memory column is also `SGR_TABLE5_MEMORY`.
    ("resnet50", "global_bp", None, 76.55, 93.06, 7.0, 21.49),
    ("resnet50", "infopro", 2, 76.23, 92.92, 10.8, 21.59),
    ("resnet50", "sgr", 2, 76.35, 93.03, 17.1, 17.91),
    ("resnet50", "infopro", 3, 75.33, 92.57, 21.2, 18.73),
    ("resnet50", "sgr", 3, 75.42, 92.57, 15.1, 15.34),
    ("resnet101", "global_bp", None, 77.97, 94.06, 11.0, 31.70),
    ("resnet101", "infopro", 2, 77.61, 93.78, 18.6, 26.14),
    ("resnet101", "sgr", 2, 77.69, 93.84, 28.5, 22.99),
    ("resnet101", "infopro", 3, 77.02, 93.47, 24.3, 21.87),
    ("resnet101", "sgr", 3, 77.02, 93.24, 22.9, 18.18),
    ("vit_small", "global_bp", None, 79.40, 94.11, 52.2, 20.70),
    ("vit_small", "infopro", 3, 78.15, 94.00, 61.8, 14.96),
    ("vit_small", "sgr", 3, 78.65, 94.03, 62.5, 11.73),
    ("swin_t", "global_bp", None, 81.18, 95.61, 43.8, 26.78),
    ("swin_t", "infopro", 2, 79.38, 94.14, 53.2, 23.34),
    ("swin_t", "sgr", 3, 80.05, 94.95, 56.3, 15.83),
    ("swin_s", "global_bp", None, 83.02, 96.29, 75.9, 42.60),
    ("swin_s", "infopro", 2, 81.19, 95.00, 86.6, 33.08),
    ("swin_s", "sgr", 3, 81.64, 95.45, 90.8, 22.83),
)

SGR_TABLE5_MEMORY = {
    # Table 5's memory column (GB per GPU at batch 256) by network: global BP, and (K, GB) per method.
    net: {
        "global_bp": (None, next(r[6] for r in SGR_TABLE5 if r[0] == net and r[1] == "global_bp")),
        **{m: tuple((r[2], r[6]) for r in SGR_TABLE5 if r[0] == net and r[1] == m) for m in ("infopro", "sgr")},
    }
    for net in dict.fromkeys(r[0] for r in SGR_TABLE5)
}

SGR_TABLE8 = {
    # Table 8 (Appendix D, Eq. 35): FLOPs of the SGR gradient of one block y = ReLU(W x), W: m × n.
    "A = dL/dy ⊗ σ'(Wx)": "O(m)",
    "B = (Wᵀ A − g)ᵀ": "O((2m − 1) n + n)",
    "A · B": "O(mn)",
    "total": "O(3mn + m)",
}

METAGRAD_TABLE6 = (
    # Zhang et al. (2020), Table 6: Conv-Large on 32 x 32 inputs, one row per layer as printed. The second
    # MaxPooling row prints 128 filters; the layer passes the 256 channels of the convolutions before it.
    {"layer": "Convolution", "filters": 128, "kernel": 3, "stride": 1, "padding": 1, "output": 32},
    {"layer": "Convolution", "filters": 128, "kernel": 3, "stride": 1, "padding": 1, "output": 32},
    {"layer": "Convolution", "filters": 128, "kernel": 3, "stride": 1, "padding": 1, "output": 32},
    {"layer": "MaxPooling", "filters": 128, "kernel": 2, "stride": 2, "padding": 0, "output": 16},
    {"layer": "Dropout", "p": 0.5, "output": 16},
    {"layer": "Convolution", "filters": 256, "kernel": 3, "stride": 1, "padding": 1, "output": 16},
    {"layer": "Convolution", "filters": 256, "kernel": 3, "stride": 1, "padding": 1, "output": 16},
    {"layer": "Convolution", "filters": 256, "kernel": 3, "stride": 1, "padding": 1, "output": 16},
    {"layer": "MaxPooling", "filters": 128, "kernel": 2, "stride": 2, "padding": 0, "output": 8},
    {"layer": "Dropout", "p": 0.5, "output": 8},
    {"layer": "Convolution", "filters": 512, "kernel": 3, "stride": 1, "padding": 0, "output": 6},
    {"layer": "Convolution", "filters": 256, "kernel": 1, "stride": 1, "padding": 0, "output": 6},
    {"layer": "Convolution", "filters": 128, "kernel": 1, "stride": 1, "padding": 0, "output": 6},
    {"layer": "AvgPooling", "filters": 128, "kernel": 6, "stride": 1, "padding": 0, "output": 1},
    {"layer": "Linear", "in": 128, "out": 10, "output": 1},
)

METAGRAD_TABLE4 = {
    # Zhang et al. (2020), Table 4: ablation, test error %, Conv-Large, 1k / 4k / 10k labels.
    "labeled only": {"svhn": 9.76, "cifar10": 15.43, "cifar100": 38.74},
    "meta": {"svhn": 3.68, "cifar10": 11.63, "cifar100": 35.40},
    "mixup": {"svhn": 5.60, "cifar10": 11.10, "cifar100": 32.67},
    "meta + mixup": {"svhn": 3.15, "cifar10": 7.78, "cifar100": 30.74},
}

METAGRAD_TABLE2 = {
    # Zhang et al. (2020), Table 2: ResNet-26 shake-shake 2x96d, test error %, by number of labels.
    "fastSWA": {"cifar10": {1000: 6.6, 2000: 5.7, 4000: 5.0}, "cifar100": {10000: 28.0}},
    "ours": {"cifar10": {1000: 6.3, 2000: 5.2, 4000: 4.1}, "cifar100": {6000: 26.7, 8000: 25.1, 10000: 22.9}},
}

METAGRAD_TABLE3 = {
    # Zhang et al. (2020), Table 3: ImageNet, 10 % labels, ResNet-18, error % (top-1, top-5).
    "Labeled-Only": (53.65, 31.01),
    "MT": (49.07, 23.59),
    "Co-training": (46.50, 22.73),
    "ADA-Net": (44.91, 21.18),
    "Ours": (44.87, 18.88),
    "Fully-Supervised": (29.15, 10.12),
}
