"""Find the runs a path names: the rank traces one multi-rank job wrote, `<stem>_rank<r>.json[.gz]`
(and the ways other jobs name them), or a folder of them."""

from __future__ import annotations

import re
from pathlib import Path

# A rank's trace, named the ways jobs name them: the lessons' `<stem>_rank<r>.json`, HTA's
# `rank-0.json.gz`, torchtitan's `rank0_trace.json`, plain `rank0.json.gz`.
RANK_FILE = re.compile(
    r"^(?P<stem>.*?)[_-]?rank[-_]?(?P<rank>\d+)(?:_trace)?(?:\.pt\.trace)?\.json(?P<gz>\.gz)?$"
)


TRACE_FILE = re.compile(r"\.json(\.gz)?$")


class RunError(Exception):
    """The path is not a readable multi-rank run."""


def runs_at(path: str | Path) -> dict[Path, dict[int, Path]]:
    """The runs a path names: {folder/stem: {rank: file}}. A folder gives every run in it
    (files named by rank; else, where it holds folders such as torchtitan's iteration_N/,
    the runs inside them); a path that does not exist names the run whose files are
    `<path>_rank<r>.json[.gz]`. A folder of traces named anyhow is one run: ranks from their
    distributedInfo (read with the traces), here numbered in name order."""
    path = Path(path)
    try:
        if path.is_dir():
            folder, wanted = path, None
        elif not path.exists() and path.parent.is_dir():
            folder, wanted = path.parent, path.name
        else:
            return {}
        entries = sorted(folder.iterdir())
    except OSError:
        return {}
    runs: dict[Path, dict[int, Path]] = {}
    loose = []
    for entry in entries:
        if not entry.is_file():
            continue
        found = RANK_FILE.match(entry.name)
        if not found:
            if TRACE_FILE.search(entry.name):
                loose.append(entry)
            continue
        if wanted is not None and found["stem"] != wanted:
            continue
        stem = folder / found["stem"] if found["stem"] else folder
        runs.setdefault(stem, {}).setdefault(int(found["rank"]), entry)  # .json before .gz
    if wanted is None and not runs:
        if len(loose) > 1:
            return {folder: dict(enumerate(loose))}
        for entry in entries:  # iteration_N/ folders, each a run
            if entry.is_dir():
                inner = runs_at(entry)
                if all(p.parent == entry or p == entry for p in inner):
                    runs.update(inner)
    return runs


def is_run(path: str | Path) -> bool:
    """Whether `path` names rank traces (the explain/compare hook asks this)."""
    return bool(runs_at(path))
