"""Each step's share of the GPU's timeline (its window), and why the GPU sat idle in it, split
the way HTA splits idle time:

  host wait     the GPU had finished everything queued and the work that ended the gap was
                launched only after that: the GPU waited for the CPU
  kernel wait   a gap shorter than KERNEL_WAIT_US with the next work already queued: the
                cost of starting one kernel after another
  other         any other gap with the next work already queued (waiting on an event, a
                stream dependency, another stream's work)

The window of step k starts where the GPU is free for it, B_k = max(its CPU start, the end of
all GPU work launched before it), and ends where the next one starts (the last: at the later
of its CPU end and its GPU work's end). When the GPU lags the host (the healthy case of a
GPU-bound loop), a step's window begins after the previous step's kernels, not at its own CPU
start: those kernels are the previous step's time, not this step's idle. The windows tile the
GPU's timeline, so per step busy + host wait + kernel wait + other = the window, exactly.

HTA looks at each stream alone; here the gaps are those of the union of all GPU work (the time
no stream was busy), each classed by the event that ends it. A gap after the last GPU work
while the CPU is still in the step is host wait.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left, bisect_right
from itertools import accumulate

from tracereader.analyses import syncs
from tracereader.trace.model import Trace

# HTA's consecutive_kernel_delay (30) is documented in ns but compared against its
# microsecond timestamps: 30 us in effect, the threshold its kernel wait is measured with.
KERNEL_WAIT_US = 30.0
_memo: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_bounds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # bound()'s, read once


def windows(trace: Trace) -> list[tuple[float, float]]:
    """Each step's window [B_k, B_k+1) on the GPU's timeline (see the module's doc)."""
    return _read(trace)[0]


def split(trace: Trace) -> list[dict]:
    """Per step: window_us, busy_us (GPU work of any step inside the window, union), and its
    idle time by kind (host_wait_us, kernel_wait_us, other_us); they add up to window_us.
    edge_us is the part of host_wait_us at the trace's ends (before its first GPU work, after
    its last), which HTA, counting gaps between two kernels, leaves out."""
    return _read(trace)[1]


def _read(trace: Trace):
    found = _memo.get(trace)
    if found is None:
        found = _memo[trace] = _compute(trace)
    return found


def _compute(trace: Trace):
    steps = trace.steps
    items = trace.gpu_all  # in start order
    # Ends of the GPU work by launch time, as a running maximum: the end of all work launched
    # before t is ends_max[bisect_left(launches, t) - 1]. Each item's launch is when the host
    # launched it; GPU work whose launch the trace does not hold was launched before the
    # recording began (a warm-up's queued replays, whose kernels run on into the first
    # recorded step): earlier than any step, so no step's window counts it as its own.
    inf = float("inf")
    launch_of = [i.call.ts if i.call is not None else -inf for i in items]
    ends_of = [i.ts + i.dur for i in items]
    order = sorted(range(len(items)), key=launch_of.__getitem__)  # stable: ties keep file order
    launches = [launch_of[k] for k in order]
    ends_max = list(accumulate(map(ends_of.__getitem__, order), max))  # first on ties, as max

    def end_before(t: float, inclusive: bool = False) -> float:
        k = (bisect_right if inclusive else bisect_left)(launches, t)
        return ends_max[k - 1] if k else float("-inf")

    starts = [max(s.ts, end_before(s.ts)) for s in steps]
    if steps:
        last = steps[-1]
        starts.append(max(last.end, end_before(last.end, inclusive=True), starts[-1]))
    bounds = [(starts[k], starts[k + 1]) for k in range(len(steps))]
    union = _union([i.ts for i in items], ends_of, launch_of)
    return bounds, [_row(lo, hi, *union) for lo, hi in bounds]


def _union(starts, ends, launch_of) -> tuple[list[float], list[float], list[float]]:
    """The union of all GPU work (its starts and ends, in start order), each interval with
    the launch of the item that opens it: its starts, ends and those launches, as three lists
    (the walk in _row reads them by index, no interval object to unpack)."""
    opens: list[float] = []
    closes: list[float] = []
    firsts: list[float] = []
    end = float("-inf")  # no interval yet: every start (finite) opens the first
    for ts, stop, launch in zip(starts, ends, launch_of, strict=True):
        if ts <= end:
            if stop > end:  # max(end, stop)
                end = closes[-1] = stop
        else:
            end = stop
            opens.append(ts)
            closes.append(stop)
            firsts.append(launch)
    return opens, closes, firsts


_BEFORE, _AFTER = float("-inf"), float("inf")  # no GPU work before, after the gap


def _row(lo: float, hi: float, opens, closes, firsts) -> dict:
    """One step's window [lo, hi) walked along the union: its busy time and its gaps, each
    classed by the interval that ends it."""
    busy = host = kernel = other = edge = 0.0
    n = len(opens)
    k = max(bisect_right(opens, lo) - 1, 0)
    cursor = lo
    while cursor < hi:
        if k < n:
            if closes[k] <= cursor:
                k += 1
                continue
            if opens[k] <= cursor:  # inside a busy interval
                stop = closes[k]
                if hi < stop:  # min(stop, hi)
                    stop = hi
                busy += stop - cursor
                cursor = stop
                continue
        # a gap: from the previous interval's end (or -inf) to the next one's start
        gap_start = closes[k - 1] if k > 0 else _BEFORE
        gap_end = opens[k] if k < n else _AFTER
        stop = hi if hi < gap_end else gap_end  # min(gap_end, hi)
        part = stop - cursor
        if k >= n or gap_start == _BEFORE:
            host += part  # before the trace's first GPU work or after its last
            edge += part
        elif firsts[k] > gap_start:
            host += part  # nothing queued: the next work was launched after the GPU freed
        elif gap_end - gap_start < KERNEL_WAIT_US:
            kernel += part
        else:
            other += part
        cursor = stop
    return {
        "window_us": hi - lo,
        "busy_us": busy,
        "host_wait_us": host,
        "kernel_wait_us": kernel,
        "other_us": other,
        "edge_us": edge,  # host wait at the trace's ends, no GPU work on one side of it
    }


def bound(trace: Trace) -> dict | None:
    """What bounds the steps, from their GPU windows (medians): "host-bound" where the GPU
    waits for launches half its window or more, "stalled" where it idles 30% or more with work
    queued and is busy under 70%, "GPU-bound" where it waits for launches a tenth or less and
    is busy longer than the host works (host_paced says when it is not), else "balanced";
    None without GPU work. The one rule explain and compare both say."""
    if not trace.steps or not trace.gpu_all:
        return None
    found = _bounds.get(trace)
    if found is None:
        found = _bounds[trace] = _bound(trace)
    return dict(found)


def _bound(trace: Trace) -> dict:
    import statistics

    parts = split(trace)
    window = statistics.median(p["window_us"] for p in parts)
    busy = statistics.median(p["busy_us"] for p in parts)
    host = statistics.median(p["host_wait_us"] for p in parts)
    other = statistics.median(p["other_us"] for p in parts)
    own = statistics.median(host_work(s) for s in trace.steps)
    share = host / window if window else 0.0
    # The host's own work outlasts the GPU's and the queue drains in the step: the launches do
    # not keep ahead (h100's 03_simple_mlp eager: 261 us of host for 257 us busy, 26 us of
    # host wait a step read "GPU-bound").
    paced = own >= busy and host >= DRAINS * window
    if share >= 0.5:
        label = "host-bound"
    elif busy < 0.7 * window and other >= 0.3 * window:
        label = "stalled"
    elif share <= 0.1 and not paced:
        label = "GPU-bound"
    else:
        label = "balanced"
    return {"label": label, "window_us": window, "busy_us": busy, "host_wait_us": host,
            "other_us": other, "host_share": share, "host_work_us": own,
            "host_paced": paced}  # fmt: skip


# the GPU waits for launches 5% of its window or more: the queue drains (a graph replay that
# starts 5 us into a 200 us token and fills the rest is still GPU-bound)
DRAINS = 0.05


def host_work(step) -> float:
    """The host's own work in a step: its span less the time its calls blocked it on the GPU
    (syncs.py): a host throttled by a GPU that lags is not slow itself."""
    blocked = sum(call.dur for call, _ in syncs.blocking(step))
    return max(step.dur - blocked, 0.0)


def step_times(trace: Trace) -> list[float]:
    """Each step's time: the longer of its CPU span and its GPU window, so a GPU-bound step is
    timed by its GPU and a host-bound one by its host. The one definition of a step's time
    (findings' denominator, compare's verdict, a generation's time per token)."""
    if not trace.gpu_all:
        return [s.dur for s in trace.steps]
    return [max(s.dur, p["window_us"]) for s, p in zip(trace.steps, split(trace), strict=True)]
