"""Find the runs a path names: the rank traces one multi-rank job wrote, `<stem>_rank<r>.json[.gz]`
(and the ways other jobs name them), or a folder of them.

The walk reads the layouts jobs write and nothing more: rank files in the folder named, or in
its sub-folders one level down (torchtitan's `iteration_N/`). It never follows a link to a
folder (a link out of the tree, or a loop back into it), and it looks at no more than
MAX_ENTRIES names per folder: `explain /usr` is answered in a moment, not by walking the disk."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

# A rank's trace, named the ways jobs name them: the lessons' `<stem>_rank<r>.json`, HTA's
# `rank-0.json.gz`, torchtitan's `rank0_trace.json`, plain `rank0.json.gz`.
RANK_FILE = re.compile(
    r"^(?P<stem>.*?)[_-]?rank[-_]?(?P<rank>\d+)(?:_trace)?(?:\.pt\.trace)?\.json(?P<gz>\.gz)?$"
)


TRACE_FILE = re.compile(r"\.json(\.gz)?$")

# A run folder holds one file per rank (a few thousand at most, on the largest jobs); a folder
# with more names than this is not one, and reading its names would only cost time.
MAX_ENTRIES = 20_000
# Rank numbers in names: anything longer is not a rank (and int() would refuse it past 4,300).
MAX_RANK_DIGITS = 9


class RunError(Exception):
    """The path is not a readable multi-rank run."""


def _entries(folder: Path) -> list[os.DirEntry] | None:
    """The folder's entries by name, None where it cannot be read or holds too many."""
    try:
        with os.scandir(folder) as it:
            entries = list(itertools.islice(it, MAX_ENTRIES + 1))
    except OSError:
        return None
    if len(entries) > MAX_ENTRIES:
        return None
    return sorted(entries, key=lambda e: e.name)


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()  # a link to a file is read; a FIFO or a device never
    except OSError:
        return False


def _is_real_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)  # never a link: no loop, nothing outside
    except OSError:
        return False


def runs_at(path: str | Path, *, _depth: int = 0) -> dict[Path, dict[int, Path]]:
    """The runs a path names: {folder/stem: {rank: file}}. A folder gives every run in it
    (files named by rank; else, where it holds folders such as torchtitan's iteration_N/,
    the runs inside them, one level down); a path that does not exist names the run whose
    files are `<path>_rank<r>.json[.gz]`. A folder of traces named anyhow is one run: ranks
    from their distributedInfo (read with the traces), here numbered in name order. Raises
    RunError where two files name the same rank of one run (`x_rank0.json`, `x_rank00.json`):
    which one is meant cannot be guessed."""
    path = Path(path)
    try:
        if path.is_dir():
            folder, wanted = path, None
        elif not path.exists() and path.parent.is_dir():
            folder, wanted = path.parent, path.name
        else:
            return {}
    except OSError:  # a name too long, a loop of links
        return {}
    entries = _entries(folder)
    if entries is None:
        return {}
    runs: dict[Path, dict[int, Path]] = {}
    loose = []
    for entry in entries:
        if not _is_file(entry):
            continue
        found = RANK_FILE.match(entry.name)
        if not found or len(found["rank"]) > MAX_RANK_DIGITS:
            if TRACE_FILE.search(entry.name):
                loose.append(Path(entry.path))
            continue
        if wanted is not None and found["stem"] != wanted:
            continue
        stem = folder / found["stem"] if found["stem"] else folder
        ranks = runs.setdefault(stem, {})
        rank = int(found["rank"])
        kept = ranks.setdefault(rank, Path(entry.path))  # sorted: .json before .json.gz
        if kept.name != entry.name and kept.name + ".gz" != entry.name:
            raise RunError(
                f"{kept.name} and {entry.name} in {folder} both name rank {rank}: "
                "move one of them out, which is meant cannot be guessed"
            )
    if wanted is None and not runs:
        if len(loose) > 1:
            return {folder: dict(enumerate(loose))}
        if _depth == 0:
            for entry in entries:  # iteration_N/ folders, each a run; no deeper
                if _is_real_folder(entry):
                    sub = Path(entry.path)
                    inner = runs_at(sub, _depth=1)
                    if all(p.parent == sub or p == sub for p in inner):
                        runs.update(inner)
    return runs


def is_run(path: str | Path) -> bool:
    """Whether `path` names rank traces (the explain/compare hook asks this); a path whose
    ranks clash is one, so that the command says why it cannot read it."""
    try:
        return bool(runs_at(path))
    except RunError:
        return True
