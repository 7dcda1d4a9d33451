"""Provenance: what every result record says about where and how it was produced."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

from gradalign import __version__


def project_root() -> Path:
    """The checkout this package lives in (src layout), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device) -> str:
    """One line: the accelerator when used, else the CPU model and the cores torch may use."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    threads = torch.get_num_threads()
    return f"CPU: {cpu_name()}, {threads} thread{'s' if threads != 1 else ''} of {os.cpu_count()} cores"


def cpu_kind() -> str:
    """The instruction set torch's CPU kernels dispatch on here ("AVX2", "AVX512", ...): seeded CPU training is
    bit-identical at one thread on one kind of CPU, not across kinds."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def git_commit() -> str:
    root = project_root()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            # records under results/ are outputs, not code: writing one must not mark the next as dirty
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("+dirty" if dirty else "")


def provenance(device, seeds: list[int], wall_time_s: float) -> dict:
    import torch

    return {
        "hardware": hardware(device),
        "cpu_kind": cpu_kind(),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gradalign": __version__,
        "git_commit": git_commit(),
        "seeds": list(seeds),
        "wall_time_s": round(wall_time_s, 3),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
