"""The code that built the book, one click away: its source archive and the *Get the code* page.

`make book` (`gradalign book`) calls `write_archive`, which packs the commit the book is built from with
`git archive` (exactly that commit: the library, the notebooks, the book's pages and the stored records), and
`code_page_markdown`, which writes the page that links it, says which commit it is and whether the working tree
had changes not in it, and gives the install and rerun steps. Outside a git checkout (a book rebuilt from an
unpacked archive) the archive packs the files of the tree instead, leaving out what is built or downloaded.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

# never packed from a plain tree: built, installed or downloaded, not source
NOT_SOURCE = {".git", ".venv", "_build", "data", "__pycache__", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}


def _git(root: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def commit_state(root: Path) -> tuple[str | None, bool]:
    """(the commit HEAD points to, or None outside git; whether tracked files differ from it, results/ aside)."""
    sha = _git(root, "rev-parse", "HEAD")
    if sha is None:
        return None, False
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return sha, bool(status)


def archive_name(sha: str | None) -> str:
    return f"gradalign-{sha[:12]}.tar.gz" if sha else "gradalign-source.tar.gz"


def _tree_archive(root: Path, prefix: str) -> bytes:
    """A tar.gz of the files under `root` (sorted, fixed timestamps: the same tree gives the same bytes)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if any(part in NOT_SOURCE for part in rel.parts) or not path.is_file():
                continue
            info = tar.gettarinfo(str(path), arcname=f"{prefix}{rel.as_posix()}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return gzip.compress(raw.getvalue(), mtime=0)


STAMP = ".archive-commit"  # beside the archive: the commit it packs, and the size and mtime it was written with


def _stamp(target: Path, sha: str) -> str:
    st = target.stat()
    return json.dumps({"commit": sha, "name": target.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns})


def write_archive(root: Path, folder: Path) -> tuple[Path, str | None, bool]:
    """Write the source archive into `folder` (only when its bytes changed); returns (path, commit, dirty).

    A commit's archive is packed once: while the archive in `folder` is the one written for this commit (its stamp,
    `STAMP`, names the commit and the archive's size and mtime), `git archive` is not run again. Outside git the
    tree is packed on every call (its files may have changed)."""
    sha, dirty = commit_state(root)
    name = archive_name(sha)
    prefix = name.removesuffix(".tar.gz") + "/"
    target, stamp = folder / name, folder / STAMP
    if sha and target.is_file() and stamp.is_file() and stamp.read_text() == _stamp(target, sha):
        return target, sha, dirty
    if sha:
        result = subprocess.run(
            ["git", "archive", "--format=tar.gz", f"--prefix={prefix}", sha], cwd=root, capture_output=True
        )
        if result.returncode != 0:
            raise RuntimeError(f"git archive failed: {result.stderr.decode(errors='replace')[-500:]}")
        data = result.stdout
    else:
        data = _tree_archive(root, prefix)
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("gradalign-*.tar.gz"):
        if old.name != name:
            old.unlink()
    if not target.exists() or target.read_bytes() != data:
        target.write_bytes(data)
    if sha:
        stamp.write_text(_stamp(target, sha))
    else:
        stamp.unlink(missing_ok=True)
    return target, sha, dirty


def repository_url(config_text: str) -> str | None:
    """The `repository: url:` of `_config.yml`, or None when it is not set."""
    import yaml

    url = ((yaml.safe_load(config_text) or {}).get("repository") or {}).get("url")
    return str(url).rstrip("/") if url else None


def code_page_markdown(archive: str, sha: str | None, dirty: bool, repository: str | None) -> str:
    """The *Get the code* page; `archive` is the archive's path relative to the page."""
    name = Path(archive).name
    folder = name.removesuffix(".tar.gz")
    if sha is None:
        state = "This book was built outside a git checkout; the archive holds the files of the tree that built it."
    elif dirty:
        state = (
            f"This book was built from commit `{sha}` **with changes not yet committed** (its compute records "
            "say `+dirty`). The archive holds the commit itself, without those changes, so a page rebuilt from it "
            "may differ from this one."
        )
    else:
        state = f"This book was built from commit `{sha}`, with no uncommitted changes: the archive is exactly that."
    repo = ""
    if repository:
        at = f"{repository}/tree/{sha}" if sha else repository
        repo = f"\n\nThe repository: <{repository}>" + (f" (this commit: <{at}>)." if sha else ".")
    return f"""# Get the code

Every page of this book is produced by the Python package `gradalign` and the notebooks that call it. Here is
the source of the exact version that built this book: the library (`src/gradalign`), the notebooks, the book's
pages, the tests and the stored result records (`results/`).

{{download}}`{name} <{archive}>`

{state}{repo}

## Install it and rerun an experiment

You need Python 3.10 or newer. The experiments need only `torch` (2.4 or newer) and `numpy`:

```bash
tar xzf {name}
cd {folder}
python -m venv .venv
.venv/bin/pip install -e .                 # the library and the `gradalign` command (pulls torch and numpy)
.venv/bin/gradalign list                   # every element of the four papers
.venv/bin/gradalign run lga.fig1 --preset smoke   # seconds on a CPU; --preset cpu for the page's own scale
```

`gradalign run` loads a stored record when one matches the experiment's settings and code, and otherwise
computes and stores it. Every page also has a download button for its executed notebook and, at its end,
links to each record it shows (JSON) and to that record's curves (CSV).

## Rebuild the book

```bash
make book      # a virtual environment with the pinned versions, the data, then every page: _build/html
make test      # lint, the test suite, and the built book opened in headless Chromium
```

`make book PRESET=smoke` builds every page in minutes at the smallest scale. The [How to run](how_to_run.md)
page covers the presets, the GPU workflow and the data sets; [How the code is built](appendix/design.md)
explains the code's layout for contributors.
"""
