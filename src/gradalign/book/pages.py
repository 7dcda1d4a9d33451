"""The generated parts of the book: the scoreboard of the introduction, each part's list of elements, and
the two generated pages **How to run** and **Compute**.

Hand-written pages hold a marker where generated text goes (`<!-- gradalign: scoreboard -->`,
`<!-- gradalign: elements lga -->`); `fill_markers` replaces it when the book is built, so a verdict on
any page is always the one the stored record derives.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from gradalign.book.bibtex import bibtex_markdown
from gradalign.config import PRESETS
from gradalign.data.image_sets import IMAGE_SETS
from gradalign.elements import ELEMENTS, PAPER_ELEMENTS, PARTS
from gradalign.environment import project_root
from gradalign.book.landing import answers_markdown
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.units import UNITS
from gradalign.experiments.validity import evidence_of
from gradalign.papers import PAPERS
from gradalign.experiments.claim_scope import OUR_READING, counted
from gradalign.book.report import (
    NOT_BUILT,
    SUMMARY_ORDER,
    cell,
    commit_of,
    element_verdict,
    page_link,
    shown_record,
    stale_text,
    split_counts,
    verdict_text,
    with_scale,
)
from gradalign.book.record_text import hardware_text, seeds_text, time_text, where_computed
from gradalign.records.results import ResultStore
from gradalign.book.memo import reads_once


def part_page(part: str) -> str | None:
    """The part's introduction, when the book lists it (`_toc.yml`)."""
    from gradalign.book.toc import in_book

    page = f"book/{part}/intro.md"
    return page if in_book(page) else None


MARKER = re.compile(r"<!-- gradalign: (\w+)(?: (\w+))? -->")


def _verdicts(preset: str, store: ResultStore) -> tuple[dict, dict]:
    records = {eid: shown_record(eid, preset, store) for eid in ELEMENTS}
    return records, {eid: element_verdict(eid, records[eid]) for eid in ELEMENTS}


def _apart(element_id: str, record: dict | None) -> str:
    """ " (tested on a substitute)" or " (our reading)" for an element the tallies count apart, else ""."""
    if element_id in OUR_READING:
        return " (our reading)"
    return "" if counted(record, element_id) else " (tested on a substitute)"


def scoreboard_markdown(preset: str, store: ResultStore, base: str) -> str:
    """Which parts are built, the four papers cited, and every element grouped by verdict, linked to its page."""
    records, verdicts = _verdicts(preset, store)
    lines = [
        "| part | elements with a page | analytic elements | empirical elements |",
        "| --- | --- | --- | --- |",
    ]
    for part, title in PARTS.items():
        ids = [e for e in PAPER_ELEMENTS if e.startswith(part + ".")]
        built = sum(verdicts[e] != NOT_BUILT for e in ids)
        paged = sum(page_link(e, base).startswith("[") for e in ids)  # linked: its page is in the book
        intro = part_page(part)
        name = f"[{title.split(' (')[0]}]({base}{intro})" if intro else title.split(" (")[0]
        state = f"{paged} of {len(ids)}" + ("" if built else " (not built yet)")
        counts = split_counts({e: verdicts[e] for e in ids}, records)
        lines.append(f"| {name} | {state} | {counts['analytic']} | {counts['empirical']} |")
    counts = split_counts(verdicts, records)
    studies = [e for e in ELEMENTS if e not in PAPER_ELEMENTS]
    lines += [
        "",
        f"**Analytic** (derivations, definitions, closed forms checked numerically): {counts['analytic']}. "
        f"**Empirical** (trained models and simulated dynamics, decided only by a valid test; otherwise "
        f"inconclusive): {counts['empirical']}."
        + (
            f" Our own studies ({', '.join(f'`{e}`' for e in studies)}) have pages beside the elements they serve; "
            "they are not elements of the papers and are not counted."
            if studies
            else ""
        ),
        "",
    ]
    for status in SUMMARY_ORDER:
        ids = [e for e in PAPER_ELEMENTS if verdicts[e] == status]
        if not ids:
            continue
        if status == NOT_BUILT:
            parts = sorted({PARTS[ELEMENTS[e].part].split(" (")[0] for e in ids})
            lines.append(f"- **{status}** ({len(ids)}): the elements of {' and '.join(parts)}.")
            continue
        for evidence in ("analytic", "empirical"):
            group = [e for e in ids if evidence_of(e) == evidence]
            if group:
                links = ", ".join(page_link(e, base) + _apart(e, records[e]) for e in group)
                lines.append(f"- **{status}**, {evidence} ({len(group)}): {links}")
    stale = [e for e, r in records.items() if r is not None and not stale_text(r, short=True).startswith("current")]
    if stale:
        lines += [
            "",
            f"{len(stale)} of the {sum(r is not None for r in records.values())} records shown were computed by "
            "library code that has changed since, or carry no fingerprint of it "
            f"(see [Compute]({base}book/compute.md)).",
        ]
    return "\n".join(lines)


def part_elements_markdown(part: str, preset: str, store: ResultStore, base: str) -> str:
    """A part's elements, each with its verdict (and scale) and a link to its page."""
    records, verdicts = _verdicts(preset, store)
    lines = ["| element | verdict |", "| --- | --- |"]
    for eid, element in ELEMENTS.items():
        if element.part != part:
            continue
        verdict = verdict_text(records[eid]) if records[eid] else with_scale(verdicts[eid], "")
        lines.append(f"| {page_link(eid, base)}: {cell(element.title)} | {verdict} |")
    return "\n".join(lines)


def references_markdown() -> str:
    """The four papers, cited in full with links."""
    return "\n".join(f"- {PAPERS[part]['cite']}. <{PAPERS[part]['url']}>" for part in PARTS)


@reads_once
def fill_markers(text: str, preset: str, store: ResultStore, base: str) -> str:
    """Replace every `<!-- gradalign: ... -->` marker of a hand-written page with its generated Markdown."""

    def fill(match: re.Match) -> str:
        kind, arg = match.groups()
        if kind == "scoreboard":
            return scoreboard_markdown(preset, store, base)
        if kind == "references":
            return references_markdown()
        if kind == "answers":
            return answers_markdown(preset, store, base)
        if kind == "bibtex" and (arg is None or arg in PARTS):
            return bibtex_markdown([arg] if arg else list(PARTS))
        if kind == "elements" and arg in PARTS:
            return part_elements_markdown(arg, preset, store, base)
        raise ValueError(f"unknown book marker {match.group(0)!r}")

    return MARKER.sub(fill, text)


@reads_once
def compute_markdown(preset: str = "auto", store: ResultStore | None = None) -> str:
    """Every shown record's hardware, preset, seeds, wall time, commit and code state; the pinned environment."""
    store = store or ResultStore()
    records, _ = _verdicts(preset, store)
    lines = [
        "# Compute",
        "",
        "Where every number of the book was computed. One row per record the book shows (this build: preset "
        f"`{preset}`). *Code* says whether the library code the experiment runs could have changed its numbers "
        "since the record was computed (`gradalign stale`): *current* when its files are byte for byte the same, "
        "or hold the same definitions (a comment, a docstring or a moved function does not count); *current by "
        "canary* when definitions changed but the experiment rerun at the `smoke` preset on this build's code "
        "gives the same numbers as it did with the record's (a canary cannot see a path only a larger preset "
        "takes, so the changed definitions are named); **stale** otherwise (the record's numbers are what the "
        "older code produced; `gradalign run <id> --force` recomputes it).",
        "",
        "| element | preset, seeds | wall time | computed on | code |",
        "| --- | --- | --- | --- | --- |",
    ]
    for eid, r in records.items():
        if r is None:
            continue
        prov = r["provenance"]
        lines.append(
            f"| {page_link(eid, '../')} | `{r['preset']}`, {seeds_text(r)} | "
            f"{time_text(r, assembled=True)} | {cell(where_computed(prov))}; torch {prov['torch']}; "
            f"{prov['date'][:10]}, commit `{commit_of(r)}` | {stale_text(r)} |"
        )
    from gradalign.compute.window_report import backlog_markdown, windows_markdown

    lines += ["", windows_markdown(store.root), backlog_markdown(store.root)]
    lines += ["## The environment of this build", ""]
    lines += [f"Python {platform.python_version()} on {platform.platform()}.", ""]
    requirements = project_root() / "requirements.txt"
    if requirements.exists():
        pins = [ln.strip() for ln in requirements.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        lines += ["The pinned packages (`requirements.txt`):", "", "```text", *pins, "```"]
    return "\n".join(lines) + "\n"


def performance_markdown(results_root: Path | None = None) -> str:
    """The stored benchmark records (`gradalign bench`): first the project's goals against what was measured, then
    each benchmark with every ratio it reports, on CPU and GPU, and the hardware it was measured on."""
    from gradalign.compute.bench import BenchStore
    from gradalign.benchmarks.registry import BENCHMARKS, NOT_BUILT

    store = BenchStore(results_root)
    records = {(name, kind): store.load(name, kind) for name in BENCHMARKS for kind in ("cpu", "cuda")}
    for name in BENCHMARKS:  # no full-size GPU record: a window's, quick sizes and labelled so
        window = store.window_records(name)
        if records[(name, "cuda")] is None and window:
            records[(name, "cuda")] = window[0]

    def measured(name: str, kind: str, ratio: str) -> str:
        record = records[(name, kind)]
        if record is None:
            return "not measured"
        value = record["measurement"].get(ratio)
        if not isinstance(value, (int, float)):
            return "—"
        goal = next((g for g in record["goals"] if g["ratio"] == ratio), None)
        quick = " at quick sizes" if record["provenance"].get("quick") else ""
        met = "" if goal is None else f"{'met' if goal['met'] else '**not met**'}{quick}"
        return f"{value:.3g}" + (f" ({met})" if met else f" ({quick.strip()})" if quick else "")

    lines = [
        "# Performance",
        "",
        "How fast and how lean the library's methods are, measured by `gradalign bench <name>` and stored like the "
        "records (`results/bench/`). Each benchmark times its calls interleaved in one run and reports ratios, so "
        "that the load of the machine hits both sides alike. The goals are this project's own targets, not claims "
        "of the papers: they never enter a verdict.",
        "",
        "## The goals",
        "",
        "| benchmark | ratio | goal | CPU | GPU |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, bench in BENCHMARKS.items():
        for ratio in dict.fromkeys(g.ratio for g in bench.goals):
            goals = "; ".join(g.text() for g in bench.goals if g.ratio == ratio)
            lines.append(
                f"| `{name}` | {cell(bench.ratios[ratio])} | {goals} | {measured(name, 'cpu', ratio)} | "
                f"{measured(name, 'cuda', ratio)} |"
            )
    for name, item in NOT_BUILT.items():
        lines.append(f"| `{name}` | {cell(item['ratio'])} | {item['goal']} | not built | not built |")
    if not any(records[(name, "cuda")] for name in BENCHMARKS):
        lines += ["", "No benchmark has run on a GPU yet: `gradalign bench <name> --device cuda` stores its record."]
    elif any(r is not None and r["provenance"].get("quick") for (_, kind), r in records.items() if kind == "cuda"):
        lines += [
            "",
            "A GPU value *at quick sizes* comes from a GPU window's clean benchmark slot (`gradalign gpu-window`: the "
            "benchmarks at their quick sizes, alone on the GPU before any training): it tests the code path and times "
            "launch-bound steps, and is replaced by a full-size run of `gradalign bench <name> --device cuda`.",
        ]
    for name, bench in BENCHMARKS.items():
        page = f" Its page: {page_link(bench.used_by, '../')}." if bench.used_by else ""
        lines += ["", f"## `{name}`", "", f"{bench.title[0].upper()}{bench.title[1:]}. {bench.notes}.{page}", ""]
        lines += ["| ratio | CPU | GPU |", "| --- | --- | --- |"]
        lines += [
            f"| {cell(what)} | {measured(name, 'cpu', r)} | {measured(name, 'cuda', r)} |"
            for r, what in bench.ratios.items()
        ]
        for kind in ("cpu", "cuda"):
            record = records[(name, kind)]
            if record is not None:
                prov = record["provenance"]
                quick = ", quick sizes (a GPU window's benchmark slot)" if prov.get("quick") else ""
                lines += [
                    "",
                    f"{'CPU' if kind == 'cpu' else 'GPU'}: {hardware_text(prov['hardware'])}, torch {prov['torch']}, "
                    f"{prov['date'][:10]}, commit `{commit_of(record)}`, {prov['wall_time_s']:.0f} s{quick}.",
                ]
    for name, item in NOT_BUILT.items():
        lines += ["", f"## `{name}`", "", f"{item['ratio']}; goal {item['goal']}: {item['why']}."]
    return "\n".join(lines) + "\n"


def how_to_run_markdown() -> str:
    """Presets, the command line, the GPU workflow, data sets and interactive use, from the registry."""
    from gradalign.data.fashion_mnist import data_root

    lines = [
        "# How to run",
        "",
        "Set-up on a fresh machine (Debian or Ubuntu, Python 3.11): `make book` builds this book and `make test` "
        "runs the tests; each creates `.venv` with the pinned packages, installs `gradalign`, and prepares "
        "Fashion-MNIST. Everything below uses `.venv/bin/gradalign`.",
        "",
        "## Presets",
        "",
        "| preset | sized for |",
        "| --- | --- |",
        "| `smoke` | seconds on two CPU cores: the same code path at tiny sizes (CI) |",
        "| `cpu` | two CPU cores: exact analytic reproductions in minutes, reduced real-data runs up to an hour |",
        "| `gpu` | one H100, up to about 30 minutes per experiment: the papers' architectures, fewer steps or seeds |",
        "| `paper` | the published protocol: data set, architecture, iterations and seeds |",
        "",
        f"Every experiment defines all {len(PRESETS)}. The book shows the largest stored one "
        "(`paper` > `gpu` > `cpu`).",
        "",
        "## The command line",
        "",
        "```bash",
        "# every element of the four papers and its status",
        "gradalign list",
        "# load the stored record, or compute and store it",
        "gradalign run lga.fig1 --preset cpu",
        "# every setting, by the dotted name that --set takes",
        "gradalign run lga.fig5 --preset cpu --show-config",
        "gradalign run lga.fig5 --set protocol.steps=2000 --set seeds=3",
        "# recompute the record and the runs it reads",
        "gradalign run lga.fig1 --force",
        "# the reproduction report as Markdown; the book (executes the notebooks that changed)",
        "gradalign report",
        "gradalign book",
        "# measure a benchmark and store its record (the Performance page shows it); no name lists them",
        "gradalign bench lga_step",
        "# the book's supervised reference: supervised runs until they finish learning, committed under results/runs",
        "python -m gradalign.experiments.reference --preset cpu",
        "# an experiment's training runs as separate jobs (submitit: here, or on Slurm); then assemble the record",
        "gradalign sweep lga.fig5 --preset cpu --executor local",
        "gradalign sweep lga.fig5 --preset gpu --executor slurm --partition gpu --gpus-per-node 1",
        "gradalign run lga.fig5 --preset gpu",
        "# on a GPU, in commands of at most 8 minutes: repeat while the exit status is 3",
        "gradalign run lga.fig7 --preset gpu --device cuda --time-limit 8",
        "```",
        "",
        "Bad input (a wrong type, NaN, a value out of range, a device that is not there) stops with one line "
        "and exit status 2 before anything is computed. Records go to `results/` (or `$GRADALIGN_RESULTS`); "
        "training runs shared by several records to the run cache (`$GRADALIGN_CACHE`, default "
        "`~/.cache/gradalign`).",
        "",
        "## On a GPU",
        "",
        "`gradalign run` needs only torch and torchvision (no Jupyter): on a GPU machine, copy the checkout, run "
        "`gradalign run <id> --preset gpu --device cuda`, and bring back the new file under `results/`. Long runs "
        "checkpoint and resume, so a run can be split into short commands: `--time-limit 8` stops cleanly after "
        "about 8 minutes (exit status 3), the finished runs in the run cache and the current one checkpointed, "
        "and the same command resumes (keep `$GRADALIGN_CACHE` between commands). The runs of the LGA benchmark "
        "and of IsoLoss Table 1 stop inside the box; the other parts' runs resume from their last checkpoint when a "
        "command is cut off. On a GPU the runs take the fast path: bf16 autocast and channels-last, data and "
        "augmentation on the device (the `gpu` preset sets `fast.bf16` and `fast.channels_last`; "
        "`--set fast.bf16=false` gives the fp32 reference, `--set fast.compile=true` adds torch.compile); a run's "
        "fast path is part of its "
        "run-cache key. A GPU window of a few minutes: `gradalign gpu-window --minutes 9 --out DIR` there, then "
        "`gradalign import DIR` here. The next `make book` shows the `gpu` "
        "record in place of the `cpu` one, with the GPU named beside each figure. Experiments that use the "
        "accelerator when one is present:",
        "",
        ", ".join(f"`{e}`" for e, exp in EXPERIMENTS.items() if exp.uses_accelerator) + ".",
        "",
        "## Beyond one machine",
        "",
        "`gradalign sweep <id>` submits each training run (unit) of an experiment that the run cache lacks as a "
        "job of its own through submitit: subprocesses here (`--executor local`), a Slurm job array on a cluster "
        "(`--executor slurm`, with `--partition`, `--gpus-per-node`, `--timeout-min`; the run cache and the job "
        "folder must be on a shared file system). A rerun submits only what is still missing; `gradalign run "
        "<id>` then assembles the record from the cache. Experiments with units: "
        + ", ".join(f"`{e}`" for e in UNITS)
        + ". One large run on several GPUs: the ImageNet presets (`sgr.tab2`, `sgr.tab5`, `metagrad.tab3`) stream "
        "the images from `$GRADALIGN_DATA/imagenet` (ImageFolder layout) and train data-parallel under torchrun, "
        "e.g. `torchrun --nproc-per-node 8 -m gradalign run sgr.tab5 --preset paper`; every rank computes, rank 0 "
        "stores the record, and each row or column resumes from rank 0's checkpoint. Tested here on the CPU with "
        "two processes on a tiny ImageNet in the real layout; never run on ImageNet itself.",
        "",
        "## Data sets",
        "",
        f"Data root: `$GRADALIGN_DATA`, else `./data` (this build: `{data_root()}`). Nothing is downloaded while "
        "the book builds. Fashion-MNIST comes from the Debian package `dataset-fashion-mnist` "
        "(`gradalign data` prepares it); the others load through torchvision from the files you place there.",
        "",
        "| data set | classes | images | where to get it |",
        "| --- | --- | --- | --- |",
    ]
    for info in IMAGE_SETS.values():
        size = f"{info.channels}×{info.image_size}×{info.image_size}"
        lines.append(f"| {info.title} | {info.num_classes} | {size} | <https://{info.homepage}> |")
    lines += [
        "",
        "## Interactive use",
        "",
        "Open the notebooks in JupyterLab with `make lab` (set-up included). Each has a `parameters` cell with "
        '`preset = "auto"`; set it to `smoke` for a run in seconds, or export `GRADALIGN_PRESET=smoke`. The '
        "sliders (ipywidgets) work in a live session only; the built pages show the stored results. The "
        "download button at the top of each page gives the executed notebook.",
    ]
    return "\n".join(lines) + "\n"


def page_base(page: Path, root: Path) -> str:
    """The relative prefix from a page to the project root (`../` for `book/intro.md`)."""
    return "../" * (len(page.relative_to(root).parts) - 1)
