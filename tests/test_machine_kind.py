"""`environment.machine_kind`: the CPU kind a smoke canary names, finer than torch's capability (two AVX512 machines
of other vendors or extensions round seeded training differently)."""

import pytest

from gradalign.environment import describe_machine, machine_kind

INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_vnni\n\nprocessor\t: 1\n"
AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n"


def test_two_avx512_machines_of_other_vendors_and_extensions_are_two_kinds():
    intel, amd = describe_machine("AVX512", INTEL), describe_machine("AVX512", AMD)
    assert intel == "AVX512 (Intel; avx512_vnni)"
    assert amd == "AVX512 (AMD; avx512_bf16, avx512_vnni)"
    assert describe_machine("AVX2", "vendor_id : Other\nflags : fpu\n") == "AVX2 (Other)"


def test_a_kind_read_from_cpuinfo_is_never_a_bare_capability_the_name_older_canaries_carry():
    """A canary stored before kinds named vendor and extensions says "AVX512": that names the machines that ran it,
    never this one; only a machine whose cpuinfo says nothing gets the bare capability."""
    from pathlib import Path

    assert describe_machine("AVX512", "") == "AVX512"
    if not Path("/proc/cpuinfo").is_file():
        pytest.skip("no /proc/cpuinfo here: the kind is the bare capability, as above")
    here = machine_kind()
    assert here not in ("AVX2", "AVX512", "DEFAULT") and here.endswith(")")
