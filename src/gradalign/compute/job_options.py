"""A sweep's job options checked before anything is submitted (`gradalign sweep`, `compute.sweep`): a time, core,
memory, GPU or job count that no executor could honour is a ConfigError naming the flag and the range it must lie in.
"""

from __future__ import annotations

from gradalign.errors import ConfigError

MAX_TIMEOUT_MIN = 60 * 24 * 30  # a month per job
MAX_CPUS_PER_TASK = 1024
MAX_MEM_GB = 64 * 1024.0
MAX_GPUS_PER_NODE = 64


def check_job_options(
    executor: str,
    timeout_min: object,
    cpus_per_task: object = None,
    mem_gb: object = None,
    gpus_per_node: object = None,
    parallel: object = None,
) -> None:
    """A ConfigError, before anything is submitted, for a job option that no executor could honour: a time,
    core, memory or job count that is not positive, or more GPUs than the local machine has."""
    _check_number("--timeout-min", timeout_min, 1, MAX_TIMEOUT_MIN, integer=True)
    if cpus_per_task is not None:
        _check_number("--cpus-per-task", cpus_per_task, 1, MAX_CPUS_PER_TASK, integer=True)
    if mem_gb is not None:
        _check_number("--mem-gb", mem_gb, 0, MAX_MEM_GB, integer=False)
        if mem_gb <= 0:
            raise ConfigError(f"--mem-gb must be > 0 (gigabytes per job); got {mem_gb!r}")
    if parallel is not None:
        _check_number("--parallel", parallel, 1, 100_000, integer=True)
    if gpus_per_node is not None:
        _check_number("--gpus-per-node", gpus_per_node, 0, MAX_GPUS_PER_NODE, integer=True)
        if executor == "local" and gpus_per_node > 0:
            import torch

            present = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if gpus_per_node > present:
                raise ConfigError(
                    f"--gpus-per-node {gpus_per_node}: the local executor runs jobs on this machine, which has "
                    f"{present} GPU(s); ask for at most {present} or use --executor slurm"
                )


def _check_number(flag: str, value: object, low: float, high: float, integer: bool) -> None:
    import math

    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value):
        raise ConfigError(f"{flag} must be {kind}; got {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{flag} must be {kind} in [{low:g}, {high:g}]; got {value!r}")
