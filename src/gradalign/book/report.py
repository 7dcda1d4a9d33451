"""The reproduction report: one row per element of the four papers, from the registry and the store.

Everything here is MyST Markdown built from records: the summary by verdict, one table per part with
each id linked to its page, the scale of every reduced-scale verdict, whether the code that computed a
record has changed since (stale), and the checks behind each verdict with the paper's numbers beside
ours. The notebook pages use the same formatting (`checks_markdown`, `verdict_rows`).
"""

from __future__ import annotations

from gradalign.book.comparison import paper_vs_ours
from gradalign.config import PRESET_ORDER_FOR_BOOK
from gradalign.elements import ELEMENTS, PAPER_ELEMENTS, PARTS, is_study
from gradalign.experiments import EXPERIMENTS
from gradalign.experiments.claim_scope import OUR_READING, counted, on_substitute, run_sets
from gradalign.experiments.validity import evidence_of
from gradalign.book.measured import breakable, format_value, reason_text
from gradalign.book.record_text import duration, seeds_text, time_text, where_computed
from gradalign.records.results import ResultStore
from gradalign.book.memo import reads_once
from gradalign.records.canary import code_status
from gradalign.records.runner import element_status, stored_record
from gradalign.book.toc import in_book
from gradalign.experiments.verdict import STATUSES

NO_RECORD = "no stored record"
NOT_BUILT = "not yet built"
SUMMARY_ORDER = (*STATUSES, NO_RECORD, NOT_BUILT)


def shown_record(element_id: str, preset: str, store: ResultStore) -> dict | None:
    """The record the book shows: the named preset's, or for `auto` the largest stored preset."""
    if element_id not in EXPERIMENTS:
        return None
    for name in PRESET_ORDER_FOR_BOOK if preset == "auto" else (preset,):
        record = stored_record(element_id, name, store=store)
        if record is not None:
            return record
    return None


def element_verdict(element_id: str, record: dict | None) -> str:
    """The element's line in the summary: its record's verdict, or why there is none."""
    if record is not None:
        return record["verdict"]["status"]
    status = element_status(element_id)
    return {NOT_BUILT: NOT_BUILT, "not run here": "not run here"}.get(status, NO_RECORD)


def scale_of(record: dict) -> str:
    """The record's scale against the paper's (reduced scope only; the experiment declares it), with how many runs
    finished learning by the record's own precondition (one count, the verdict's, wherever a page shows it)."""
    scale = EXPERIMENTS[record["id"]].scale
    if record["scope"] != "reduced" or scale is None:
        return ""
    finished = record.get("preconditions", {}).get("finished_learning", {}).get("value")
    if isinstance(finished, dict) and {"finished", "runs"} <= set(finished):
        return f"{scale(record)}; {finished['finished']} of {finished['runs']} runs finished learning"
    return scale(record)


def stale_text(record: dict, short: bool = False) -> str:
    """current / current by canary / stale (what changed) / unknown, for the code that computed the record
    (`canary.code_status`)."""
    status = code_status(record)
    if status is None:
        return "unknown" if short else "unknown (the record has no code fingerprint)"
    if status["state"] == "current":
        return "current"
    changed = status["changed"]
    # plain text: the theme does not wrap inline code, and a path must break after its "/" in a narrow column
    shown = ", ".join(name.replace("/", "/\u200b") for name in changed[:3]) + (", …" if len(changed) > 3 else "")
    what = f"{len(changed)} definition{'s' if len(changed) != 1 else ''} changed since ({shown})"
    if status["state"] == "current by canary":
        return "current by canary" if short else f"current by canary: {what}; its smoke canary gives the same numbers"
    return "**stale**" if short else f"**stale**: {what}; {status['why']}"


def page_link(element_id: str, base: str) -> str:
    """`id` linked to its page (paths relative to the project root, prefixed by `base`); plain when the element
    has no page in the book (not built, or built but its page not yet listed in `_toc.yml`)."""
    exp = EXPERIMENTS.get(element_id)
    if exp is None or not in_book(exp.notebook):
        return f"`{element_id}`"
    return f"[`{element_id}`]({base}{exp.notebook})"


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def mark(c: dict) -> str:
    """✔ passed, ≈ within noise (not decided), – not measured by the runs (not decided), ✘ failed."""
    if c["passed"]:
        return "✔"
    if c.get("not_recorded"):  # undecided like a difference within noise, but nothing was measured
        return "–"
    return "≈" if c.get("within_noise") else "✘"


def checks_markdown(record: dict, key: str = "checks") -> str:
    """The checks (or targets, or preconditions) of a record as a table, the mark first: claim, rule, measured.
    ✔ passed, ≈ not decided: within noise by Welch's t (or too few seeds), or not budget-stable; – not decided:
    the runs did not measure its quantity; ✘ failed."""
    head = "precondition" if key == "preconditions" else "claim (check)"
    lines = [f"| | {head} | rule | measured |", "| :-: | --- | --- | --- |"]
    for name, c in record.get(key, {}).items():
        claim = f"{cell(c['claim'])} (`{breakable(name)}`)"
        measured = format_value(c["value"]) + (f"; {budget_text(c['budget'])}" if "budget" in c else "")
        lines.append(f"| {mark(c)} | {claim} | {cell(c['rule'])} | {cell(measured)} |")
    return "\n".join(lines)


def budget_text(budget: dict) -> str:
    """A claim's budget check in words (`claim_budget.stabilise`): each comparison's decision at both budgets and
    how far its difference moved, or a level claim's result at half the budget."""
    full, half = budget["budgets"]
    head = f"budget check, {'stable' if budget['stable'] else 'NOT stable'}"
    if "why" in budget:
        return f"{head}: {budget['why']}"
    if "comparisons" not in budget:
        return (
            f"{head}: {'passes' if budget['half_passed'] else 'fails'} at {half} too"
            if budget["stable"]
            else f"{head}: {'passes' if budget['half_passed'] else 'fails'} at {half}"
        )
    parts = [
        f"{name + ': ' if name else ''}{r['full']} at {full}, {r['half']} at {half} (d {r['diff_half']:+g} there; "
        f"change {r['change']:+g} ± {r['se']:g}{', paired' if r['paired'] else ''})"
        for name, r in budget["comparisons"].items()
        if "full" in r
    ]
    return f"{head}: " + "; ".join(parts)


def preconditions_markdown(record: dict) -> str:
    """An empirical record's preconditions (is the test valid?), or "" for an analytic one."""
    if record.get("evidence") != "empirical":
        return ""
    return (
        "*Is this a valid test? The preconditions, measured from the runs (an unmet one makes the verdict "
        "inconclusive):*\n\n" + checks_markdown(record, "preconditions")
    )


def targets_markdown(record: dict) -> str:
    """The project's own targets (speed ratios) of a record, apart from the verdict; empty when none."""
    if not record.get("targets"):
        return ""
    return (
        "*Benchmark results against the project's own targets (not claims of the paper; they do not enter the "
        "verdict):*\n\n" + checks_markdown(record, "targets")
    )


def compute_time(record: dict) -> str:
    """The record's wall time, and the stored runs it read (with their training time when the record has it)."""
    text = duration(record["provenance"]["wall_time_s"])
    shares = EXPERIMENTS[record["id"]].shares
    if shares:
        trained = record["metrics"].get("train_seconds")
        text += f"; it reads {shares}" + (f", whose training took {duration(trained)}" if trained else "")
    return text


def commit_of(record: dict) -> str:
    """The record's commit, short, with `+dirty` when the tree had uncommitted edits."""
    commit = record["provenance"]["git_commit"]
    return commit[:10] + ("+dirty" if commit.endswith("+dirty") else "")


def provenance_line(record: dict) -> str:
    prov = record["provenance"]
    return (
        f"preset {record['preset']} · {where_computed(prov)} · torch {prov['torch']} · {seeds_text(record)} · "
        f"{time_text(record)} · {prov['date'][:10]} · commit {commit_of(record)}"
    )


def with_scale(status: str, scale: str, why: str = "") -> str:
    """`**status** (why): scale`; the reason for an inconclusive or failed verdict, and the scale when reduced."""
    return f"**{status}**" + (f" ({cell(why)})" if why else "") + (f": {cell(scale)}" if scale else "")


def verdict_text(record: dict) -> str:
    """The record's verdict with its reason, its parts and its scale, and what it can speak for
    (`experiments.claim_scope`): a substitute data set, or claims that are our reading."""
    why = reason_text(record)
    checks = record["checks"]
    if record["verdict"]["status"] == "not reproduced" and len(checks) > 1:  # an AND-verdict shows its parts
        why += f"; {sum(c['passed'] for c in checks.values())} of {len(checks)} claims passed"
    substitute = on_substitute(record)
    if substitute:
        why += f"; tested on a substitute (Fashion-MNIST for {substitute}): not counted as evidence on {substitute}"
    if record["id"] in OUR_READING:
        why += f"; our reading, not counted: {OUR_READING[record['id']]}"
    return with_scale(record["verdict"]["status"], scale_of(record), why.lstrip("; "))


def verdict_rows(records: list[dict], base: str = "") -> str:
    """One row per record: id, verdict with its reason and scale, checks passed, the code's state and provenance."""
    lines = [
        "| element | verdict | claims passed | preconditions met | code | computed with |",
        "| --- | --- | :-: | :-: | --- | --- |",
    ]
    for r in records:
        passed = sum(c["passed"] for c in r["checks"].values())
        pre = r.get("preconditions", {})
        met = f"{sum(c['passed'] for c in pre.values())}/{len(pre)}" if r.get("evidence") == "empirical" else "—"
        lines.append(
            f"| {page_link(r['id'], base) if base else '`' + r['id'] + '`'} | {verdict_text(r)} | "
            f"{passed}/{len(r['checks'])} | {met} | {stale_text(r)} | {cell(provenance_line(r))} |"
        )
    return "\n".join(lines)


def summary_counts(verdicts: dict[str, str]) -> str:
    """`N reproduced · M inconclusive · …` over the given elements."""
    counts = {s: sum(v == s for v in verdicts.values()) for s in SUMMARY_ORDER}
    return " · ".join(f"**{n}** {s}" for s, n in counts.items() if n)


def split_counts(verdicts: dict[str, str], records: dict[str, dict | None] | None = None) -> dict[str, str]:
    """`summary_counts` over the analytic and over the empirical elements, apart. With the `records`, the elements
    tested on a substitute and those whose claims are our reading are counted apart (`claim_scope.counted`), and
    the empirical elements' independent run sets are counted too (`claim_scope.run_sets`)."""
    records = records or {}
    out = {}
    for evidence in ("analytic", "empirical"):
        part = {e: v for e, v in verdicts.items() if evidence_of(e) == evidence and not is_study(e)}
        kept = {e: v for e, v in part.items() if counted(records.get(e), e)}
        text = summary_counts(kept) or "none"
        apart = [e for e in part if e not in kept]
        substitutes = [e for e in apart if e not in OUR_READING]
        if substitutes:
            text += f" · **{len(substitutes)}** tested on a substitute ({', '.join(substitutes)})"
        if len(apart) > len(substitutes):
            text += f" · **{len(apart) - len(substitutes)}** our reading, not counted"
        text += f" (of {len(part)})"
        with_runs = {e: records[e] for e in part if records.get(e) is not None}
        if evidence == "empirical" and with_runs:
            n = len(run_sets(with_runs))
            text += f"; **{n}** independent run set{'' if n == 1 else 's'} among them"
        out[evidence] = text
    return out


@reads_once
def report_markdown(preset: str = "auto", store: ResultStore | None = None, base: str = "../") -> str:
    store = store or ResultStore()
    records = {eid: shown_record(eid, preset, store) for eid in ELEMENTS}
    verdicts = {eid: element_verdict(eid, records[eid]) for eid in ELEMENTS}
    out = [
        "# Reproduction report",
        "",
        "Generated from the experiment registry and the results store when the book was built. Each row shows "
        "the record the book uses: the largest stored preset (`paper` > `gpu` > `cpu`), or the preset the book "
        f"was built with (this build: `{preset}`). A verdict comes from the numeric checks stored in the record, "
        "never typed in. *Analytic* elements (derivations, definitions, closed forms) are reproduced or not. "
        "*Empirical* elements (trained models, simulated dynamics) are decided only by a valid test: the runs "
        "finished learning, the baseline fits its labels, the method's own term acted, enough seeds; otherwise "
        "they are *inconclusive*, and so is a difference within noise (Welch's t at 5 %) or a decision that changes "
        "at half the budget. The tables give each element's verdict (and whether it stands at reduced scale); "
        "its reason, its scale and its checks are in its details, below the tables. *Code* says whether the "
        "library code that computed the record has "
        "changed since.",
        "",
        f"**Analytic:** {split_counts(verdicts, records)['analytic']}. "
        f"**Empirical:** {split_counts(verdicts, records)['empirical']}. "
        f"Of {len(PAPER_ELEMENTS)} elements of the papers"
        + (
            f"; our own studies ({', '.join(f'`{e}`' for e in ELEMENTS if is_study(e))}) are listed, not counted."
            if len(PAPER_ELEMENTS) < len(ELEMENTS)
            else "."
        ),
        "",
    ]
    details = []
    for part, title in PARTS.items():
        ids = [e.id for e in ELEMENTS.values() if e.part == part]
        counts = split_counts({i: verdicts[i] for i in ids}, records)
        out += [
            f"## {title}",
            "",
            f"Analytic: {counts['analytic']}. Empirical: {counts['empirical']}.",
            "",
            "| id | element | verdict | preset | code | paper vs ours, or checks |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for eid in ids:
            record = records[eid]
            if record is None:
                hint = f" (`gradalign run {eid}`)" if verdicts[eid] == NO_RECORD else ""
                out.append(
                    f"| {page_link(eid, base)} | {cell(ELEMENTS[eid].title)} | {verdicts[eid]}{hint} | — | — | — |"
                )
                continue
            compared = paper_vs_ours(record)
            scale = scale_of(record)
            passed = sum(c["passed"] for c in record["checks"].values())
            summary = f"{passed}/{len(record['checks'])} claims pass" + (
                f"; {len(compared)} paper-vs-ours numbers below" if compared else ""
            )
            verdict = verdict_short(record)
            out.append(
                f"| {page_link(eid, base)} | {cell(ELEMENTS[eid].title)} | {verdict} | `{record['preset']}` | "
                f"{stale_text(record, short=True)} | {summary} |"
            )
            details += _details(record, scale, compared)
        out.append("")
    intro = (
        "Each element's verdict with its reason and scale, its preconditions and claims, its record and the "
        "paper's numbers beside ours; click an element to open it."
    )
    return "\n".join(out + ["## Check details", "", intro, ""] + details) + "\n"


def verdict_short(record: dict) -> str:
    """The summary table's verdict: the status, and whether it stands at reduced scale, on a substitute data set
    or for our reading of a figure; the reason and the scale are in the element's details (`_details`)."""
    substitute = on_substitute(record)
    notes = [
        "at reduced scale" if scale_of(record) else "",
        f"on a substitute for {substitute}" if substitute else "",
        "our reading" if record["id"] in OUR_READING else "",
    ]
    notes = [n for n in notes if n]
    return f"**{record['verdict']['status']}**" + (f" ({'; '.join(notes)})" if notes else "")


def _details(record: dict, scale: str, compared: list[dict]) -> list[str]:
    """One element's details, folded (a sphinx-design dropdown: the report's summary tables stay one screen)."""
    eid = record["id"]
    title = f"`{eid}` · {record['verdict']['status']} · {ELEMENTS[eid].title}"
    out = [f"::::{{dropdown}} {title}", "", verdict_text(record) + ".", ""]
    if EXPERIMENTS[eid].note:
        out += [f"*Scope:* {EXPERIMENTS[eid].note}.", ""]
    if record.get("evidence") == "empirical":
        out += [preconditions_markdown(record), ""]
    out += [checks_markdown(record), ""]
    if record.get("targets"):
        out += [targets_markdown(record), ""]
    out += [
        f"Record: {provenance_line(record)}; config hash `{record['config_hash']}`. Wall time: {compute_time(record)}. "
        f"Code: {stale_text(record)}.",
        "",
    ]
    if compared:
        out += ["*Paper vs ours:*", "", "| quantity | paper | ours |", "| --- | --- | --- |"]
        out += [f"| {cell(r['quantity'])} | {cell(r['paper'])} | {cell(r['ours'])} |" for r in compared] + [""]
    return out + ["::::", ""]
