"""The evidence behind a page, downloadable from it: each stored record as JSON, and its curves as CSV.

A record's `curves` are nested dictionaries and lists (one list per seed, per method, per data set, ...).
`curve_rows` flattens them to one row per number, in long form: `curve` (the path of keys down to the list,
joined by "/"), `index` (the position along the curve; for a list of lists, "seed/position"), `value`. Nothing
is summarised or dropped, so the CSV holds exactly the numbers of the JSON record's curves.
"""

from __future__ import annotations

import csv
import io
import numbers
from pathlib import Path

CSV_HEADER = ("curve", "index", "value")


def _scalar(value) -> bool:
    return value is None or isinstance(value, (numbers.Number, str, bool))


def curve_rows(curves, path: str = "", index: str = ""):
    """Yield (curve, index, value) for every number (or string, or None) in `curves`."""
    if isinstance(curves, dict):
        for key, value in curves.items():
            yield from curve_rows(value, f"{path}/{key}" if path else str(key), index)
    elif isinstance(curves, (list, tuple)):
        if all(_scalar(v) for v in curves):
            for i, v in enumerate(curves):
                yield path, f"{index}/{i}" if index else str(i), v
        else:
            for i, v in enumerate(curves):
                yield from curve_rows(v, path, f"{index}/{i}" if index else str(i))
    else:
        yield path, index, curves


def curves_csv(record: dict) -> str:
    """The record's curves as CSV text (only the header when it has none)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for curve, index, value in curve_rows(record.get("curves") or {}):
        writer.writerow((curve, index, "" if value is None else value))
    return out.getvalue()


def download_names(record: dict) -> tuple[str, str]:
    """(JSON name, CSV name) of a record's downloads: `<id>-<preset>.json`, `<id>-<preset>-curves.csv`."""
    stem = f"{record['id']}-{record['preset']}"
    return f"{stem}.json", f"{stem}-curves.csv"


def write_downloads(
    record: dict, record_path: Path, folder: Path, written: list[Path] | None = None
) -> tuple[Path, Path]:
    """Copy the stored record file (byte for byte) and write its curves CSV into `folder`; files whose content
    is unchanged are not rewritten (so an unchanged book does not rebuild), and those that are written are added
    to `written`. Returns the two paths."""
    json_name, csv_name = download_names(record)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in ((json_name, Path(record_path).read_bytes()), (csv_name, curves_csv(record).encode())):
        target = folder / name
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
            if written is not None:
                written.append(target)
        paths.append(target)
    return paths[0], paths[1]
