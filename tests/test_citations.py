"""Pages, notebooks and code cite only files a reader of the repository can open.

A citation is a file name with a documentation or source suffix (`PROTOCOLS.md`, `../report.md`,
`05_imagenet.ipynb`, `requirements.txt`). It resolves when a file of that path exists relative to the citing
file, relative to the repository root, or (for a bare name) anywhere in the repository. The design and
protocol notes the project started from are not in the repository: their content is in the book's appendices
("What the papers leave out", book/appendix/protocols.md; "How the code is built", book/appendix/design.md),
which is what pages and code cite instead.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from gradalign.book.build import GENERATED

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"(?<![\w/.-])((?:\.{1,2}/|[\w-]+/)*[\w-]+\.(?:md|ipynb|yml|yaml|toml|txt|cfg))\b")
SKIP_DIRS = {".git", ".venv", "_build", "data", "results", "__pycache__", "node_modules"}
# Library files whose comments still cite the project's former notes. Editing a comment changes the file's
# bytes and so the code fingerprint of every record computed from it (gradalign.store.fingerprint hashes raw bytes):
# they are rewritten with the next recomputation of their records, not before.
FINGERPRINTED = "src/gradalign"


def files(*folders: str) -> list[Path]:
    out = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and not SKIP_DIRS & set(path.relative_to(ROOT).parts):
                if path.suffix in (".py", ".md", ".ipynb", ".yml", ".yaml"):
                    out.append(path)
    return out


def text_of(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n".join("".join(c["source"]) for c in cells)
    return path.read_text()


def generated_pages() -> set[Path]:
    """The pages `gradalign book` writes at build time (the report, how to run, ...): cited, never committed."""
    return {ROOT / f"{entry}.md" for entry in GENERATED}


def names_in_repo() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    return {Path(p).name for p in listed} | {p.name for p in generated_pages()}


def missing_citations(path: Path, known: set[str]) -> list[str]:
    bad = []
    for name in sorted(set(CITATION.findall(text_of(path)))):
        if name.startswith(("http", "www.", "self.")):  # a URL, or an attribute (`self.cfg`), not a file
            continue
        here = (path.parent / name).resolve()
        in_repo = here.exists() or (ROOT / name).exists() or ("/" not in name and name in known)
        generated = {here, ROOT / name} & generated_pages()
        from_book = path.suffix == ".py" and (ROOT / "book" / name).exists()  # a link in a page the library writes
        if in_repo or generated or from_book:
            continue
        bad.append(name)
    return bad


def test_a_missing_file_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("See PROTOCOLS.md and README.md and [the report](../report.md).")
    assert missing_citations(page, {"README.md"}) == ["../report.md", "PROTOCOLS.md"]


@pytest.mark.parametrize("folder", ["book", "notebooks", "README.md", "_config.yml", "_toc.yml", ".github"])
def test_pages_and_notebooks_cite_only_files_in_the_repository(folder):
    known = names_in_repo()
    targets = [ROOT / folder] if (ROOT / folder).is_file() else files(folder)
    bad = {p.relative_to(ROOT).as_posix(): missing_citations(p, known) for p in targets}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"citations of files that are not in the repository: {bad}"


def test_library_cites_only_files_in_the_repository():
    known = names_in_repo()
    bad = {p.relative_to(ROOT).as_posix(): missing_citations(p, known) for p in files(FINGERPRINTED)}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"citations of files that are not in the repository: {bad}"
