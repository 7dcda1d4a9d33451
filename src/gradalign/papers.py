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
        "cite": "Zhang, X.-Y., Xiao, T., Jia, H., Cheng, M.-M. & Yang, M.-H. (2020). Semi-Supervised Learning "
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
