"""nbval (--nbval-lax) over every notebook at the smoke preset."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_notebook_runs_at_smoke(tmp_path):
    notebooks = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert notebooks
    env = {
        **os.environ,
        "GRADALIGN_PRESET": "smoke",
        "GRADALIGN_RESULTS": str(tmp_path / "results"),
        "GRADALIGN_CACHE": str(tmp_path / "cache"),  # smoke runs stay out of the user's run cache
        "GRADALIGN_PROGRESS": "0",
        "MPLBACKEND": "Agg",
        "GRADALIGN_BATCH": "1",
        # one thread per kernel (our choice): smoke tensors are tiny, and two OpenMP threads in a Jupyter kernel
        # ran the meta-gradient benchmark page 3.5x slower than one on a busy two-core machine
        "GRADALIGN_THREADS": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--nbval-lax",
            "--nbval-cell-timeout=600",
            "-p",
            "no:cacheprovider",
            *map(str, notebooks),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert list((tmp_path / "results" / "lga").glob("*/smoke-*.json"))
