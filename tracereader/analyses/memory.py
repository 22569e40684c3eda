"""Memory over a trace recorded with `profile_memory=True`: per device, the allocated total
over time, its peak (when: which step, which phase, how far into the step) and what was alive
at the peak, grouped by the op that allocated it.

Reads `Trace.memory` (`load(path, memory=True)`). The allocated total is the allocator's own
(`Total Allocated` after each event), so the peak is the largest value it reported anywhere
in the trace: within the recorded steps or between them (the step is then None). What was
alive at the peak: every allocation made before it (in the trace's order) whose address had
not been freed since, on the same device. Memory allocated before profiling started has no
allocation event; it is one row, BEFORE: the total when the first event came, less its own
bytes, less what the trace frees of it (frees of addresses it never saw allocated). So the
rows add up to the allocated total at the peak, exactly.

An allocation's op is the CPU op open on its thread when it was made, past the allocation
helpers torch calls inside it (`aten::empty_strided` under `aten::_to_copy`: `aten::_to_copy`);
allocations with no op open are NO_OP. The phases are analyses.phases' CPU split of the step.
"""

from __future__ import annotations

from bisect import bisect_right

from tracereader.analyses import phases
from tracereader.trace.model import CpuOp, Trace

BEFORE = "allocated before the trace (no event)"
NO_OP = "(no op open on the thread)"
# Ops that only allocate for the op that calls them: an allocation is named after that op.
HELPERS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::zeros",
        "aten::zeros_like",
        "aten::new_zeros",
        "aten::resize_",
    }
)


def op_name(op: CpuOp | None) -> str:
    """The name an allocation made under `op` is grouped by."""
    if op is None:
        return NO_OP
    while op.name in HELPERS and op.parent is not None and op.parent.name.startswith("aten::"):
        op = op.parent
    return op.name


def read(trace: Trace) -> dict:
    """{devices, steps, malformed}; devices: one dict per device with memory events (GPUs
    first, then the CPU), [] when the trace has none (or was loaded without them); malformed:
    the `[memory]` events left out, by the field that made them unusable, most first:

    {device, events, allocations, frees, before_bytes (allocated when the trace began),
     peak: {bytes, reserved_bytes, ts, step, step_index, from_step_start_us, phase},
     at_peak: [{op, bytes, allocations}] largest first, BEFORE among them,
     step_peaks: [{peak_bytes, ts, step, step_index, from_step_start_us, phase}], one a step,
     timeline: (ts, allocated, reserved) lists, in time order}

    steps: [{step, ts, end, phases: [(phase, first start, last end)]}], the phases but
    "other" (the gaps between the backward's ops are "other": drawn, they would be noise).
    """
    steps = []
    spans = {}
    for s in trace.steps:
        spans[id(s)] = parts = phases.spans(s)
        extent: dict[str, list[float]] = {}
        for phase, a, b in parts:
            if phase != "other":
                extent.setdefault(phase, [a, b])[1] = b
        steps.append(
            {
                "step": s.name,
                "ts": s.ts,
                "end": s.end,
                "phases": [(p, a, b) for p, (a, b) in extent.items()],
            }
        )
    memory = getattr(trace, "memory", None)  # set by load(); a Trace built otherwise has none
    malformed = dict(memory.malformed.most_common()) if memory is not None else {}
    if memory is None or not len(memory):
        return {"devices": [], "steps": steps, "malformed": malformed}
    by_device: dict[int, list[int]] = {}
    for i, device in enumerate(memory.device):
        by_device.setdefault(device, []).append(i)
    devices = [_device(trace, memory, d, indices, spans) for d, indices in by_device.items()]
    devices.sort(key=lambda d: (d["device"].startswith("cpu"), d["device"]))
    return {"devices": devices, "steps": steps, "malformed": malformed}


def _device(trace: Trace, memory, device: int, indices: list[int], spans: dict) -> dict:
    ts, size, allocated = memory.ts, memory.bytes, memory.allocated
    first = indices[0]
    before = allocated[first] - size[first]
    peak_at = max(indices, key=allocated.__getitem__)  # the first of equal maxima
    live: dict[int, int] = {}  # addr -> the event that allocated it
    before_left = before
    for i in indices:
        if size[i] > 0:
            live[memory.addr[i]] = i
        elif size[i] < 0 and live.pop(memory.addr[i], None) is None:
            before_left += size[i]  # a free of memory the trace never saw allocated
        if i == peak_at:
            break
    groups: dict[str, list[int]] = {}
    for i in live.values():
        row = groups.setdefault(op_name(memory.op[i]), [0, 0])
        row[0] += size[i]
        row[1] += 1
    at_peak = [{"op": op, "bytes": b, "allocations": n} for op, (b, n) in groups.items()]
    if before_left:
        at_peak.append({"op": BEFORE, "bytes": before_left, "allocations": None})
    at_peak.sort(key=lambda r: -r["bytes"])
    step_peaks = []
    starts = [s.ts for s in trace.steps]
    per_step: dict[int, int] = {}
    for i in indices:
        k = _step_index(trace, starts, ts[i])
        if k is not None and (k not in per_step or allocated[i] > allocated[per_step[k]]):
            per_step[k] = i
    for k in sorted(per_step):
        i = per_step[k]
        step_peaks.append({"peak_bytes": allocated[i], **_when(trace, starts, spans, ts[i])})
    return {
        "device": memory.device_name(device),
        "events": len(indices),
        "allocations": sum(1 for i in indices if size[i] > 0),
        "frees": sum(1 for i in indices if size[i] < 0),
        "before_bytes": before,
        "peak": {
            "bytes": allocated[peak_at],
            "reserved_bytes": memory.reserved[peak_at],
            **_when(trace, starts, spans, ts[peak_at]),
        },
        "at_peak": at_peak,
        "step_peaks": step_peaks,
        "timeline": (
            [ts[i] for i in indices],
            [allocated[i] for i in indices],
            [memory.reserved[i] for i in indices],
        ),
    }


def _step_index(trace: Trace, starts: list[float], t: float) -> int | None:
    k = bisect_right(starts, t) - 1
    return k if k >= 0 and t <= trace.steps[k].end else None


def _when(trace: Trace, starts: list[float], spans: dict, t: float) -> dict:
    """Where a time falls: its step (None between or outside the steps), the phase of the
    step's CPU time then (None where the step shows no phase), the time from its start."""
    k = _step_index(trace, starts, t)
    if k is None:
        return {
            "ts": t,
            "step": None,
            "step_index": None,
            "from_step_start_us": None,
            "phase": None,
        }
    step = trace.steps[k]
    phase = next((p for p, a, b in spans[id(step)] if a <= t <= b), None)
    return {
        "ts": t,
        "step": step.name,
        "step_index": k,
        "from_step_start_us": t - step.ts,
        "phase": phase,
    }
