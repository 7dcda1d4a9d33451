"""`gradalign gpu-window` and `gradalign import` on the command line (`gpu_window`, `gpu_import`).

`--skip` leaves out backlog elements that another machine is training now (the CPU sitting of a rerun, say), so
that a window and a sitting never train the same runs."""

from __future__ import annotations

from gradalign.errors import ConfigError


def add_parsers(sub) -> None:
    """`gpu-window` and `import` on the command line's subparsers."""
    w = sub.add_parser("gpu-window", help="CUDA tests, bench --quick and the gpu backlog under a time box")
    w.add_argument("--minutes", type=float, required=True, help="the window's time box (e.g. 9)")
    w.add_argument("--out", required=True, help="folder for the window's files (at most 8)")
    w.add_argument("--device", default="auto")
    w.add_argument("--no-tests", action="store_true", help="skip the CUDA tests")
    w.add_argument("--no-bench", action="store_true", help="skip bench --quick")
    w.add_argument("--workers", type=int, default=1, help="units trained at once, each in its own process")
    w.add_argument("--skip", nargs="+", default=[], metavar="ID", help="backlog elements another machine trains")
    w.set_defaults(func=_cmd_window)
    i = sub.add_parser("import", help="check and place the files a gpu-window wrote")
    i.add_argument("folder")
    i.add_argument("--results", default=None, help="results store (default: the checkout's results/)")
    i.set_defaults(func=_cmd_import)


def without(backlog: tuple, skip) -> tuple:
    """`backlog` less the items of the element ids in `skip`; a ConfigError for an id that is not in it."""
    ids = {element_id for element_id, _, _ in backlog}
    unknown = sorted(set(skip) - ids)
    if unknown:
        raise ConfigError(f"--skip {', '.join(unknown)}: not in the GPU backlog ({', '.join(sorted(ids))})")
    return tuple(item for item in backlog if item[0] not in set(skip))


def _cmd_window(args) -> int:
    """Every input checked before the window writes to --out: the time box, the workers, GRADALIGN_THREADS and
    GRADALIGN_DATA, then --out as `run` checks its folders (`storage.check_folder`)."""
    from gradalign.records import storage
    from gradalign.compute.backlog import full_backlog
    from gradalign.compute.gpu_window import gpu_window
    from gradalign.runtime import check_device, threads_from_env
    from gradalign.training.timebox import check_minutes
    from gradalign.compute.window_pool import check_workers

    check_minutes(args.minutes)
    check_workers(args.workers)
    check_device(args.device)
    threads_from_env()
    storage.check_data_env()
    storage.result_store(None)
    skipped = without(full_backlog(), args.skip)
    storage.check_folder(args.out, "--out")

    window = gpu_window(
        args.minutes,
        args.out,
        skipped,
        device=args.device,
        tests=not args.no_tests,
        bench=not args.no_bench,
        workers=args.workers,
    )
    return 0 if window.tests.get("returncode", 0) in (0, 5) else 1  # 5: pytest collected nothing


def _cmd_import(args) -> int:
    """The window's folder is checked whole (`import_checks`) before the results store is, and the store (a folder,
    creatable, writable, with room) before anything is placed in it."""
    from gradalign.records import storage
    from gradalign.compute.gpu_import import import_window

    if not args.folder.strip():
        raise ConfigError("the window's folder is empty; give the folder a gpu-window wrote")
    store = storage.result_store(args.results)
    storage.check_results_root(store.root)
    imported = import_window(args.folder, store.root)
    print("\n".join(imported.lines()))
    return 1 if imported.refused else 0
