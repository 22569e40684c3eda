"""One reading per trace or run, built once: what the commands print and the lessons read.

A `Reading` holds everything the text and the JSON of one trace show: the summary (the
analyses' data over the steps), the whole-trace windows, each step's breakdown and idle time,
and the findings, ranked. The renderers format it and compute nothing, so a command builds it
once and any number of views read it. A run of rank traces reads to one dict
(`read_run`: per rank, across ranks); the link's bandwidth is an argument, never a file read
here: the command looks it up, a lesson passes what it measured.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from tracereader.analyses import (
    breakdown,
    collectives,
    cross_ranks,
    generation,
    idle,
    launches,
    phases,
    straggle,
    syncs,
    tops,
)
from tracereader.analyses.ranks import base_us, not_one_job, summarize
from tracereader.judge import findings
from tracereader.judge.finding import Finding
from tracereader.trace.load import Trace, TraceError, load

TOP = 6  # rows per top list in the summary


class Reading:
    """One trace's reading (not a dataclass: see kernel_classes.KernelClass)."""

    __slots__ = ("trace", "steps", "summary", "window", "steps_window", "findings", "hidden")

    def __init__(self, trace: Trace):
        self.trace = trace
        # each step's breakdown (wall, GPU busy, sum, by class) with its idle split
        self.steps = [
            {**breakdown.step(s), "idle_us": parts}
            for s, parts in zip(trace.steps, idle.split(trace), strict=True)
        ]
        self.summary = _summary(trace, self.steps) if trace.steps else None
        self.window = breakdown.window(trace)
        self.steps_window = breakdown.steps_window(trace)
        shown, hidden = findings.ranked(trace)
        self.findings: list[Finding] = shown  # what the text shows
        self.hidden: list[Finding] = hidden  # under 1% of the step: --all-findings, JSON


def _spread(values: list[float]) -> dict:
    return {
        "median": statistics.median(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def _summary(trace: Trace, rows: list[dict]) -> dict:
    # A generation's prefill is another phase, not a slow decode step: the per-step spreads
    # are the decode steps' (the prefill is read apart, in "generation")
    steps = generation.decode_only(trace).steps
    phase = "decode" if len(steps) < len(trace.steps) else None
    if phase:
        kept = {id(s) for s in steps}
        rows = [r for s, r in zip(trace.steps, rows, strict=True) if id(s) in kept]
    idles = [r["idle_us"] for r in rows]
    groups = sorted({g for r in rows for g in r["by_class_us"]})
    kernels, gpu_total = tops.kernels(trace, TOP + 2)
    comm_steps = [collectives.step(s, trace) for s in steps] if trace.on_gpu else []
    return {
        "steps": len(rows),
        "phase": phase,  # "decode": the spreads below are over the decode steps alone
        "wall_us": _spread([r["wall_us"] for r in rows]),
        "gpu_busy_us": _spread([r["gpu_busy_us"] for r in rows]),
        "gpu_sum_us": _spread([r["gpu_sum_us"] for r in rows]),
        "idle_us": {k: _spread([i[k] for i in idles]) for k in idles[0]} if idles else {},
        "kernels_per_step": _spread([r["kernels"] for r in rows]),
        "by_class_us": {
            g: statistics.median(r["by_class_us"].get(g, 0.0) for r in rows) for g in groups
        },
        "top_kernels": kernels,
        "gpu_total_us": gpu_total,
        "top_ops_by_gpu": tops.ops_by_gpu(trace, TOP),
        "top_ops_by_self": tops.ops_by_self(trace, TOP),
        "phases": phases.step(trace.steps[-1]),
        "generation": generation.read(trace),
        "modules": _modules(trace),
        "launches": launches.read(trace),
        "syncs": syncs.step(trace.steps[-1]),
        "collectives": {
            "comm_us": _spread([c["comm_us"] for c in comm_steps]),
            "exposed_us": _spread([c["exposed_us"] for c in comm_steps]),
            "by_kind": collectives.by_kind(comm_steps),
        }
        if any(c["collectives"] for c in comm_steps)
        else None,
    }


def _modules(trace: Trace) -> dict | None:
    if not trace.modules:
        return None
    from tracereader.analyses import modules  # start-up: most traces carry no module events

    return modules.read(trace)


def read_run(
    stem: Path,
    files: dict[int, Path],
    each=None,
    loaded: dict[int, Trace] | None = None,
    link: dict | None = None,
) -> dict:
    """The multi-rank reading of one run (a dict: render.ranks prints it, --json dumps it);
    `each(trace)` is called on every rank's trace before it is dropped (--json keeps each
    rank's own reading); `loaded` holds traces the caller has read already, by rank (a
    lesson's rank 0 has read its own); `link` is the link's measured bandwidth
    ({'bus_bytes_per_s', 'measured'}), None where unknown. Raises TraceError for a file that
    is not a usable trace."""
    readings = []
    for rank_in_name, path in sorted(files.items()):
        trace = (loaded or {}).get(rank_in_name)
        if trace is None:
            trace = load(path)
        if not trace.steps:
            raise TraceError(f"{path} holds no event this reader uses")
        readings.append(summarize(trace, rank_in_name))
        readings[-1].profile = straggle.profile(trace, base_us(trace))
        if each is not None:
            each(trace)
        del trace
    if readings:
        readings[0].notes.extend(not_one_job(readings))
    result = cross_ranks.analyse(stem, readings, link=link)
    by_rank = {r.rank: r.profile for r in readings}
    names = {s["name"] for s in result["steps"]}  # the steps every rank recorded, matched
    matched = {
        r: [row for row, step in zip(p, next(x for x in readings if x.rank == r).steps,
                                     strict=True) if step.name in names]
        for r, p in by_rank.items()
    }  # fmt: skip
    return {**result, "findings": straggle.judge(matched) if len(matched) > 1 else []}
