"""Where a step's GPU time went, by union of intervals: the GPU's busy time, its share by
kernel class, and the whole-trace window the way Holistic Trace Analysis (HTA) reads a rank.

Per step (a ProfilerStep, or the recorded window):
  wall      the step's span on the CPU (ProfilerStep's duration)
  gpu busy  the union of the intervals of the GPU work the step launched (kernels, memcpys,
            memsets), never a sum over streams: two kernels overlapping on two streams (or
            on one, with programmatic dependent launch) count once
  by class  per class group, the union of that group's intervals (groups may overlap each
            other on several streams, so they can add up to more than gpu busy)

Window (HTA's temporal breakdown), in two scopes: `window` over every GPU event of the trace,
steps or not; `steps_window` over the work the recorded steps launched (by correlation id, as
HTA filters a trace with steps), so a trace with GPU work outside its steps (warm-up before
the schedule, work launched after the last step) compares like with like against HTA:
  span         first GPU event's start to the last one's end
  compute      union of the kernels that are not communication
  non-compute  union of communication kernels, memcpys and memsets, minus compute
  idle         span minus the union of all GPU events
  comm overlap the share of the communication kernels' union that overlaps compute
"""

from __future__ import annotations

import math

from tracereader.names import kernel_classes
from tracereader.trace import intervals
from tracereader.trace.model import GpuItem, Step, Trace, in_start_order, per_step


# Kernel classes (kernel_classes.CLASSES) in the groups the summary reports.
def group(item: GpuItem) -> str:
    return kernel_classes.group(item.klass.cls)


def is_comm(item: GpuItem) -> bool:
    return item.klass.cls == "collective"


def busy(items) -> float:
    return intervals.length(intervals.of(items))


def _sweep(order) -> dict:
    """One pass over GPU work in start order, each union kept as a running interval and its
    length (no list of intervals): busy time, the compute kernels' time, the summed time,
    the last end, the kernels, time by class group, and the collectives set aside."""
    groups: dict[str, list[float]] = {}  # group -> [current start, current end, closed length]
    group_of = kernel_classes.GROUP_OF
    busy_us = compute_us = summed = 0.0  # the two unions' closed parts; the sum
    b_start = b_end = c_start = c_end = -math.inf  # their current (open) intervals
    kernels = 0
    comm = []
    for item in order:
        start = item.ts
        end = start + item.dur
        summed += item.dur
        if start <= b_end:
            if end > b_end:
                b_end = end
        else:
            if b_end > -math.inf:
                busy_us += b_end - b_start
            b_start, b_end = start, end
        cls = item.klass.cls
        if cls == "collective":
            comm.append(item)
        elif item.kind == "kernel":
            if start <= c_end:
                if end > c_end:
                    c_end = end
            else:
                if c_end > -math.inf:
                    compute_us += c_end - c_start
                c_start, c_end = start, end
        if item.kind == "kernel":
            kernels += 1
        run = groups.get(group_of[cls])
        if run is None:
            groups[group_of[cls]] = [start, end, 0.0]
        elif start <= run[1]:
            if end > run[1]:
                run[1] = end
        else:
            run[2] += run[1] - run[0]
            run[0], run[1] = start, end
    if b_end > -math.inf:
        busy_us += b_end - b_start
    if c_end > -math.inf:
        compute_us += c_end - c_start
    return {
        "busy_us": busy_us,
        "compute_us": compute_us,
        "summed": summed,
        "end": b_end,  # the running union's end: the last end
        "kernels": kernels,
        "by_class_us": {g: run[2] + run[1] - run[0] for g, run in groups.items()},
        "comm": comm,
    }


@per_step
def step(s: Step) -> dict:
    """One step's wall time, GPU busy time, time by class group and the compute kernels' time
    (microseconds), from one pass over the step's work in start order."""
    order = in_start_order(s)
    swept = _sweep(order)
    return {
        "name": s.name,
        "wall_us": s.dur,
        "gpu_busy_us": swept["busy_us"],
        "gpu_sum_us": swept["summed"],
        "gpu_start": order[0].ts if order else None,
        "gpu_end": swept["end"] if order else None,
        "compute_us": swept["compute_us"],
        "by_class_us": swept["by_class_us"],
        "kernels": swept["kernels"],
    }


@per_step
def window(trace: Trace) -> dict:
    """HTA's temporal breakdown and comm/compute overlap, over the whole trace."""
    return temporal(trace.gpu_all)


@per_step
def steps_window(trace: Trace) -> dict | None:
    """The same over the GPU work the recorded steps launched; None without ProfilerStep (the
    recording is the unit and HTA filters nothing)."""
    if trace.unit != "step":
        return None
    if trace.gpu_items == len(trace.gpu_all):
        return window(trace)  # the steps launched all of it
    # gpu_all is in start order, and a step's work is what a runtime call inside it launched
    return temporal([i for i in trace.gpu_all if i.call is not None and i.call.step is not None])


def temporal(items: list[GpuItem]) -> dict:
    """HTA's temporal breakdown and comm/compute overlap of some GPU work in start order
    (microseconds, % of its span). Non-compute is busy minus compute: the union of everything
    is the union of compute and the rest."""
    if not items:
        return {
            "span_us": 0.0,
            "gpu_busy_us": 0.0,
            "idle_pct": None,
            "compute_pct": None,
            "non_compute_pct": None,
            "comm_us": 0.0,
            "comm_overlap_pct": None,
        }
    swept = _sweep(items)  # one pass; the collectives kept aside for the overlap
    busy_us, compute_us, comm_items = swept["busy_us"], swept["compute_us"], swept["comm"]
    span = swept["end"] - items[0].ts
    non_compute = busy_us - compute_us
    # the sweep's running union of the collectives' group (it holds the collectives alone)
    comm_us = swept["by_class_us"].get(kernel_classes.GROUP_OF["collective"], 0.0)
    if comm_us:
        compute_items = [i for i in items if i.kind == "kernel" and not is_comm(i)]
        overlap = intervals.overlap(intervals.of(comm_items), intervals.of(compute_items))
    else:
        overlap = 0.0

    def pct(x: float) -> float | None:
        return 100 * x / span if span > 0 else None

    return {
        "span_us": span,
        "gpu_busy_us": busy_us,
        "idle_pct": pct(span - busy_us),
        "compute_pct": pct(compute_us),
        "non_compute_pct": pct(non_compute),
        "comm_us": comm_us,
        "comm_overlap_pct": 100 * overlap / comm_us if comm_us else None,
    }
