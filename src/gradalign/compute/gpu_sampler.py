"""GPU utilisation and memory sampled once a second for a whole GPU window (issue 45, item 1).

The source, in order: `nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 1000`
in a subprocess when `nvidia-smi` is on the PATH (the whole GPU: every worker process counts); else
`torch.cuda.utilization()` (which needs pynvml) and `torch.cuda.memory_allocated()` (this process's allocations only)
polled by a thread when CUDA is available; else nothing, and the report says why ("not sampled: ..."). A sample
is `[seconds since the window began, utilisation %, memory MiB]`; with several GPUs, nvidia-smi gives one sample
per GPU per second, all in the series. The series is capped at `MAX_SAMPLES` (an hour at one a second; a window is
at most 10 minutes): past it, samples are dropped and the report says `truncated`. Phases (`mark`: the benchmark
slot, the training) divide the series, and the summary gives the mean utilisation of each.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

MAX_SAMPLES = 3600
INTERVAL_S = 1.0
QUERY = ("--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits", "-lms", "1000")


class Sampler:
    """Start with `start()`, mark phases with `mark(name)`, read with `report()` (at any time), end with `stop()`;
    or use it as a context manager."""

    def __init__(self, interval_s: float = INTERVAL_S, max_samples: int = MAX_SAMPLES):
        self.interval_s, self.max_samples = interval_s, max_samples
        self.source, self.note = "", ""
        self.samples: list[list[float]] = []
        self.phases: list[list] = []  # [name, seconds since the start]
        self.truncated = False
        self._began = time.monotonic()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._process: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Sampler:
        self._began = time.monotonic()
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                self._process = subprocess.Popen(
                    [smi, *QUERY], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
                )
            except OSError as err:
                self.note = f"nvidia-smi did not start ({type(err).__name__}: {err})"
            else:
                self.source = "nvidia-smi"
                self._thread = threading.Thread(target=self._read_smi, name="gpu-sampler", daemon=True)
                self._thread.start()
                return self
        why = _torch_unavailable()
        if why:
            self.note = f"not sampled: no nvidia-smi{' (' + self.note + ')' if self.note else ''}, {why}"
            return self
        self.source, self.note = "torch.cuda", "memory: this process's allocations only (no nvidia-smi)"
        self._thread = threading.Thread(target=self._poll_torch, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def mark(self, phase: str) -> None:
        """A phase of the window begins now (its samples are those from now to the next mark)."""
        with self._lock:
            self.phases.append([str(phase)[:80], round(self._now(), 1)])

    def stop(self) -> None:
        self._stop.set()
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def report(self) -> dict:
        """What `window.json` keeps under `utilisation`: the source (or why none), the series, the phases and their
        mean utilisation."""
        with self._lock:
            samples, phases = [list(s) for s in self.samples], [list(p) for p in self.phases]
        return {
            "source": self.source,
            "note": self.note,
            "interval_s": self.interval_s,
            "samples": samples,
            "phases": phases,
            "truncated": self.truncated,
            "summary": summarise(samples, phases),
        }

    def _now(self) -> float:
        return time.monotonic() - self._began

    def _add(self, utilisation: float, memory_mib: float) -> None:
        with self._lock:
            if len(self.samples) >= self.max_samples:
                self.truncated = True
                return
            self.samples.append([round(self._now(), 1), float(utilisation), float(memory_mib)])

    def _read_smi(self) -> None:
        for line in self._process.stdout:
            parsed = parse_smi_line(line)
            if parsed is not None:
                self._add(*parsed)
            if self._stop.is_set():
                break

    def _poll_torch(self) -> None:
        import torch

        while not self._stop.is_set():
            try:
                self._add(torch.cuda.utilization(), torch.cuda.memory_allocated() / 2**20)
            except Exception as err:  # noqa: BLE001 (pynvml missing, a driver error: said, sampling ends)
                self.note = f"not sampled: torch.cuda.utilization failed ({type(err).__name__}: {err})"
                return
            self._stop.wait(self.interval_s)


def _torch_unavailable() -> str:
    """Why torch cannot sample utilisation here ("" when it can)."""
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available():
        return "no CUDA"
    return ""


def parse_smi_line(line: str) -> tuple[float, float] | None:
    """(utilisation %, memory MiB) of one line of nvidia-smi's csv ("37, 1234"); None for anything else
    ("[N/A]", a header, an error message)."""
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != 2:
        return None
    try:
        utilisation, memory = float(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (utilisation, memory) if 0 <= utilisation <= 100 and memory >= 0 else None


def summarise(samples: list[list[float]], phases: list[list]) -> dict:
    """The mean utilisation over the whole series and over each phase's samples, the peak memory, the count."""
    if not samples:
        return {"samples": 0}
    out = {
        "samples": len(samples),
        "mean_utilisation": round(sum(s[1] for s in samples) / len(samples), 1),
        "max_memory_mib": max(s[2] for s in samples),
        "by_phase": {},
    }
    bounds = [
        (name, start, phases[n + 1][1] if n + 1 < len(phases) else float("inf"))
        for n, (name, start) in enumerate(phases)
    ]
    for name, start, end in bounds:
        inside = [s[1] for s in samples if start <= s[0] < end]
        if inside:
            out["by_phase"][name] = {"samples": len(inside), "mean_utilisation": round(sum(inside) / len(inside), 1)}
    return out
