"""The measurement caches under ~/.cache/profiling-pytorch/ (device ceilings, link bandwidth):
read forgivingly, written whole.

A cache is a convenience: a missing file reads as empty and costs a re-measure; one that is not
what we wrote (not a regular file: a FIFO, a link to a device; larger than MAX_BYTES; not JSON;
nested deeper than MAX_DEPTH; not an object) reads as empty too, with one note on stderr, and
is never read past its bound nor opened when it is no regular file. An unwritable one is
skipped. Writes go to a temporary name and are renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tracereader.files import NotRegular, read_regular

MAX_BYTES = 4 << 20  # ours hold a few curves and ceilings: a few KB
MAX_DEPTH = 8  # ours nest 3 deep (key, probe, fields)


def path(name: str) -> Path:
    """$XDG_CACHE_HOME/profiling-pytorch/NAME (default ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "profiling-pytorch" / name


class Foreign(ValueError):
    """A cache file that is not what we wrote: why, for the note."""


def load(file: Path) -> dict:
    """The cache's object; {} where it is missing, or (with a note) not what we wrote."""
    try:
        data = _parsed(_text(file))
    except FileNotFoundError:
        return {}
    except (OSError, Foreign) as err:
        ignored(file, str(err) if isinstance(err, Foreign) else err.strerror or str(err))
        return {}
    return data


def ignored(file: Path, why: str) -> None:
    """One note on stderr for a cache the reader leaves aside, once per file and reason."""
    if (str(file), why) in _NOTED:
        return
    _NOTED.add((str(file), why))
    print(f"note: the cache {file} is ignored: {why[:200]}", file=sys.stderr)


_NOTED: set[tuple[str, str]] = set()


def _text(file: Path) -> str:
    """The file's text: a regular file (a link is followed only to one) of at most MAX_BYTES,
    never opened where it is a FIFO or a device (files.read_regular)."""
    try:
        data = read_regular(file, MAX_BYTES)
    except NotRegular as err:
        raise Foreign(f"{err}, not a file we wrote") from None
    if len(data) > MAX_BYTES:
        raise Foreign(f"larger than {MAX_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Foreign("not UTF-8 text") from None


def _parsed(text: str) -> dict:
    """The JSON object in `text`, at most MAX_DEPTH deep; Foreign otherwise."""
    try:
        data = json.loads(text)
    except RecursionError:  # the decoder's own bound on nesting, far past ours
        raise Foreign(f"nested deeper than {MAX_DEPTH}") from None
    except ValueError:
        raise Foreign("not JSON") from None
    if not isinstance(data, dict):
        raise Foreign("not a JSON object")
    level: list = [data]
    for _ in range(MAX_DEPTH):
        level = [v for x in level for v in _values(x) if isinstance(v, dict | list)]
        if not level:
            return data
    raise Foreign(f"nested deeper than {MAX_DEPTH}")


def _values(container: dict | list):
    return container.values() if isinstance(container, dict) else container


def save(file: Path, data: dict) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, file)
    except OSError:
        pass  # an unwritable cache costs a re-measure next time, nothing more


def measured_stamp(what: str) -> str:
    return f"{what}, measured {time.strftime('%Y-%m-%d', time.gmtime())}"


# --- text ----------------------------------------------------------------------------------


# --- the commands' side: explain FOLDER, compare RUN_A RUN_B --------------------------------


# --- the link's curve (analyses.linkcurve), measured by tools/dev/ranks/link_curve.py -------------


def link_curve_key(device: str, backend: str, world: int) -> str:
    return f"{device} | {backend} | {world} ranks | curve"


def cached_link_curve(key: str) -> str | None:
    """The curve's CSV text cached under `key`, None if never measured."""
    entry = load(path("links.json")).get(key)
    return entry if isinstance(entry, str) else None


def store_link_curve(key: str, csv_text: str) -> None:
    file = path("links.json")
    data = load(file)
    data[key] = csv_text
    save(file, data)
