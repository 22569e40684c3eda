"""The measurement caches under ~/.cache/profiling-pytorch/ (device ceilings, link bandwidth):
read forgivingly, written whole.

A cache is a convenience: a missing, damaged or foreign file (valid JSON that is not an object)
reads as empty and costs a re-measure; an unwritable one is skipped. Writes go to a temporary
name and are renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
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
