"""`gradalign list | run | bench | sweep | gpu-window | import | book | report | data`.

`run` imports only torch and the library (no papermill, no jupyter-book): it works on a bare GPU
machine. `book` needs the book environment of requirements.txt.

Every bad input (an unknown command, id, preset or field, a value of the wrong type, NaN, a value out
of range, a size beyond its bound or beyond the data set, a `--set` given twice, a device that is not
there, a bad GRADALIGN_THREADS, an empty GRADALIGN_RESULTS or GRADALIGN_CACHE, a results root or run
cache that is a file, cannot be written or has no room) exits with status 2 and one line on stderr,
`gradalign: error: ...`, before any data is loaded or computed. A write that fails after compute is
one line too, naming the fallback file that keeps what was computed. Identical runs started together
compute once: the second waits for the first's lock, then loads its record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from gradalign.records import storage
from gradalign.errors import ConfigError, GradalignError
from gradalign.training.timebox import TimeBoxSpent


def cmd_list(args) -> int:
    from gradalign.experiments import EXPERIMENTS
    from gradalign.elements import ELEMENTS, PARTS
    from gradalign.records.runner import element_status

    for part, title in PARTS.items():
        print(f"\n{title}")
        for element in (e for e in ELEMENTS.values() if e.part == part):
            exp = EXPERIMENTS.get(element.id)
            note = f"  [{exp.note}]" if exp and exp.note else ""
            print(f"  {element.id:<16} {element_status(element.id):<14} {element.title}{note}")
    return 0


def cmd_run(args) -> int:
    """Check every input, resolve (and so validate) the config, then load the stored record or compute it."""
    from gradalign.records import runner
    from gradalign.config import check_preset
    from gradalign.compute.overrides import parse_overrides
    from gradalign.experiments import get
    from gradalign.runtime import check_device, threads_from_env
    from gradalign.training.timebox import check_minutes, time_box

    threads_from_env()
    storage.check_data_env()
    check_device(args.device)
    check_preset(args.preset, allow_auto=True)
    check_minutes(args.time_limit)
    overrides = parse_overrides(args.set)
    exp = get(args.id)
    store = storage.result_store(args.results)
    cache = storage.run_cache_root()
    storage.check_results_root(store.root)
    preset = _preset_to_run(exp, args, overrides, store)
    if args.show_config:
        return _show_config(exp.resolve(preset, overrides), preset)
    stored = None if args.force else runner.stored_record(args.id, preset, overrides, store)
    if stored is None:
        storage.check_clean_tree(preset, store.root, args.allow_dirty)
        storage.check_results_writable(store.root)
        storage.prepare_storage(store.root, cache)
        config_hash = exp.resolve(preset, overrides).digest(exp.version)
        path = store.path(args.id, preset, config_hash)
        if path.is_dir():
            raise ConfigError(f"{path} is a folder, where the record goes; move it away")
        with storage.record_lock(cache, args.id, preset, config_hash), storage.reported_already(path):
            stored = None if args.force else runner.stored_record(args.id, preset, overrides, store)  # meanwhile?
            with time_box(args.time_limit):
                record = (
                    stored
                    if stored is not None
                    else runner.run(args.id, preset, overrides, force=args.force, store=store, device=args.device)
                )
    else:
        record = stored
    _print_record(record, store, loaded=stored is not None)
    _print_device_notes(exp, record, args.device, loaded=stored is not None)
    return 0


def _preset_to_run(exp, args, overrides: dict, store) -> str:
    """The preset `run` computes or loads, its config resolved first so that bad overrides fail here."""
    from gradalign.records import runner

    if args.preset != "auto":
        exp.resolve(args.preset, overrides)
        return args.preset
    exp.resolve("cpu", overrides)
    if args.force:
        return "cpu"
    return runner.best_stored_preset(exp.id, overrides, store) or "cpu"


def _where(provenance: dict) -> str:
    """The machine a record ran on; for one assembled from stored runs, the hardware of those runs too."""
    from gradalign.book.record_text import where_computed

    return provenance["hardware"] + (f" ({where_computed(provenance)})" if provenance.get("runs") else "")


def _print_record(record: dict, store, loaded: bool) -> None:
    from gradalign.book.report import compute_time, format_value, scale_of
    from gradalign.records.canary import stale_files
    from gradalign.experiments.verdict import reason

    prov = record["provenance"]
    scale = scale_of(record)
    why = reason(record["verdict"], record.get("preconditions"), record.get("checks"))
    status = record["verdict"]["status"] + (f" ({why})" if why else "")
    print(f"{record['id']} [{record['preset']}] {status}" + (f": {scale}" if scale else ""))
    if loaded:
        print(
            f"  loaded from the store: computed {prov.get('date', '(date unknown)')} in {compute_time(record)} "
            f"on {_where(prov)} (--force recomputes)"
        )
        changed = stale_files(record)
        if changed:
            print(
                f"  stale: {len(changed)} definition(s) or file(s) it ran changed since ({', '.join(changed[:3])}, …)"
            )
    else:
        print(f"  computed now in {compute_time(record)} on {_where(prov)}")
    sections = (("preconditions", "precondition "), ("checks", ""), ("targets", "target (not in the verdict) "))
    for key, title in sections:
        for name, check in record.get(key, {}).items():
            value = format_value(check["value"], page=False)
            mark = "ok  " if check["passed"] else ("≈   " if check.get("within_noise") else "FAIL")
            print(f"  {mark} {title}{name}: {check['rule']} (measured {value})")
    print(f"record: {store.path(record['id'], record['preset'], record['config_hash'])}")


def _print_device_notes(exp, record: dict, device: str, loaded: bool) -> None:
    """Say when the hardware asked for is not the hardware the record was computed on."""
    if device == "auto":
        return
    asked = device.split(":")[0]
    if not exp.uses_accelerator:
        if asked == "cuda":
            print(f"note: {exp.id} computes on the CPU whatever --device says (its problems are too small for a GPU)")
        return
    used = str(record["provenance"].get("device", "cpu"))
    if loaded and used.split(":")[0] != asked:
        print(
            f"note: you asked for --device {device}, but this stored record was computed on {used}; "
            f"--force recomputes it on {device}"
        )


def _show_config(cfg, preset: str) -> int:
    """Every setting of the resolved config by its dotted name (what --set accepts)."""
    print(f"{type(cfg).__name__} [{preset}]")
    from gradalign.config import dotted

    for name, value in dotted(cfg.to_dict()).items():
        print(f"  {name} = {json.dumps(value)}")
    return 0


def cmd_bench(args) -> int:
    """Without a name: every benchmark and what is stored. With one: measure it, store its record, print it."""
    from gradalign.compute.bench import BenchStore, run_benchmark
    from gradalign.benchmarks.registry import BENCHMARKS, NOT_BUILT
    from gradalign.runtime import check_device, threads_from_env

    threads_from_env()
    storage.check_data_env()
    check_device(args.device)
    root = storage.result_store(args.results).root
    storage.check_results_root(root)
    if args.name is None:
        store = BenchStore(root)
        for name, bench in BENCHMARKS.items():
            stored = [kind for kind in ("cpu", "cuda") if store.path(name, kind).exists()]
            print(f"{name:<16} stored: {', '.join(stored) or 'none':<10} {bench.title}")
        for name, item in NOT_BUILT.items():
            print(f"{name:<16} not built  {item['ratio']} ({item['why']})")
        return 0
    if not args.quick:
        storage.check_results_writable(root)
    record = run_benchmark(args.name, args.device, quick=args.quick, root=root)
    bench = BENCHMARKS[args.name]
    print(f"{args.name} on {record['provenance']['hardware']} ({record['provenance']['wall_time_s']:.1f} s)")
    for key, what in bench.ratios.items():
        if key in record["measurement"]:
            print(f"  {key} = {record['measurement'][key]:.3f}  ({what})")
    for goal in record["goals"]:
        print(f"  goal {goal['ratio']} {goal['goal']}: {'met' if goal['met'] else 'not met'}")
    if not args.quick:
        print(f"stored: {BenchStore(root).path(args.name, record['device_kind'])}")
    return 0


def cmd_book(args) -> int:
    """Every input checked before anything is written to --out: the preset, GRADALIGN_BOOK_JOBS, GRADALIGN_THREADS,
    GRADALIGN_DATA, the results root and the build folder."""
    from gradalign.config import check_preset
    from gradalign.runtime import threads_from_env

    check_preset(args.preset, allow_auto=True)
    threads_from_env()
    storage.check_data_env()
    storage.result_store(None)
    from gradalign.book.build import book_jobs, build_book

    book_jobs()
    storage.check_folder(args.out, "--out (the build folder)")
    result = build_book(args.preset, args.out, force=args.force)
    print(
        f"executed {len(result['executed'])} notebook(s), up to date {len(result['skipped'])}; "
        f"book: {result['html']}/index.html"
    )
    return 0


def cmd_report(args) -> int:
    """The report of the stored records; a results root that is not a folder is refused, and --out is written
    atomically."""
    from gradalign.config import check_preset

    check_preset(args.preset, allow_auto=True)
    store = storage.result_store(None)
    if args.out is not None:
        storage.check_output_file(args.out)
    storage.check_results_exist(store.root)
    if args.out is not None:
        storage.check_folder(Path(args.out).absolute().parent, "--out's folder", min_free=2**20)
    from gradalign.book.report import report_markdown

    text = report_markdown(args.preset)
    if args.out:
        storage.write_text(Path(args.out), text)
    else:
        print(text)
    return 0


def cmd_data(args) -> int:
    from gradalign.data import fashion_mnist
    from gradalign.data.fashion_mnist import FILES, prepare_fashion_mnist, raw_dir

    if args.root is not None and not args.root.strip():
        raise ConfigError("--root is empty; give a folder, or leave it out for $GRADALIGN_DATA or ./data")
    storage.check_data_env()
    raw, source = raw_dir(args.root), fashion_mnist.DEBIAN_DIR
    if not all((raw / name).is_file() for name in FILES) and all((source / f"{n}.gz").exists() for n in FILES):
        storage.check_folder(raw, "data folder")  # the files must be unpacked there
    try:
        raw = prepare_fashion_mnist(args.root, source=source)
    except OSError as err:
        if isinstance(err, GradalignError):
            raise
        from gradalign.store.atomic import StorageError

        for name in FILES:  # what an interrupted unpacking left
            with contextlib.suppress(OSError):
                (raw_dir(args.root) / f"{name}.tmp").unlink(missing_ok=True)
        raise StorageError(storage.os_error_line(err)) from None
    if raw is None:
        print(
            f"Fashion-MNIST: not found (looked in {raw_dir(args.root)} and /usr/share/datasets/fashion-mnist); "
            "install the Debian package dataset-fashion-mnist or set GRADALIGN_DATA",
            file=sys.stderr,
        )
        return 1
    print(f"Fashion-MNIST ready in {raw}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one line (`gradalign: error: ...`, exit 2) like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"gradalign: error: {_one_line(message)}\n")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gradalign", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every element of the four papers and its status").set_defaults(func=cmd_list)
    r = sub.add_parser("run", help="run one experiment (or load its stored record)")
    r.add_argument("id", help="element id, e.g. lga.fig1 (see `gradalign list`)")
    r.add_argument("--preset", default="cpu", help="smoke | cpu | gpu | paper | auto (default: cpu)")
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, JSON value (steps=100, labels=[250,1000]); "
        "dotted names reach nested settings (trial.lr=3e-4); see --show-config",
    )
    r.add_argument(
        "--force",
        action="store_true",
        help="recompute the record and every run it reads, committed ones included (to assemble a record again from "
        "its committed runs, remove the stored record instead)",
    )
    r.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    r.add_argument("--results", help="results root (default: $GRADALIGN_RESULTS or ./results)")
    r.add_argument(
        "--allow-dirty",
        action="store_true",
        help="compute a cpu, gpu or paper record from a tree with uncommitted changes (only with a results root away "
        "from the checkout's results/)",
    )
    r.add_argument(
        "--show-config",
        action="store_true",
        help="print the resolved config (every dotted name --set accepts) and exit without computing",
    )
    r.add_argument(
        "--time-limit",
        type=float,
        metavar="MINUTES",
        help="stop cleanly after about this long, the work done stored and the current run checkpointed; the same "
        "command resumes (exit status 3 while unfinished)",
    )
    r.set_defaults(func=cmd_run)
    be = sub.add_parser("bench", help="measure a benchmark and store its record (no name: list them)")
    be.add_argument("name", nargs="?", help="benchmark name (see `gradalign bench`)")
    be.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    be.add_argument("--quick", action="store_true", help="tiny sizes, to test the code path; nothing is stored")
    be.add_argument("--results", help="results root (default: $GRADALIGN_RESULTS or ./results)")
    be.set_defaults(func=cmd_bench)
    from gradalign.compute.sweep import add_sweep_parser  # light: submitit is imported when a sweep runs

    add_sweep_parser(sub)
    from gradalign.compute.window_cli import add_parsers as add_window_parsers  # light: torch is imported when it runs

    add_window_parsers(sub)
    from gradalign.records.canary_stamp import add_parser as add_stale_parser

    add_stale_parser(sub)
    b = sub.add_parser("book", help="execute the notebooks that changed and build the HTML book")
    b.add_argument(
        "--preset", default="auto", help="auto (largest stored record, else cpu) | smoke | cpu | gpu | paper"
    )
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
    """Exit status: 0 done, 1 a data set is missing (`data`), 2 bad input (one line on stderr), 3 stopped by
    `run --time-limit` before the end (the same command resumes)."""
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as stop:  # --help (0) or a usage error (2), already printed
            return 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 2
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at interpreter exit
        return status
    except TimeBoxSpent as stop:
        print(f"gradalign: stopped: {_one_line(str(stop))}", file=sys.stderr)
        return 3
    except GradalignError as err:
        print(f"gradalign: error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `gradalign list | head`: the reader left; see Python's "Note on SIGPIPE"
        _silence_stdout()
        return 0
    except OSError as err:  # a storage error no command turned into its own line: still one line
        print(f"gradalign: error: {_one_line(storage.os_error_line(err))}", file=sys.stderr)
        return 2


def _silence_stdout() -> None:
    """Point stdout at os.devnull so that the flush at exit does not raise a second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured): nothing to flush there
        pass
