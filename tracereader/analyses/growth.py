"""Memory that grows from step to step, read off the allocator's events (a trace recorded with
`profile_memory=True`, loaded with `load(path, memory=True)`): per device, what stays allocated
at the end of each recorded step. Growth is the case where every step ends higher than the one
before and the average rise is at least GROWS_BYTES; what stays is the allocations the recorded
steps made and the trace never freed, grouped by the op that allocated them (analyses.memory's
naming: past the allocation helpers), largest first.
"""

from __future__ import annotations

from bisect import bisect_right

from tracereader.analyses.memory import op_name
from tracereader.trace.model import Trace

GROWS_BYTES = 1 << 20  # a rise per step below 1 MiB is the allocator's noise, not a leak


def read(trace: Trace) -> dict | None:
    """{device, per_step_bytes, first_bytes, last_bytes, steps, kept: [{op, bytes}]} for the
    device that grows the most; None where nothing grows (or no memory events)."""
    memory = getattr(trace, "memory", None)
    if memory is None or not len(memory) or len(trace.steps) < 2:
        return None
    by_device: dict[int, list[int]] = {}
    for i, device in enumerate(memory.device):
        by_device.setdefault(device, []).append(i)
    found = [_device(trace, memory, d, indices) for d, indices in by_device.items()]
    found = [f for f in found if f is not None]
    return max(found, key=lambda f: f["per_step_bytes"]) if found else None


def _outer(op) -> str:
    """The op a user called: the outermost aten op around the allocation (`aten::relu` over
    `aten::clamp_min`, `aten::softmax` over `aten::_softmax`)."""
    while op is not None and op.parent is not None and op.parent.name.startswith("aten::"):
        op = op.parent
    return op_name(op)


def _device(trace: Trace, memory, device: int, indices: list[int]) -> dict | None:
    times = [memory.ts[i] for i in indices]
    ends = []
    for s in trace.steps:
        k = bisect_right(times, s.end) - 1
        if k < 0:
            return None
        ends.append(memory.allocated[indices[k]])
    rises = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    per_step = (ends[-1] - ends[0]) / len(rises)
    if min(rises) <= 0 or per_step < GROWS_BYTES:
        return None
    start, stop = trace.steps[0].ts, trace.steps[-1].end
    live: dict[int, int] = {}
    for i in indices:
        size = memory.bytes[i]
        if size > 0 and start <= memory.ts[i] <= stop:
            live[memory.addr[i]] = i
        elif size < 0:
            live.pop(memory.addr[i], None)
    kept: dict[str, int] = {}
    for i in live.values():
        name = _outer(memory.op[i])
        kept[name] = kept.get(name, 0) + memory.bytes[i]
    return {
        "device": memory.device_name(device),
        "per_step_bytes": per_step,
        "first_bytes": ends[0],
        "last_bytes": ends[-1],
        "steps": len(ends),
        "kept": [{"op": op, "bytes": b} for op, b in sorted(kept.items(), key=lambda kv: -kv[1])],
    }
