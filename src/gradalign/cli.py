"""`gradalign list | run | book | report | data`.

`run` imports only torch and the library (no papermill, no jupyter-book): it works on a bare GPU
machine. `book` needs the book environment of requirements.txt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gradalign.errors import GradalignError


def cmd_list(args) -> int:
    from gradalign.experiments import EXPERIMENTS
    from gradalign.registry import ELEMENTS, PARTS, status

    for part, title in PARTS.items():
        print(f"\n{title}")
        for element in (e for e in ELEMENTS.values() if e.part == part):
            exp = EXPERIMENTS.get(element.id)
            note = f"  [{exp.note}]" if exp and exp.note else ""
            print(f"  {element.id:<16} {status(element.id):<14} {element.title}{note}")
    return 0


def cmd_run(args) -> int:
    from gradalign.config import parse_override
    from gradalign.results import ResultStore
    from gradalign.runner import load_or_run, run

    overrides = dict(parse_override(text) for text in args.set)
    store = ResultStore(args.results) if args.results else ResultStore()
    if args.preset == "auto" and not args.force:
        record = load_or_run(args.id, "auto", overrides, store=store, device=args.device)
    else:
        record = run(args.id, "cpu" if args.preset == "auto" else args.preset, overrides, force=args.force,
                     store=store, device=args.device)
    path = store.path(record["id"], record["preset"], record["config_hash"])
    print(f"{record['id']} [{record['preset']}] {record['verdict']['status']} "
          f"({record['provenance']['wall_time_s']:.1f} s on {record['provenance']['hardware']})")
    for name, check in record["checks"].items():
        value = check["value"] if not isinstance(check["value"], list) else "…"
        print(f"  {'ok ' if check['passed'] else 'FAIL'} {name}: {check['rule']} (measured {value})")
    print(f"record: {path}")
    return 0


def cmd_book(args) -> int:
    from gradalign.book import build_book

    result = build_book(args.preset, args.out, force=args.force)
    print(f"executed {len(result['executed'])} notebook(s), up to date {len(result['skipped'])}; "
          f"book: {result['html']}/index.html")
    return 0


def cmd_report(args) -> int:
    from gradalign.report import report_markdown

    text = report_markdown(args.preset)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


def cmd_data(args) -> int:
    from gradalign.data.fashion_mnist import prepare_fashion_mnist, raw_dir

    raw = prepare_fashion_mnist(args.root)
    if raw is None:
        print(f"Fashion-MNIST: not found (looked in {raw_dir(args.root)} and /usr/share/datasets/fashion-mnist); "
              "install the Debian package dataset-fashion-mnist or set GRADALIGN_DATA", file=sys.stderr)
        return 1
    print(f"Fashion-MNIST ready in {raw}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradalign", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every element of the four papers and its status").set_defaults(func=cmd_list)
    r = sub.add_parser("run", help="run one experiment (or load its stored record)")
    r.add_argument("id", help="element id, e.g. lga.fig1 (see `gradalign list`)")
    r.add_argument("--preset", default="cpu", help="smoke | cpu | gpu | paper | auto (default: cpu)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    r.add_argument("--force", action="store_true", help="recompute even if a record is stored")
    r.add_argument("--device", default="auto", help="auto | cpu | cuda")
    r.add_argument("--results", help="results root (default: $GRADALIGN_RESULTS or ./results)")
    r.set_defaults(func=cmd_run)
    b = sub.add_parser("book", help="execute the notebooks that changed and build the HTML book")
    b.add_argument("--preset", default="auto", help="auto (largest stored record, else cpu) | smoke | cpu | gpu | paper")
    b.add_argument("--out", default="_build", help="build folder (default: _build; the book lands in _build/html)")
    b.add_argument("--force", action="store_true", help="re-execute every notebook")
    b.set_defaults(func=cmd_book)
    rep = sub.add_parser("report", help="print the reproduction report (Markdown)")
    rep.add_argument("--preset", default="auto")
    rep.add_argument("--out", help="write to this file instead of stdout")
    rep.set_defaults(func=cmd_report)
    d = sub.add_parser("data", help="prepare Fashion-MNIST from the Debian package")
    d.add_argument("--root", help="data root (default: $GRADALIGN_DATA or ./data)")
    d.set_defaults(func=cmd_data)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except GradalignError as err:
        print(f"gradalign: error: {err}", file=sys.stderr)
        return 2
