"""The one checkpoint format: a header line (format, fingerprint, SHA-256 of the payload), then torch.save bytes.

A checkpoint belongs to one run, named by its fingerprint (a hash of everything that decides the
run). Loading checks the header's schema (exactly the fields format, fingerprint, sha256, bytes, of their
types; no key twice) and the payload's digest, so a file cut short, edited or with a malformed header is
reported and the run starts over. A checkpoint of another run is set aside (renamed beside it, reported) and
the run starts fresh. Writes are atomic. These checks are the format's one validation (`parse_checkpoint`,
`payload_problem`, `checkpoint_problem`): a GPU window's carried checkpoints (`window_carry`) go through them too.
"""

from __future__ import annotations

import hashlib
import io
import json
import warnings
from pathlib import Path

import torch

from gradalign.store.atomic import write_atomically
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


HEADER_TYPES = {"format": int, "fingerprint": str, "sha256": str, "bytes": int}
MAX_HEADER_BYTES = 4096


def header_problem(header: object) -> str | None:
    """Why a parsed checkpoint header is malformed (fields, types, format), or None."""
    if not isinstance(header, dict):
        return f"has a header that is not a JSON object (a {type(header).__name__})"
    missing = [name for name in HEADER_TYPES if name not in header]
    if missing:
        return f"has a header without {', '.join(missing)}"
    extra = sorted(set(header) - set(HEADER_TYPES))
    if extra:
        return f"has a header with unknown fields {', '.join(extra)}"
    for name, kind in HEADER_TYPES.items():
        if not isinstance(header[name], kind) or isinstance(header[name], bool):
            return f"has a header whose {name} is a {type(header[name]).__name__}, not a {kind.__name__}"
    if header["format"] != FORMAT:
        return f"has format {header['format']}, expected {FORMAT}"
    if len(header["sha256"]) != 64 or any(c not in "0123456789abcdef" for c in header["sha256"]):
        return "has a header whose sha256 is not 64 hex digits"
    if header["bytes"] < 0:
        return "has a header with a negative byte count"
    return None


def parse_checkpoint(raw: bytes) -> tuple[dict | None, bytes, str | None]:
    """(header, payload, None) of a checkpoint's bytes whose header line parses (no key twice) and is well-formed
    (`header_problem`); (None, b"", why) otherwise. The payload is not checked yet (`payload_problem`)."""
    head, _, payload = raw.partition(b"\n")
    try:
        if len(head) > MAX_HEADER_BYTES:
            raise ValueError("header line too long")
        header = json.loads(head.decode(), object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError):  # json.JSONDecodeError is a ValueError
        return None, b"", "has no readable header"
    problem = header_problem(header)
    return (None, b"", problem) if problem else (header, payload, None)


def payload_problem(header: dict, payload: bytes) -> str | None:
    """Why the payload does not match its (well-formed) header's length and SHA-256, or None."""
    if len(payload) != header["bytes"] or hashlib.sha256(payload).hexdigest() != header["sha256"]:
        return "is cut short or edited (its digest does not match)"
    return None


def checkpoint_problem(raw: bytes) -> str | None:
    """What is wrong with a checkpoint's bytes, whichever run it belongs to: its header, then its payload against
    the header's digest; None when both check. The one validation of the format: `load_checkpoint` makes the same
    checks (with the run's fingerprint between them), and `window_carry` makes these on the checkpoints a GPU window
    carries."""
    header, payload, problem = parse_checkpoint(raw)
    return problem or payload_problem(header, payload)


def load_checkpoint(path: Path | None, run_fingerprint: str, map_location="cpu") -> dict | None:
    """The saved state, or None when there is none or it is damaged (reported, deleted) or another run's
    (reported, set aside as `<name>.other-<its fingerprint>`)."""
    if path is None or not Path(path).exists():
        return None
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:  # a folder where the file should be, no permission
        return set_aside(path, f"cannot be read ({err.strerror or err})", "unreadable")
    header, payload, problem = parse_checkpoint(raw)
    if problem:
        return _damaged(path, problem)
    if header["fingerprint"] != run_fingerprint:
        fingerprint = "".join(c for c in header["fingerprint"] if c.isalnum())[:16] or "unknown"
        return set_aside(path, f"belongs to another run (fingerprint {fingerprint})", f"other-{fingerprint}")
    problem = payload_problem(header, payload)
    if problem:
        return _damaged(path, problem)
    try:
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - a payload torch cannot read, whatever torch raises
        return _damaged(path, f"holds a payload torch cannot load ({type(err).__name__})")
    if not isinstance(state, dict):
        return _damaged(path, f"holds a {type(state).__name__}, not a state dict")
    return state


def _unique_keys(pairs: list) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key twice in the header")
    return dict(pairs)


def _damaged(path: Path, reason: str) -> None:
    warnings.warn(f"checkpoint {path} {reason}; starting the run over", CheckpointWarning, stacklevel=3)
    path.unlink(missing_ok=True)
    return None


def set_aside(path: Path, reason: str, tag: str) -> None:
    """Rename `path` out of the run's way (kept for whoever owns it) and start the run fresh."""
    target = path.with_name(f"{path.name}.{tag}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.{tag}.{n}")
    try:
        path.rename(target)
    except OSError as err:
        raise ConfigError(
            f"checkpoint {path} {reason} and cannot be moved aside ({err.strerror or err}); move or delete it"
        ) from None
    message = f"checkpoint {path} {reason}; set aside as {target.name}, starting the run fresh"
    warnings.warn(message, CheckpointWarning, stacklevel=3)
    return None
