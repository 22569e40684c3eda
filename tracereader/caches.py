"""The measurement caches under ~/.cache/profiling-pytorch/ (device ceilings, link bandwidth):
read forgivingly, written whole.

A cache is a convenience: a missing, damaged or foreign file (valid JSON that is not an object)
reads as empty and costs a re-measure; an unwritable one is skipped. Writes go to a temporary
name and are renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
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
