"""A Proton Chrome trace (03_fused_mlp.py --proton) into its complete events: a process per
block ("... Core5 CTA33"), a thread per warp ("warp 10 (line 0)"), spans of the kernel's scopes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def load(path: str | Path) -> list[dict]:
    """The trace's complete events, keeping only the fields read here. The whole file is parsed
    at once (json.load): a 65 MB trace of 132 blocks peaks near 250 MB and takes a second."""
    keep = ("ph", "name", "pid", "tid", "ts", "dur")

    def slim(obj: dict) -> dict:
        return {k: obj[k] for k in keep if k in obj} if "ph" in obj else obj

    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        trace = json.load(f, object_hook=slim)
    return trace.get("traceEvents", []) if isinstance(trace, dict) else trace
