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

from tracereader import intervals, kernel_names
from tracereader.model import GpuItem, Step, Trace, per_step


# Kernel classes (kernel_names.CLASSES) in the groups the summary reports.
def group(item: GpuItem) -> str:
    return kernel_names.group(item.klass.cls)


def is_comm(item: GpuItem) -> bool:
    return item.klass.cls == "collective"


def busy(items) -> float:
    return intervals.length(intervals.of(items))


@per_step
def step(s: Step) -> dict:
    """One step's wall time, GPU busy time and time by class group (microseconds)."""
    by_group: dict[str, list[GpuItem]] = {}
    for item in s.gpu:
        by_group.setdefault(group(item), []).append(item)
    merged = intervals.of(s.gpu)
    return {
        "name": s.name,
        "wall_us": s.dur,
        "gpu_busy_us": intervals.length(merged),
        "gpu_sum_us": s.gpu_time,
        "gpu_start": merged[0][0] if merged else None,
        "gpu_end": merged[-1][1] if merged else None,
        "by_class_us": {g: busy(items) for g, items in by_group.items()},
        "kernels": sum(i.kind == "kernel" for i in s.gpu),
    }


def window(trace: Trace) -> dict:
    """HTA's temporal breakdown and comm/compute overlap, over the whole trace."""
    return temporal(trace.gpu_all)


def steps_window(trace: Trace) -> dict | None:
    """The same over the GPU work the recorded steps launched; None without ProfilerStep (the
    recording is the unit and HTA filters nothing)."""
    if trace.unit != "step":
        return None
    return temporal([item for s in trace.steps for item in s.gpu])


def temporal(items: list[GpuItem]) -> dict:
    """HTA's temporal breakdown and comm/compute overlap of some GPU work (microseconds, % of
    its span)."""
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
    everything = intervals.of(items)
    span = everything[-1][1] - everything[0][0]
    compute = intervals.of(i for i in items if i.kind == "kernel" and not is_comm(i))
    comm = intervals.of(i for i in items if is_comm(i))
    rest = intervals.of(i for i in items if i.kind != "kernel" or is_comm(i))
    busy_us = intervals.length(everything)
    compute_us = intervals.length(compute)
    non_compute = intervals.length(rest) - intervals.overlap(rest, compute)
    comm_us = intervals.length(comm)

    def pct(x: float) -> float | None:
        return 100 * x / span if span > 0 else None

    return {
        "span_us": span,
        "gpu_busy_us": busy_us,
        "idle_pct": pct(span - busy_us),
        "compute_pct": pct(compute_us),
        "non_compute_pct": pct(non_compute),
        "comm_us": comm_us,
        "comm_overlap_pct": 100 * intervals.overlap(comm, compute) / comm_us if comm_us else None,
    }
