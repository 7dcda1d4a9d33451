"""The kind of CPU a smoke canary names: what decides whether seeded CPU training is bit-identical on two machines.

torch's own vectorised kernels dispatch on the instruction set it reports (`environment.cpu_kind`: AVX2,
AVX512, ...), but the libraries under it choose too: oneDNN by the ISA extensions it finds (VNNI, bf16, AMX), MKL
by those and by the vendor. On 2026-12-07 an Intel Xeon that torch calls AVX512 (VNNI, no bf16) gave other smoke
canaries than the AVX512 AMD EPYC with native bf16 whose canaries were kept (`isoloss.eq5-8`, `isoloss.fig2`,
`lga.fig3`, ...). So a canary names the vendor and those extensions beside torch's capability:
"AVX512 (AMD; avx512_bf16, avx512_vnni)". A canary stored before this names torch's capability alone ("AVX512",
"AVX2"): that is then the name of another kind, that of the machines that ran it (AMD EPYCs, in this project's
history), never taken for this one.
"""

from __future__ import annotations

from pathlib import Path

from gradalign.environment import cpu_kind

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
    """This machine's kind, as a canary names it (`describe_machine`)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return describe_machine(cpu_kind(), cpuinfo)
