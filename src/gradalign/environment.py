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
    """The instruction set torch's CPU kernels dispatch on here ("AVX2", "AVX512", ...). Seeded CPU training at one
    thread is bit-identical only on one kind of machine, and this alone does not name it: see `machine_kind`."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


EXTENSIONS = ("avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_tile")
"""The CPU flags (/proc/cpuinfo) oneDNN and MKL choose kernels by, beyond torch's capability (our choice)."""

VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}


def describe_machine(capability: str, cpuinfo: str) -> str:
    """The kind's name from torch's `capability` and the text of /proc/cpuinfo: capability, then vendor and the
    `EXTENSIONS` present in parentheses; a capability alone where cpuinfo says nothing (another OS)."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() not in fields:
            fields[name.strip()] = value.strip()
        if not line.strip() and fields:  # the first processor's block is enough
            break
    if not fields:
        return capability
    vendor = fields.get("vendor_id", "")
    flags = set(fields.get("flags", "").split())
    named = VENDORS.get(vendor, vendor or "unknown vendor")
    present = [flag for flag in EXTENSIONS if flag in flags]
    return f"{capability} ({named}{'; ' + ', '.join(present) if present else ''})"


def machine_kind() -> str:
    """What decides whether seeded CPU training at one thread is bit-identical on two machines, in words.

    torch's vectorised kernels dispatch on its capability (`cpu_kind`), but the libraries under it choose too:
    oneDNN by the ISA extensions it finds (VNNI, bf16, AMX), MKL by those and by the vendor. On 2026-12-07 an Intel
    Xeon that torch calls AVX512 (VNNI, no bf16) gave other smoke canaries than the AVX512 AMD EPYC with native bf16
    (9 of 13). So the kind names the vendor and those extensions beside the capability: "AVX512 (AMD; avx512_bf16,
    avx512_vnni)" (`describe_machine`). Smoke canaries name it (`records.canary`), and so do CPU run entries
    (`store.run_unit.run_provenance`). A canary or entry stored before names the capability alone ("AVX512",
    "AVX2"): that is then the name of another kind, the machines that ran it (AMD EPYCs in this project's history).
    What it does not see: environment settings that pick other kernels (`ONEDNN_MAX_CPU_ISA`,
    `MKL_ENABLE_INSTRUCTIONS`, `MKL_CBWR`), microarchitectures that share these flags, and CPUs whose cpuinfo has no
    `vendor_id` and `flags` lines (ARM): a canary that differs on a like kind still leaves its record stale.
    """
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return describe_machine(cpu_kind(), cpuinfo)


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
        "machine_kind": machine_kind(),
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
