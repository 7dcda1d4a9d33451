"""Every element of the four papers (the element table below), and whether the book has built it yet.

An element is built when an experiment is registered for it in `gradalign.experiments`; `partial`
means registered but not yet in every form the element names (`runner.element_status`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gradalign.errors import ConfigError

PARTS = {
    "lga": "Label Gradient Alignment (Jackson & Schulman 2019)",
    "metagrad": "Semi-Supervised Learning with Meta-Gradient (Zhang et al. 2020)",
    "isoloss": "Implicit variance regularization in BYOL/SimSiam (Halvagal et al. 2022)",
    "sgr": "Successive Gradient Reconciliation (Yang et al. 2024)",
}


@dataclass(frozen=True)
class Element:
    id: str
    title: str
    kind: str
    scope: str  # what can be done here

    @property
    def part(self) -> str:
        return self.id.split(".", 1)[0]


_TABLE = """
lga.alg1 | Algorithm 1: LGA for classification (softmax) and regression (identity) | method | exact
lga.prop1 | Proposition 1: cₖ,ᵢ depends only on λˡᵢ and λᵘᵢ | derivation + numeric check | exact
lga.fig1 | Figure 1: cₖ,ᵢ over training for a grid of λˡᵢ, λᵘᵢ | figure | exact
lga.prop2-3 | Propositions 2-3: fixed points equal the supervised optimum | derivation + numeric check | exact
lga.fig2 | Figure 2: the synthetic shells data set | figure | exact
lga.fig3 | Figure 3: alignment of updates with the principal Hessian eigenvector | figure | exact on GPU, fewer trials on CPU
lga.fig4 | Figure 4: test accuracy and loss on the synthetic data | figure | exact on GPU, fewer trials on CPU
lga.fig5 | Figure 5: CIFAR-10 error and test loss vs number of labels | figure | reduced (Fashion-MNIST); paper preset on CIFAR-10
lga.fig6 | Figure 6: SVHN error and test loss vs number of labels | figure | reduced; paper preset on SVHN
lga.fig7 | Figure 7: Fashion-MNIST error and test loss vs number of labels | figure | real data, reduced iterations/seeds
lga.tab1 | Table 1: error rates, CIFAR-10 4000 labels and SVHN 1000 labels | table | reduced; paper preset
lga.tune | LGA, supervised training and VAT tuned on validation with one budget of candidates (our study, not in the paper) | study | reduced (Fashion-MNIST, one seed per candidate)
metagrad.alg1 | Algorithm 1: exact meta-gradient through one SGD step | method | exact
metagrad.eq7-11 | First-order approximation (Eq. 7-11), finite differences and JVP | derivation + numeric check | exact
metagrad.alg2 | Algorithm 2: first-order meta-gradient + cross-domain mixup | method | exact
metagrad.thm1 | Theorem 1 and Lemma 1: each step decreases the labeled loss | derivation + numeric check | exact
metagrad.thm2 | Theorem 2: O(1/eps^2) rate | numeric illustration | exact on a small model
metagrad.tab1 | Table 1: Conv-Large on SVHN 1k / CIFAR-10 4k / CIFAR-100 10k labels | table | reduced (Fashion-MNIST); paper preset
metagrad.tab2 | Table 2: ResNet-26 shake-shake, CIFAR-10 and CIFAR-100 | table | paper preset only
metagrad.tab3 | Table 3 + Figure 1: ImageNet 10% labels, ResNet-18 | table, figure | paper preset only (not run here)
metagrad.tab4 | Table 4: ablation of meta-learning and mixup | table | reduced
metagrad.fig2 | Figure 2: error vs number of labels | figure | reduced
metagrad.fig3 | Figure 3: t-SNE of labeled / unlabeled / test features | figure | reduced
metagrad.tab6 | Table 6: the Conv-Large architecture | model | exact
isoloss.eq1-2 | DirectPred predictor; loss decoupled per eigenmode | derivation + numeric check | exact
isoloss.eq5-8 | Eigenmode dynamics for L, L_noSG, L_ws, L_iso | derivation + numeric check | exact
isoloss.a1 | Appendix A.1: NTK of a linear net with Gaussian inputs is the identity | derivation + numeric check | exact
isoloss.fig2 | Figure 2: update fields and eigenvalue evolution, linear network | figure | exact
isoloss.fig3 | Figure 3: the same with a ReLU network | figure | exact
isoloss.tab1 | Table 1: linear readout accuracy, L vs L_iso, with and without EMA target | table | reduced (Fashion-MNIST); paper preset
sgr.thm33 | Theorem 3.3: two-layer non-greedy local learning bound | numeric illustration | exact
sgr.eq5-6 | SGR objective (Eq. 5-6) | method | exact
sgr.prop34 | Proposition 3.4: zero SGR terms give global-BP updates | numeric check | exact
sgr.prop35 | Proposition 3.5: one SGR step lowers L2 more (linear, ETF heads) | numeric check | exact
sgr.tab1 | Table 1: attributes of BP-free methods | table | static
sgr.eq7 | Fixed ETF classifier heads | method | exact
sgr.lam | λ calibration pilot for Eq. 5-6 (our study, not in the paper) | study | reduced (Fashion-MNIST, one seed)
sgr.lam7 | λ calibration pilot for Table 7's VGGs (our study, not in the paper) | study | reduced (Fashion-MNIST, one seed)
sgr.lamfull | λ at the full budget: SGR at four readings of λ against layer-wise, the reading chosen on validation (our study, not in the paper) | study | reduced (Fashion-MNIST)
sgr.tab7nobn | Table 7 without BatchNorm: global BP's rate sweep and SGR at the deepest VGG (our study, not in the paper) | study | reduced (Fashion-MNIST, one seed)
sgr.tab3 | Table 3: local-BP, ResNet-32 and PlainNet | table | reduced (Fashion-MNIST); paper preset on CIFAR-10
sgr.tab4 | Table 4: BP-free PlainNet, FA / DRTP / PEPITA / layer-wise / reforward / SGR | table | reduced; paper preset
sgr.tab4conv | Table 4 on a conv PlainNet: the BP-free table with conv blocks (our reading, not in the paper) | study | reduced (Fashion-MNIST)
sgr.fig2 | Figure 2: SGR loss of neighbouring layers and test accuracy | figure | reduced
sgr.fig3 | Figure 3: change of each layer's loss caused by earlier layers | figure | reduced
sgr.fig4 | Figure 4: train loss, train accuracy, test loss curves | figure | reduced
sgr.tab6 | Table 6: ResNet-32 with K = 16 / 3 / 2 modules vs global BP | table | reduced; paper preset
sgr.tab7 | Table 7: VGG depth 12-57, global BP vs SGR | table | reduced
sgr.mem | Memory saving vs global BP | measurement | exact (saved-activation bytes)
sgr.poolhead | SGR with a pooled local head: the accuracy its smaller memory peak costs (our study, not in the paper) | study | reduced (Fashion-MNIST)
sgr.tab8 | Table 8 / Eq. 35: cost of the SGR gradient for one ReLU block | derivation + numeric check | exact
sgr.tab2 | Table 2: ImageNet ResNet-18, lambda sweep | table | paper preset only (not run here)
sgr.tab5 | Table 5: ImageNet ResNet-50/101, ViT-S, Swin-T/S | table | paper preset only (not run here)
"""

ELEMENTS: dict[str, Element] = {}
for _line in _TABLE.strip().splitlines():
    _id, _title, _kind, _scope = (cell.strip() for cell in _line.split("|"))
    ELEMENTS[_id] = Element(_id, _title, _kind, _scope)


def is_study(element_id: str) -> bool:
    """An element of our own (kind `study`, e.g. `sgr.lam`): on its page and in the report, but not one of the
    papers' elements, so the scoreboards do not count it."""
    return ELEMENTS[element_id].kind == "study"


PAPER_ELEMENTS = [e for e in ELEMENTS if not is_study(e)]
"""The papers' elements (46), in the table's order."""


def element(element_id: str) -> Element:
    if element_id not in ELEMENTS:
        raise ConfigError(f"unknown element id {element_id!r}; choose one of: {', '.join(ELEMENTS)}")
    return ELEMENTS[element_id]
