"""How the CPU fed the GPU, over the kernels the steps launched:

launch delay   from the launching runtime call's start to the kernel's start (the time a
               kernel waited in the queue, plus the launch itself)
shorter than their launch   kernels whose GPU time is below the runtime call that queued
               them: the GPU finishes them faster than the CPU can issue them
queue depth    at each launch, the launches before it and not yet finished: near 0 the GPU
               waits for the CPU, large values mean the CPU runs ahead

A CUDA graph's replay is one launch (cudaGraphLaunch) of many kernels: it counts once.
"""

from __future__ import annotations

import heapq
import statistics

from tracereader.analyses.generation import GRAPH_LAUNCH
from tracereader.trace.model import Trace


def read(trace: Trace) -> dict:
    """The figures of the module's doc over the host's launches: a kernel launched by itself,
    or a CUDA graph's replay (one cudaGraphLaunch for all its kernels), taken once: its delay
    to its first kernel, its end its last kernel's. A graph's kernels are never each compared
    with the one graph launch (a replay's 208 kernels read "208 shorter than their launch
    call", queued 52 deep)."""
    delays: list[float] = []
    depths: list[int] = []
    short = launched = graph_kernels = 0
    replays = 0
    for step in trace.steps:
        ends: list[float] = []  # a heap of the ends of the launches still queued or running
        for call, items in _launches(step):
            if len(items) == 1:
                start = items[0].ts
                end = start + items[0].dur
            else:
                start, end = min(i.ts for i in items), max(i.ts + i.dur for i in items)
            if call.name.startswith(GRAPH_LAUNCH):
                replays += 1
                graph_kernels += len(items)
            else:
                launched += 1
                short += items[0].dur < call.dur
            delays.append(start - call.ts)
            while ends and ends[0] <= call.ts:
                heapq.heappop(ends)
            depths.append(len(ends))
            heapq.heappush(ends, end)
    delays.sort()  # once, for the median and the quantile
    return {
        "kernels": launched,  # launched one by one
        "graph_launches": replays,
        "graph_kernels": graph_kernels,  # the kernels those replays ran
        "launch_delay_us": {
            "median": statistics.median(delays) if delays else None,
            "p90": delays[min(len(delays) - 1, int(0.9 * len(delays)))] if delays else None,
        },
        "shorter_than_launch": short,  # of the kernels launched one by one
        "queue_depth": {
            "median": statistics.median(depths) if depths else None,
            "max": max(depths) if depths else None,
        },
    }


def _launches(step) -> list[tuple]:
    """The step's kernel launches in launch order: (runtime call, the kernels it launched)."""
    out: dict[int, tuple] = {}
    for item in step.gpu:  # in launch order
        if item.kind != "kernel" or item.call is None:
            continue
        got = out.get(id(item.call))
        if got is None:
            out[id(item.call)] = (item.call, [item])
        else:
            got[1].append(item)
    return list(out.values())
