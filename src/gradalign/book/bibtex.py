"""The four papers as BibTeX, one entry per part: the introduction lists all four, each part's introduction
its own (`<!-- gradalign: bibtex -->`, `<!-- gradalign: bibtex lga -->`, filled by `gradalign.book.pages`). The
human-readable citations are `gradalign.papers.PAPERS`; the arXiv numbers agree (tests/test_book_pages.py)."""

from __future__ import annotations

BIBTEX = {
    "lga": """@article{jackson2019lga,
  title   = {Semi-Supervised Learning by Label Gradient Alignment},
  author  = {Jackson, Jacob and Schulman, John},
  journal = {arXiv preprint arXiv:1902.02336},
  year    = {2019},
  url     = {https://arxiv.org/abs/1902.02336}
}""",
    "metagrad": """@inproceedings{zhang2021metagradient,
  title     = {Semi-Supervised Learning with Meta-Gradient},
  author    = {Zhang, Xin-Yu and Jia, Hao-Lin and Xiao, Taihong and Cheng, Ming-Ming and Yang, Ming-Hsuan},
  booktitle = {Proceedings of the 24th International Conference on Artificial Intelligence and Statistics (AISTATS)},
  series    = {Proceedings of Machine Learning Research},
  volume    = {130},
  pages     = {73--81},
  year      = {2021},
  note      = {arXiv:2007.03966},
  url       = {https://arxiv.org/abs/2007.03966}
}""",
    "isoloss": """@article{halvagal2022predictor,
  title   = {Predictor networks and stop-grads provide implicit variance regularization in {BYOL/SimSiam}},
  author  = {Halvagal, Manu Srinath and Laborieux, Axel and Zenke, Friedemann},
  journal = {arXiv preprint arXiv:2212.04858},
  year    = {2022},
  url     = {https://arxiv.org/abs/2212.04858}
}""",
    "sgr": """@inproceedings{yang2024sgr,
  title     = {Towards Interpretable Deep Local Learning with Successive Gradient Reconciliation},
  author    = {Yang, Yibo and Li, Xiaojie and Alfarra, Motasem and Hammoud, Hasan and Bibi, Adel and
               Torr, Philip and Ghanem, Bernard},
  booktitle = {Proceedings of the 41st International Conference on Machine Learning (ICML)},
  year      = {2024},
  note      = {arXiv:2406.05222},
  url       = {https://arxiv.org/abs/2406.05222}
}""",
}


def bibtex_markdown(parts: list[str] | tuple[str, ...]) -> str:
    """The BibTeX of `parts`, in one fenced block."""
    return "```bibtex\n" + "\n\n".join(BIBTEX[p] for p in parts) + "\n```"
