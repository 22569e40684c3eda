"""Time a function without the profiler: warm up, repeat, report the median and the spread.

Three GPU numbers, because a forward's time has a GPU part and a host part:
- `time_gpu`, Triton's `do_bench`: each timed call is queued behind a write over a 256 MB
  buffer (an L2 flush) with a CUDA event on each side of it; everything is queued first and
  synchronized once. A sample is the GPU time between its two events: the call's kernels, plus
  any wait for the CPU to issue them once the flush is done. It is a cold-L2 latency that
  includes the host's dispatch only where that outlasts the flush, so it moves with the host.
- `time_gpu_queued`: CUDA events around many calls issued back to back, caches warm: the
  per-call throughput of a loop, the larger of GPU time and host dispatch time.
- `time_host`: the host clock around calls issued without waiting: what the CPU spends to
  dispatch one call (Python, ATen, Dynamo guards, launches).
On a CPU the do_bench protocol is repeated with a host clock.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

QUANTILES = (0.5, 0.2, 0.8)
_said_busy = False


def warn_if_cpu_busy(on_gpu: bool) -> bool:
    """Say once per process, before a CPU run's timings, when the machine is busier than its
    cores: with more runnable processes than cores (the 1-minute load average above the CPU
    count), the run waits for a core at any moment, and its profiled steps and --bench times
    swing 100x and more (02's step: 97 us on a quiet machine, 16-32 ms on a loaded one).
    On a GPU run the kernels' times hold; only its host-side numbers would move.
    Returns whether it said so."""
    global _said_busy
    if on_gpu or _said_busy:
        return False
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # a platform without a load average
        return False
    cores = os.cpu_count() or 1
    if load <= cores:
        return False
    _said_busy = True
    print(
        f"note: this machine is busy (load average {load:.1f} over the last minute, "
        f"{cores} CPU cores): this run waited for a core among other processes, so its CPU "
        "timings cannot be trusted; rerun when the load is below the core count"
    )
    return True


@dataclass(frozen=True)
class Timing:
    median_s: float
    p20_s: float
    p80_s: float
    runs: int
    how: str
    best_s: float | None = None  # the fastest sample

    def us(self) -> str:
        return (
            f"{self.median_s * 1e6:.1f} us (20th-80th percentile "
            f"{self.p20_s * 1e6:.1f}-{self.p80_s * 1e6:.1f}, {self.how})"
        )


def summarize(samples_s: list[float], how: str) -> Timing:
    """Median and 20th/80th percentiles (linear interpolation, as numpy's default)."""
    if not samples_s:
        raise ValueError("no samples to summarize")
    ordered = sorted(samples_s)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return Timing(
        statistics.median(ordered), quantile(0.2), quantile(0.8), len(ordered), how, ordered[0]
    )


def time_cpu(
    fn: Callable[[], object],
    *,
    warmup_s: float = 0.05,
    budget_s: float = 0.5,
    min_runs: int = 10,
    max_runs: int = 10_000,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Warm up for `warmup_s`, then time single calls until `budget_s` and `min_runs` are met."""
    fn()  # at least one untimed call: lazy initialisation stays out of the samples
    start = clock()
    while clock() - start < warmup_s:
        fn()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < max_runs and (len(samples) < min_runs or spent < budget_s):
        t0 = clock()
        fn()
        elapsed = clock() - t0
        samples.append(elapsed)
        spent += elapsed
    return summarize(samples, f"{len(samples)} runs, host clock")


def time_gpu(
    fn: Callable[[], object], *, warmup_ms: int = 25, rep_ms: int = 100, min_runs: int = 10
) -> Timing:
    """do_bench: each call behind an L2 flush, CUDA events around it (see the module's doc).
    do_bench repeats a call for `rep_ms`, so a call longer than rep_ms / min_runs gets a
    longer budget: at least `min_runs` samples, or the median is one run's time."""
    import torch
    from triton.testing import do_bench

    fn()  # a first call outside the estimate: lazy initialisation
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    estimate_ms = start.elapsed_time(end)
    rep_ms = max(rep_ms, round(1.2 * min_runs * estimate_ms))
    warmup_ms = max(warmup_ms, round(estimate_ms))
    median, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=list(QUANTILES))
    runs = max(1, int(rep_ms / max(estimate_ms, 1e-3)))  # about do_bench's own count
    how = f"do_bench: each call after an L2 flush, {rep_ms} ms"
    return Timing(median / 1e3, p20 / 1e3, p80 / 1e3, runs, how)


def time_gpu_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    rounds: int = 5,
    timer: Callable[[Callable[[], object]], Timing] | None = None,
) -> dict[str, Timing]:
    """time_gpu for each function in turn, `rounds` times over, the order reversed each round:
    the median of each one's do_bench medians. Compared one after the other, two timings see
    different power states of the GPU (its clocks fall as it nears its power limit under dense
    GEMMs); interleaved, each round puts them in the same one."""
    if rounds < 1 or not fns:
        raise ValueError("time_gpu_interleaved needs functions and at least one round")
    timer = timer or time_gpu  # another timer where no GPU is (the tests)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for _ in range(rounds):
        for name, fn in order:
            samples[name].append(timer(fn).median_s)
        order.reverse()  # neither always first: under a drifting clock each leads in turn
    how = f"median of {rounds} do_bench medians, interleaved"
    return {name: summarize(values, how) for name, values in samples.items()}


def time_host(fn: Callable[[], object], *, calls: int = 20, repeats: int = 15) -> Timing:
    """Host time to issue one call: `calls` calls back to back, timed on the host clock
    without waiting for the GPU, after a synchronize so the launch queue starts empty.

    A few dozen calls stay far below the launch queue's depth, so the CPU never blocks on
    the GPU here: this is dispatch cost alone, whatever the GPU time.
    """
    import torch

    fn()
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls)
    torch.cuda.synchronize()
    return summarize(samples, f"host clock over {calls} calls issued back to back, x{repeats}")


def time_gpu_queued(fn: Callable[[], object], *, calls: int = 50, repeats: int = 7) -> Timing:
    """Per-call time with `calls` calls queued back to back between two CUDA events.

    Unlike do_bench the calls are not separated by L2 flushes, so the CPU may run ahead of
    the GPU and the caches stay warm: this is the throughput of a loop, the larger of the GPU
    time and the host's dispatch time per call.
    """
    import torch

    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / calls)
    return summarize(samples, f"CUDA events around {calls} queued calls, x{repeats}")


def time_fn(fn: Callable[[], object], *, on_gpu: bool) -> Timing:
    return time_gpu(fn) if on_gpu else time_cpu(fn)


def time_phases(
    step: Callable[[Callable[[str], None]], object],
    *,
    on_gpu: bool,
    steps: int = 20,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Each phase of a step, timed without the profiler: `step(mark)` calls `mark(name)` as
    each phase ends; a phase's time runs from the previous mark (or the step's start) to its
    own. On a GPU the marks are CUDA events, so a phase is the GPU's time between them (its
    kernels, and any wait for the host to issue them); on a CPU, the host clock. The steps run
    back to back, caches warm, one synchronize after each."""
    import torch

    def now():
        if not on_gpu:
            return clock()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(a, b) -> float:
        return a.elapsed_time(b) / 1e3 if on_gpu else b - a

    step(lambda name: None)  # untimed: lazy initialisation stays out of the samples
    samples: dict[str, list[float]] = {}
    for _ in range(steps):
        marks = [("", now())]
        step(lambda name, marks=marks: marks.append((name, now())))
        if on_gpu:
            torch.cuda.synchronize()
        for (_, start), (name, end) in zip(marks, marks[1:], strict=False):
            samples.setdefault(name, []).append(seconds(start, end))
    how = "CUDA events between phases" if on_gpu else "host clock between phases"
    return {name: summarize(s, f"{steps} steps, {how}") for name, s in samples.items()}


def gpu_work(events) -> list:
    """The profiler's GPU events that are work (kernels, memcpys, memsets): a record_function's
    GPU-side span is an event on the device too, and would count its kernels a second time."""
    import torch

    return [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not getattr(e, "is_user_annotation", False)
    ]


def time_gpu_profiled(fn: Callable[[], object], *, calls: int = 20) -> Timing:
    """Each call's GPU time as the profiler measures kernels: the summed durations of the GPU
    work it launched, idle gaps between calls excluded. The measure a ceiling must be taken in
    to bound the profiled kernels it judges: on an H100 a bf16 8192x4096x4096 GEMM ran at 808
    TFLOP/s profiled against 784 with calls queued between CUDA events (2026-11-24)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    work = sorted(gpu_work(prof.events()), key=lambda e: e.time_range.start)
    per_call, left = divmod(len(work), calls)
    if not per_call or left:
        raise RuntimeError(f"{len(work)} GPU events for {calls} calls: not one group per call")
    samples = [
        sum(e.time_range.elapsed_us() for e in work[i : i + per_call]) / 1e6
        for i in range(0, len(work), per_call)
    ]
    return summarize(samples, f"GPU time of {calls} profiled calls")


# Calls per timing of a rank's step, and repeats of that on a GPU: the same on every rank.
CALLS, GPU_REPEATS = 20, 7


def time_fixed(
    fn: Callable[[], object], run, *, calls: int = CALLS, repeats: int = GPU_REPEATS
) -> Timing:
    """A fixed number of calls, the same on every rank of a run (`run`: common.cli.Run): on a
    GPU `calls` queued between two CUDA events, `repeats` times; on a CPU `calls` calls on the
    host clock."""
    if run.on_gpu:
        return time_gpu_queued(fn, calls=calls, repeats=repeats)
    return time_cpu(fn, warmup_s=0.0, budget_s=0.0, min_runs=calls, max_runs=calls)
