"""SGR part, BP-free training: the presets of Table 4 and Figures 2-4 (`bp_free`), and the choices they rest on."""

from __future__ import annotations

from gradalign.experiments.sgr.local_runs import CALIBRATED

PRESETS = {
    "smoke": {
        "width": 0.0625,
        "n_train": 256,
        "n_test": 256,
        "seeds": 2,
        "protocol.epochs": 2,
        "protocol.batch_size": 64,
    },
    "cpu": {"width": 0.25, "seeds": 3, "protocol.epochs": 15},
    "gpu": {"width": 1.0, "seeds": 3, "protocol.epochs": 100},  # estimated, not timed
    "paper": {"datasets": ("cifar10", "cifar100"), "width": 1.0, "seeds": 3, "protocol.epochs": 200},
}
TUNED = {  # issue 28: every method's lr tuned on validation (grids: our choice)
    "lrs": (0.01, 0.03, 0.1),
    "baseline_lrs": (0.003, 0.01, 0.03),
    "tune_epochs": 3,
    "validation": 5000,
}
# Fashion-MNIST through an MLP: no crop or flip (the PEPITA protocol's fully connected runs have none; our choice).
# Pilot (one seed, 6,400 images, 24 epochs): with crop + flip SGR reached 79.5 % at a train accuracy near 71 % and
# still rose 0.7 points over the last 5 epochs; without, layer-wise reached 84.9 % (lr 0.1) and SGR 82.3 % (lr 0.03).
NO_AUGMENTATION = {"protocol.crop_padding": 0, "protocol.flip": False}
# cpu: every optimum inside its grid (rules.tuned_inside_grid). The three-point grids put FA's and SGR's best at their
# lowest rate and DRTP's at its highest (8-epoch tuning runs: FA 65.5 % at 0.003, diverged above; SGR 82.9 % at 0.01,
# at chance at 0.1; DRTP 78.0 % at 0.03), and one rate more on each side left DRTP (79.4 %) and reforward (82.9 %) at
# 0.1, the top, and DRTP (tanh; its update does not shrink with the error) still gained at 0.3 (79.7 %) and 1 (81.2 %):
# so the cpu grids run from 0.003 to 0.3 (SGR's three methods) and from 0.001 to 10 (the baselines), steps of about 3x.
# Then FA's final runs diverged at its tuned 0.003 and fell back to 0.001, the grid's end (`_tuned_runs`): the
# baselines' grid starts at 0.0003, so that the rate FA trains at lies inside it (rules.tuned_inside_grid)
WIDE = {
    "lrs": (0.003, 0.01, 0.03, 0.1, 0.3),
    "baseline_lrs": (0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
}
# Table 4 at the width of PEPITA's fully connected protocol (1,024 units), sized to two CPU cores
PRESETS = {
    **PRESETS,
    "smoke": {
        **PRESETS["smoke"],
        **TUNED,
        "lrs": (0.03, 0.1),
        "baseline_lrs": (0.01,),
        "tune_epochs": 1,
        "validation": 256,
    },
    # 3.7-6.8 s an epoch per method at 1,024 units on 6,400 images (one core): 40 epochs, lr tuned over 8 epochs;
    # 16 epochs with crop + flip left 14 of 18 runs still improving (record cpu-97319d79980f); DFA (not in the
    # paper's Table 4) left out to fit. 5 seeds (3 until stop 70): at 3, SGR - layer-wise lost at 40 epochs
    # (-0.22 +- 0.07) and was within noise at 20 (+0.21 +- 0.18), so the budget rule left the claim undecided;
    # seeds 3 and 4 at both budgets (24 runs, about 40 min of two threads on a Xeon) tell noise from the budget
    "cpu": {
        "width": 1.0,
        "n_train": 6400,
        "seeds": 5,
        "protocol.epochs": 40,
        **NO_AUGMENTATION,
        "baselines": ("fa", "drtp", "pepita"),
        **TUNED,
        **WIDE,
        "tune_epochs": 8,
        "lam": CALIBRATED["lam"],  # the λ pilot's choice (sgr.lam, local_runs.CALIBRATED: ours)
        "reduction": CALIBRATED["reduction"],
    },
    "gpu": {**PRESETS["gpu"], **TUNED, **NO_AUGMENTATION, "n_train": 55000},
    "paper": {**PRESETS["paper"], **TUNED, "n_train": 45000},
}
# Figures 2-4 read Table 4's layer-wise and SGR runs (`figure_runs`); the paper's figures: CIFAR-10 only
FIGURE_PRESETS = {**PRESETS, "paper": {**PRESETS["paper"], "datasets": ("cifar10",)}}
CHOICES = {
    "network": "BP-free PlainNet = 4 fully connected blocks (Linear -> ReLU, 1,024 x width units), each a module "
    "with a fixed ETF head; the paper states neither depth nor width",
    "protocol": "App. E's CIFAR protocol for every method (SGD, momentum 0.9, wd 5e-4, cosine, batch 128, crop "
    "+ flip), except at cpu and gpu: no crop or flip, as the PEPITA protocol's fully connected runs (an MLP is not "
    "translation invariant; with them, a one-seed trial run of ours had not fit its training images after 24 epochs); "
    "cpu: Fashion-MNIST, 1,024 units (the PEPITA protocol's width), 6,400 training images, 40 epochs, 5 seeds",
    "tuning": "every method's lr chosen on 5,000 held-out training images after an 8-epoch run at cpu (seed 0) "
    "from our grids (layer-wise, reforward, SGR 0.003 to 0.3; FA, DRTP, PEPITA 0.0003 to 10, in steps of about "
    "3x); a diverged tuning run scores 0. Figures 2-4 read Table 4's layer-wise and SGR runs at these rates",
    "lambda": "lambda = 1e3 with Algorithm 1's mean reduction, calibrated by our pilot (sgr.lam), at cpu",
    "baselines": "FA, DFA, DRTP, PEPITA run by us on the same hidden blocks plus a trained linear output layer, same "
    "data, schedule and seeds; without an lr grid, learning rates FA 0.01, DFA 0.01, DRTP 0.01 and DRTP with tanh (its "
    "paper's units) chosen from 3-epoch probes on 6,400 training images scored on 2,000 test images, a selection "
    "on test data that can only favour the baselines; with ReLU, DRTP stayed at chance at every rate tried; "
    "PEPITA 0.01, its code's rate (the probe picked 0.1, at which every cpu seed diverged in its first epoch on "
    "the full training set)",
    "rules": "A beats B: mean over seeds higher by more than 2 SE of the difference (the book's rules); "
    "throughout training: at every epoch of the second half",
}
NOTE = "cpu/gpu presets run on Fashion-MNIST (the paper: CIFAR-10 and CIFAR-100)"
SHARES = (
    "the BP-free runs stored once for sgr.tab4, fig2, fig3 and fig4 (run cache: sgr.local, network mlp4; "
    "the baselines: sgr.bpfree)"
)
