"""Timing and peak memory of one call, on CPU or CUDA: the measuring tools every benchmark shares.

Peak memory above the starting point: torch.cuda.max_memory_allocated on CUDA; on CPU, the running sum
of the allocation/free events recorded by torch.profiler (profile_memory=True), read from its Chrome trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

import torch


def timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ start/stop lines), restoring it afterwards."""
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def peak_bytes(fn, device: torch.device) -> int:
    """Peak bytes allocated while `fn` runs, above what was allocated when it started."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e["ts"]):
        if event["args"].get("Device Type", 0) == 0:  # CPU
            live += event["args"]["Bytes"]
            peak = max(peak, live)
    return peak
