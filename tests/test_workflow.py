"""The GitHub Actions workflow that publishes the book, checked statically (actionlint is not available offline).

The checks follow GitHub's workflow syntax and jupyter-book's publishing recipe: it runs on a push to main,
builds with the Makefile's own target, uploads the folder that target writes, and deploys with the Pages
permissions. `test_a_broken_workflow_is_caught` shows the checks failing on broken variants.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "book.yml"
TOP_KEYS = {"name", "on", "permissions", "concurrency", "jobs", "env", "defaults", "run-name"}
JOB_KEYS = {
    "runs-on", "steps", "needs", "permissions", "environment", "timeout-minutes", "env", "if", "outputs",
    "strategy", "concurrency", "name", "defaults", "container", "services", "continue-on-error",
}  # fmt: skip
STEP_KEYS = {"uses", "run", "with", "env", "name", "id", "if", "shell", "working-directory", "timeout-minutes",
             "continue-on-error"}  # fmt: skip
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@(?:v\d+(?:\.\d+)*|[0-9a-f]{40})$")
EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def load(text: str) -> dict:
    data = yaml.safe_load(text)
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def problems(flow: dict) -> list[str]:
    out = []
    out += [f"unknown top-level key {k!r}" for k in set(flow) - TOP_KEYS]
    push = (flow.get("on") or {}).get("push") or {}
    if "main" not in (push.get("branches") or []):
        out.append("does not run on a push to main")
    perms = flow.get("permissions") or {}
    for key, value in (("pages", "write"), ("id-token", "write"), ("contents", "read")):
        if perms.get(key) != value:
            out.append(f"permissions.{key} must be {value}")
    jobs = flow.get("jobs") or {}
    for name, job in jobs.items():
        out += [f"job {name}: unknown key {k!r}" for k in set(job) - JOB_KEYS]
        if "runs-on" not in job or not job.get("steps"):
            out.append(f"job {name}: needs runs-on and steps")
        needs = job.get("needs", [])
        for need in [needs] if isinstance(needs, str) else needs:
            if need not in jobs:
                out.append(f"job {name}: needs unknown job {need!r}")
        ids = set()
        for i, step in enumerate(job.get("steps") or []):
            out += [f"job {name} step {i}: unknown key {k!r}" for k in set(step) - STEP_KEYS]
            if ("uses" in step) == ("run" in step):
                out.append(f"job {name} step {i}: exactly one of uses and run")
            if "uses" in step and not PINNED.match(step["uses"]):
                out.append(f"job {name} step {i}: {step['uses']!r} is not pinned to a version")
            ids.add(step.get("id"))
        text = yaml.safe_dump(job)
        for expr in EXPRESSION.findall(text):
            m = re.match(r"steps\.([\w-]+)\.", expr)
            if m and m[1] not in ids:
                out.append(f"job {name}: expression refers to unknown step {m[1]!r}")
    steps = [s for job in jobs.values() for s in job.get("steps") or []]
    runs = " ".join(s.get("run", "") for s in steps)
    if "make book" not in runs:
        out.append("the book is not built with `make book`")
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@")]
    if not uploads or (uploads[0].get("with") or {}).get("path", "").rstrip("/") != "_build/html":
        out.append("the Pages artifact is not _build/html, the folder `make book` writes")
    deploys = [(n, j) for n, j in jobs.items() for s in j.get("steps") or [] if "deploy-pages@" in s.get("uses", "")]
    if not deploys:
        out.append("no actions/deploy-pages step")
    for name, job in deploys:
        if (job.get("environment") or {}).get("name") != "github-pages":
            out.append(f"job {name}: deploys outside the github-pages environment")
        if not job.get("needs"):
            out.append(f"job {name}: deploys without waiting for the build")
    return out


def test_the_workflow_is_valid():
    assert problems(load(WORKFLOW.read_text())) == []


def test_the_workflow_builds_where_the_makefile_writes():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^book:", makefile, re.M) and "gradalign book" in makefile
    assert "_build/html" in (ROOT / "src" / "gradalign" / "cli.py").read_text()  # the default output folder


@pytest.mark.parametrize(
    "breakage",
    [
        lambda f: f["on"]["push"].update(branches=["dev"]),
        lambda f: f["permissions"].pop("id-token"),
        lambda f: f["jobs"]["build"]["steps"][0].update(uses="actions/checkout"),
        lambda f: f["jobs"]["build"]["steps"][0].update(run="echo"),
        lambda f: f["jobs"]["deploy"].pop("needs"),
        lambda f: f["jobs"]["deploy"].update(needs="nope"),
        lambda f: f["jobs"]["build"]["steps"][-1]["with"].update(path="_build"),
        lambda f: f["jobs"]["deploy"]["environment"].update(url="${{ steps.nope.outputs.page_url }}"),
        lambda f: f["jobs"]["build"].update({"runs_on": "x"}),
    ],
)
def test_a_broken_workflow_is_caught(breakage):
    flow = copy.deepcopy(load(WORKFLOW.read_text()))
    breakage(flow)
    assert problems(flow)
