"""How the CPU fed the GPU, over the kernels the steps launched:

launch delay   from the launching runtime call's start to the kernel's start (the time a
               kernel waited in the queue, plus the launch itself)
shorter than their launch   kernels whose GPU time is below the runtime call that queued
               them: the GPU finishes them faster than the CPU can issue them
queue depth    at each launch, the kernels launched before it and not yet finished: near 0
               the GPU waits for the CPU, large values mean the CPU runs ahead
"""

from __future__ import annotations

import heapq
import statistics

from tracereader.trace.model import Trace


def read(trace: Trace) -> dict:
    delays: list[float] = []
    depths: list[int] = []
    short = launched = 0
    for step in trace.steps:
        ends: list[float] = []  # a heap of the ends of the kernels still queued or running
        for item in step.gpu:  # in launch order
            if item.kind != "kernel" or item.call is None:
                continue
            launched += 1
            call = item.call
            delays.append(item.ts - call.ts)
            short += item.dur < call.dur
            while ends and ends[0] <= call.ts:
                heapq.heappop(ends)
            depths.append(len(ends))
            heapq.heappush(ends, item.ts + item.dur)
    delays.sort()  # once, for the median and the quantile
    return {
        "kernels": launched,
        "launch_delay_us": {
            "median": statistics.median(delays) if delays else None,
            "p90": delays[min(len(delays) - 1, int(0.9 * len(delays)))] if delays else None,
        },
        "shorter_than_launch": short,
        "queue_depth": {
            "median": statistics.median(depths) if depths else None,
            "max": max(depths) if depths else None,
        },
    }
