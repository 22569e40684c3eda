"""The readings a command prints, built once: the multi-rank reading of a run."""

from __future__ import annotations

from pathlib import Path

from tracereader.analyses.cross_ranks import analyse
from tracereader.analyses.ranks import summarize
from tracereader.read.load import Trace, TraceError, load


def read_run(
    stem: Path, files: dict[int, Path], each=None, loaded: dict[int, Trace] | None = None
) -> dict:
    """The multi-rank reading of one run (a dict: text() prints it, --json dumps it);
    `each(trace)` is called on every rank's trace before it is dropped (--json keeps each
    rank's own reading); `loaded` holds traces the caller has read already, by rank (a
    lesson's rank 0 has read its own). Raises TraceError for a file that is not a usable
    trace."""
    readings = []
    for rank_in_name, path in sorted(files.items()):
        trace = (loaded or {}).get(rank_in_name)
        if trace is None:
            trace = load(path)
        if not trace.steps:
            raise TraceError(f"{path} holds no event this reader uses")
        readings.append(summarize(trace, rank_in_name))
        if each is not None:
            each(trace)
        del trace
    return analyse(stem, readings)
