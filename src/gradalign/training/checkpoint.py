"""The one checkpoint format: a header line (format, fingerprint, SHA-256 of the payload), then torch.save bytes.

A checkpoint belongs to one run, named by its fingerprint (a hash of everything that decides the
run). Loading verifies the payload's digest, so a file cut short or edited is reported and the run
starts over; a checkpoint of another run is refused (ConfigError). Writes are atomic.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path

import torch

from gradalign.atomic import write_atomically
from gradalign.errors import ConfigError

FORMAT = 2


class CheckpointWarning(UserWarning):
    """A checkpoint was unusable (cut short or edited): the run starts over."""


warnings.simplefilter("always", CheckpointWarning)


def fingerprint(spec: dict) -> str:
    """16 hex digits naming a run: the hash of its JSON-able description."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_digest(*tensors: torch.Tensor) -> str:
    """16 hex digits of the data a run trains on: shapes, dtypes and up to 2^20 evenly spaced values each."""
    digest = hashlib.sha256()
    for t in tensors:
        values = t.reshape(-1)
        sample = values[torch.linspace(0, len(values) - 1, min(len(values), 1 << 20), dtype=torch.float64).long()]
        digest.update(f"{tuple(t.shape)} {t.dtype}".encode() + sample.cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def save_checkpoint(path: Path, run_fingerprint: str, state: dict) -> Path:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = json.dumps(
        {
            "format": FORMAT,
            "fingerprint": run_fingerprint,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "bytes": len(payload),
        }
    )

    def write(handle):
        handle.write(header.encode() + b"\n")
        handle.write(payload)

    return write_atomically(Path(path), write, binary=True)


def load_checkpoint(path: Path | None, run_fingerprint: str, map_location="cpu") -> dict | None:
    """The saved state, or None when there is none or it is damaged (reported, deleted)."""
    if path is None or not Path(path).exists():
        return None
    path = Path(path)
    raw = path.read_bytes()
    head, _, payload = raw.partition(b"\n")
    try:
        header = json.loads(head.decode())
        ok = isinstance(header, dict) and header.get("format") == FORMAT
    except (UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        return _damaged(path, "has no readable header")
    if header["fingerprint"] != run_fingerprint:
        raise ConfigError(f"checkpoint {path} belongs to another run; delete it or pass another path")
    if len(payload) != header["bytes"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        return _damaged(path, "is cut short or edited (its digest does not match)")
    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)


def _damaged(path: Path, reason: str) -> None:
    warnings.warn(f"checkpoint {path} {reason}; starting the run over", CheckpointWarning, stacklevel=3)
    path.unlink(missing_ok=True)
    return None
