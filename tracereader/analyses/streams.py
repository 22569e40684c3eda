"""What the order of one stream's GPU work says about the trace itself.

A stream runs its work in order: each kernel, copy or memset ends no earlier than the one
queued before it. With programmatic dependent launch (Hopper on) the next kernel may start
before the one before it ends (its prologue overlaps the tail), and this project's fixtures do
show such partial overlaps on one stream; but it then waits for that one to finish, so the
ends stay in order. Work that starts after another on the same stream and ends before it
(inside it, or a copy of it) no GPU ran: the clock is broken, or traces of several processes
(or one trace twice) were merged into one file. A CUDA graph's replay is left out: its
branches run side by side, recorded on the one stream it was launched on.
"""

from __future__ import annotations

from tracereader.analyses.generation import GRAPH_LAUNCH
from tracereader.trace.model import Trace

ROUNDING_US = 1e-3  # the profiler's timestamps are whole nanoseconds, written in microseconds


def out_of_order(trace: Trace) -> list[dict]:
    """[{device, stream, inside}] per stream with work that ends before work that started
    earlier on it ends (`inside`: how many such), most first; [] for a trace a GPU could have
    run."""
    by_stream: dict[tuple, list[tuple[float, float]]] = {}
    for item in trace.gpu_all:  # every GPU event: item.stream's lookup inlined
        args = item.args
        stream = args.get("stream")
        if stream is None or item.runtime.startswith(GRAPH_LAUNCH):
            continue
        key = (args.get("device"), stream)
        spans = by_stream.get(key)
        if spans is None:
            spans = by_stream[key] = []
        spans.append((item.ts, -(item.ts + item.dur)))
    found = []
    for (device, stream), spans in by_stream.items():
        spans.sort()  # by start; of two that start together, the longer first
        inside, end = 0, -spans[0][1]  # the first span's end: nothing before it to be inside
        for start, minus_end in spans[1:]:
            stop = -minus_end
            if start < end - ROUNDING_US and stop <= end:
                inside += 1
            if stop > end:  # max(end, stop)
                end = stop
        if inside:
            found.append({"device": device, "stream": stream, "inside": inside})
    return sorted(found, key=lambda f: -f["inside"])
