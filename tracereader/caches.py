"""The measurement caches under ~/.cache/profiling-pytorch/ (device ceilings, link bandwidth):
read forgivingly, written whole.

A cache is a convenience: a missing, damaged or foreign file (valid JSON that is not an object)
reads as empty and costs a re-measure; an unwritable one is skipped. Writes go to a temporary
name and are renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path


def path(name: str) -> Path:
    """$XDG_CACHE_HOME/profiling-pytorch/NAME (default ~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "profiling-pytorch" / name


def load(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(file: Path, data: dict) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, file)
    except OSError:
        pass  # an unwritable cache costs a re-measure next time, nothing more


# --- the link's bandwidth, cached by --bench ------------------------------------------------


def cache_path() -> Path:
    return path("links.json")


def link_key(device: str, backend: str, world: int) -> str:
    return f"{device} | {backend} | {world} ranks"


def _links() -> dict:
    return load(cache_path())


def cached_link(key: str) -> dict | None:
    """{'bus_bytes_per_s': ..., 'measured': ...} for `key`, None if never measured."""
    entry = _links().get(key)
    if not isinstance(entry, dict):
        return None
    value = entry.get("bus_bytes_per_s")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return entry


def store_link(key: str, bus_bytes_per_s: float, measured: str) -> None:
    """Cache a measured link (written whole, then renamed: a reader never sees half)."""
    cache = _links()
    cache[key] = {"bus_bytes_per_s": bus_bytes_per_s, "measured": measured}
    save(cache_path(), cache)


def measured_stamp(what: str) -> str:
    return f"{what}, measured {time.strftime('%Y-%m-%d', time.gmtime())}"


# --- text ----------------------------------------------------------------------------------


# --- the commands' side: explain FOLDER, compare RUN_A RUN_B --------------------------------


# --- the link's curve (analyses.linkcurve), measured by tools/dev/link_curve.py --------------


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
