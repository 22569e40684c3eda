"""`--bench`: time the forward without the profiler and hold it against the device's limits.

Prints the median forward time with its spread (on a GPU: after an L2 flush, queued, and the
host's dispatch time apart); on a GPU also achieved TFLOP/s and TB/s against
the measured ceilings, the traffic model's bytes and the floor they imply, each kernel's
profiled duration against its own floor, and how much the profiler inflated a step.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from common.cli import Run
from common.measuring import ceilings, timing, traffic
from common.measuring.traffic import Kernel
from tracereader import load as trace_reader

MATCH = {
    "gemm": ("gemm",),
    "elementwise": ("elementwise", "inductor", "triton"),
    "aten": ("aten",),  # other ATen kernels: reductions, softmax
    "attention": ("attention",),  # fused attention kernels
    "memcpy": ("memcpy",),
}


def profiled_step_s(trace: trace_reader.Trace) -> float:
    """Median step time while profiled: from the step's start to its last GPU item's end."""
    spans = []
    for step in trace.steps:
        end = max([step.ts + step.dur] + [i.ts + i.dur for i in step.gpu])
        spans.append((end - step.ts) / 1e6)
    return statistics.median(spans)


def operations(step: trace_reader.Step) -> list[tuple[str, float]]:
    """(class, microseconds) of each GPU operation of a step in launch order, memsets aside:
    a kernel that joins the one before it (a split-K reduce) adds its time to the last GEMM."""
    out: list[list] = []
    last_gemm = None
    for item in step.gpu:
        if item.kind == "memset":
            continue
        if item.klass.joins_previous and last_gemm is not None:
            out[last_gemm][1] += item.dur
            continue
        if item.klass.cls == "gemm":
            last_gemm = len(out)
        out.append([item.klass.cls, item.dur])
    return [(cls, us) for cls, us in out]


def kernel_times(trace: trace_reader.Trace, model: list[Kernel]) -> list[float] | str:
    """Each model kernel's profiled duration (median over steps), matched by class and order;
    a split-K GEMM's two kernels are one GEMM, timed together."""
    per_step = []
    for step in trace.steps:
        times = []
        done = operations(step)
        for cls, classes in MATCH.items():
            items = [us for kind, us in done if kind in classes]
            wanted = [k for k in model if k.cls == cls]
            if len(items) != len(wanted):
                return (
                    f"the trace has {len(items)} {cls}-like kernels per step where the model "
                    f"has {len(wanted)}: per-kernel comparison skipped"
                )
            times.append(iter(us / 1e6 for us in items))
        by_cls = dict(zip(MATCH, times, strict=True))
        per_step.append([next(by_cls[k.cls]) for k in model])
    return [statistics.median(col) for col in zip(*per_step, strict=True)]


def _us(seconds: float) -> str:
    """Microseconds, with enough digits for sub-microsecond floors."""
    us = seconds * 1e6
    return f"{us:.1f} us" if us >= 1 else f"{us:.3f} us"


def gpu_busy_s(trace: trace_reader.Trace) -> float:
    """Median over the recorded steps of the summed durations of their GPU work."""
    return statistics.median(step.gpu_time for step in trace.steps) / 1e6


def report(
    forward: Callable[[], object],
    *,
    run: Run,
    model: list[Kernel],
    trace: trace_reader.Trace,
    args: argparse.Namespace,
) -> timing.Timing:
    """`trace` is the run's own profiled trace, already read back by `profiling.look`."""
    measured = timing.time_fn(forward, on_gpu=run.on_gpu)
    flops, moved = traffic.total(model)
    recorded = trace
    profiled = profiled_step_s(recorded)
    t = measured.median_s
    print("bench (profiler detached):")
    if not run.on_gpu:
        print(f"  forward: {measured.us()}")
        print(
            f"  achieved: {flops / t / 1e9:.1f} GFLOP/s on the CPU (no ceilings are measured "
            "on a CPU, so no roofline claims)"
        )
        print(
            f"  profiler: a profiled step took {_us(profiled)}, {profiled / t:.1f}x the "
            "benched forward"
        )
        return measured
    queued = timing.time_gpu_queued(forward)
    host = timing.time_host(forward)
    busy = gpu_busy_s(recorded)
    print(f"  forward, one call (cold L2):  {measured.us()}")
    print(f"  forward, calls queued:        {queued.us()}")
    print(f"  host dispatch per call:       {host.us()}")
    print(f"  GPU busy per forward:         {_us(busy)} (sum of its kernels' profiled durations)")
    if queued.median_s > 1.2 * busy:
        print(
            f"  -> queued calls take {_us(queued.median_s)} each for {_us(busy)} of GPU work: "
            f"the CPU's dispatch ({_us(host.median_s)} per call: Python, ATen, Dynamo guards) "
            "is the bottleneck; do_bench's one-call number hides part of it behind its L2 flush"
        )
    ceil, cached = ceilings.get(
        ceilings.device_key(run.device),
        lambda: ceilings.measure(run.device),
        fresh=args.fresh_ceilings,
    )
    print(f"  ceilings: {ceil.describe()}{' [cached]' if cached else ''}")
    compute_s, memory_s = flops / ceil.flops_per_s, moved / ceil.bytes_per_s
    floor = max(compute_s, memory_s)
    print(
        f"  model: {flops / 1e9:.2f} GFLOP, {moved / 1e6:.1f} MB through HBM "
        f"(compute {_us(compute_s)}, memory {_us(memory_s)})"
    )
    print(
        f"  achieved (one call): {flops / t / 1e12:.1f} TFLOP/s "
        f"({flops / t / ceil.flops_per_s:.0%} of the matrix ceiling), "
        f"{moved / t / 1e12:.2f} TB/s ({moved / t / ceil.bytes_per_s:.0%} of the copy ceiling)"
    )
    bound = "compute" if compute_s >= memory_s else "memory"
    print(
        f"  floor: {_us(floor)} ({bound}-bound); one call / floor = {t / floor:.2f}, "
        f"queued / floor = {queued.median_s / floor:.2f}, GPU busy / floor = {busy / floor:.2f}"
    )
    times = kernel_times(recorded, model)
    if isinstance(times, str):
        print(f"  per kernel: {times}")
    else:
        print("  per kernel (profiled durations, median of the recorded steps):")
        for kernel, seconds in zip(model, times, strict=True):
            k_floor, by = kernel.floor_s(flops_per_s=ceil.flops_per_s, bytes_per_s=ceil.bytes_per_s)
            print(
                f"    {kernel.label:<26} {_us(seconds):>10}   floor {_us(k_floor):>10} "
                f"({by}, {kernel.bytes / 1e6:.1f} MB)   x{seconds / k_floor:.2f}"
            )
    print(
        f"  profiler: a profiled step took {_us(profiled)} (step start to last kernel end), "
        f"{profiled / t:.2f}x the one-call forward"
    )
    return measured
