"""The introduction's answers (`<!-- gradalign: answers -->`): each paper's answer in one sentence, naming its
elements (Figure 5, Proposition 3.5) linked to their pages, grouped by the verdicts of the stored records, and
what *reduced scale* means for the records the book shows. Generated from the store when the book is built, like
the scoreboard below it (`gradalign.book.pages`): no verdict or number is typed in.
"""

from __future__ import annotations

import re

from gradalign.elements import ELEMENTS, PAPER_ELEMENTS, PARTS
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.validity import evidence_of
from gradalign.book.report import element_verdict, scale_of, shown_record
from gradalign.records.results import ResultStore
from gradalign.book.toc import in_book

ORDER = ("reproduced", "not reproduced", "inconclusive", "not run here")
PAPER_DATA = re.compile(r"CIFAR-100|CIFAR-10|SVHN|STL-10|ImageNet")


def short_name(element_id: str) -> str:
    """The element's name as the paper gives it: its title up to the colon (`Figure 5`, `Propositions 2-3`)."""
    title = ELEMENTS[element_id].title
    return (title.split(":", 1)[0].strip() if ":" in title else title).replace("; ", ", ")


def named_link(element_id: str, base: str) -> str:
    """The element's name linked to its page (plain when its page is not in the book)."""
    exp = EXPERIMENTS.get(element_id)
    name = short_name(element_id)
    return f"[{name}]({base}{exp.notebook})" if exp is not None and in_book(exp.notebook) else name


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _group(status: str, ids: list[str], records: dict, base: str) -> str:
    """One verdict's elements: `reproduced: A, B (analytic) and C`; reduced scale said where it applies."""
    by_kind = {k: [named_link(e, base) for e in ids if evidence_of(e) == k] for k in ("analytic", "empirical")}
    names = [_listed(mine) + (f" ({kind})" if all(by_kind.values()) else "") for kind, mine in by_kind.items() if mine]
    reduced = [e for e in ids if records[e] is not None and scale_of(records[e])]
    where = ""
    if reduced:
        where = " at reduced scale" if len(reduced) == len(ids) else f" ({len(reduced)} of them at reduced scale)"
    return f"{status}{where}: {', and '.join(names)}"


def answers_markdown(preset: str, store: ResultStore, base: str) -> str:
    """Each paper's answer, one sentence per paper, then what reduced scale means here."""
    records = {e: shown_record(e, preset, store) for e in PAPER_ELEMENTS}
    lines = []
    for part, title in PARTS.items():
        ids = [e for e in PAPER_ELEMENTS if ELEMENTS[e].part == part]
        verdicts = {e: element_verdict(e, records[e]) for e in ids}
        groups = [
            _group(s, [e for e in ids if verdicts[e] == s], records, base)
            for s in (*ORDER, *sorted(set(verdicts.values()) - set(ORDER)))
            if any(v == s for v in verdicts.values())
        ]
        intro = f"{base}book/{part}/intro.md"
        name = title.split(" (")[0]
        lines.append(f"- **[{name}]({intro})**: {'; '.join(groups)}.")
    return "\n".join(lines) + "\n\n" + reduced_scale_markdown(records, base)


def reduced_scale_markdown(records: dict[str, dict | None], base: str) -> str:
    """What a verdict *at reduced scale* means, counted from the records shown."""
    empirical = [e for e, r in records.items() if r is not None and evidence_of(e) == "empirical"]
    scales = {e: scale_of(records[e]) for e in empirical}
    reduced = [e for e in empirical if scales[e]]
    if not reduced:
        return ""
    fmnist = [e for e in reduced if scales[e].startswith("Fashion-MNIST")]
    instead = [e for e in fmnist if "(paper:" in scales[e].split(";")[0]]
    papers = sorted({d for e in instead for d in PAPER_DATA.findall(scales[e].split(";")[0])})
    example = max(reduced, key=lambda e: len(scales[e].split(";")))
    text = (
        "**At reduced scale** means a smaller protocol than the paper's: "
        f"{len(reduced)} of the {len(empirical)} empirical elements with a stored record ran at reduced scale, "
        f"{len(fmnist)} of them on Fashion-MNIST"
        + (f" ({len(instead)} in place of the paper's {_listed(papers)})" if instead and papers else "")
        + ", with smaller networks, fewer steps or epochs, fewer training images or fewer seeds than published. "
        f"Each verdict names its scale; for example {named_link(example, base)} of "
        f"{PARTS[ELEMENTS[example].part].split(' (')[0]}: {scales[example]}. A verdict at reduced scale says "
        "whether the claim held at that scale, not at the paper's. Each part's introduction (linked above) answers "
        "*did the claims hold?* element by element, with each verdict's reason and scale."
    )
    return text
