"""`--bench`: time the forward without the profiler and hold it against the device's limits.

Prints the median forward time with its spread; on a GPU also achieved TFLOP/s and TB/s against
the measured ceilings, the traffic model's bytes and the floor they imply, each kernel's
profiled duration against its own floor, and how much the profiler inflated a step.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path

from common import ceilings, timing, trace_reader, traffic
from common.cli import Run
from common.traffic import Kernel

MATCH = {
    "gemm": ("gemm",),
    "elementwise": ("elementwise", "inductor", "triton"),
    "memcpy": ("memcpy",),
}


def profiled_step_s(trace: trace_reader.Trace) -> float:
    """Median step time while profiled: from the step's start to its last GPU item's end."""
    spans = []
    for step in trace.steps:
        end = max([step.ts + step.dur] + [i.ts + i.dur for i in step.gpu])
        spans.append((end - step.ts) / 1e6)
    return statistics.median(spans)


def kernel_times(trace: trace_reader.Trace, model: list[Kernel]) -> list[float] | str:
    """Each model kernel's profiled duration (median over steps), matched by class and order."""
    per_step = []
    for step in trace.steps:
        times = []
        for cls, classes in MATCH.items():
            items = [i for i in step.gpu if i.klass.cls in classes and i.kind != "memset"]
            wanted = [k for k in model if k.cls == cls]
            if len(items) != len(wanted):
                return (
                    f"the trace has {len(items)} {cls}-like kernels per step where the model "
                    f"has {len(wanted)}: per-kernel comparison skipped"
                )
            times.append(iter(i.dur / 1e6 for i in items))
        by_cls = dict(zip(MATCH, times, strict=True))
        per_step.append([next(by_cls[k.cls]) for k in model])
    return [statistics.median(col) for col in zip(*per_step, strict=True)]


def report(
    forward: Callable[[], object],
    *,
    run: Run,
    model: list[Kernel],
    trace: Path,
    args: argparse.Namespace,
) -> timing.Timing:
    measured = timing.time_fn(forward, on_gpu=run.on_gpu)
    flops, moved = traffic.total(model)
    profiled = profiled_step_s(trace_reader.load(trace))
    print("bench (profiler detached):")
    print(f"  forward: {measured.us()}")
    t = measured.median_s
    if not run.on_gpu:
        print(
            f"  achieved: {flops / t / 1e9:.1f} GFLOP/s on the CPU (no ceilings are measured on "
            "a CPU, so no roofline claims)"
        )
        print(
            f"  profiler: a profiled step took {profiled * 1e6:.1f} us, "
            f"{profiled / t:.1f}x the benched forward"
        )
        return measured
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
        f"(compute {compute_s * 1e6:.1f} us, memory {memory_s * 1e6:.1f} us)"
    )
    print(
        f"  achieved: {flops / t / 1e12:.1f} TFLOP/s ({flops / t / ceil.flops_per_s:.0%} of the "
        f"matrix ceiling), {moved / t / 1e12:.2f} TB/s ({moved / t / ceil.bytes_per_s:.0%} of "
        "the copy ceiling)"
    )
    bound = "compute" if compute_s >= memory_s else "memory"
    print(f"  floor: {floor * 1e6:.1f} us ({bound}-bound); measured / floor = {t / floor:.2f}")
    times = kernel_times(trace_reader.load(trace), model)
    if isinstance(times, str):
        print(f"  per kernel: {times}")
    else:
        print("  per kernel (profiled durations, median of the recorded steps):")
        for kernel, seconds in zip(model, times, strict=True):
            k_floor, by = kernel.floor_s(flops_per_s=ceil.flops_per_s, bytes_per_s=ceil.bytes_per_s)
            print(
                f"    {kernel.label:<26} {seconds * 1e6:8.1f} us   floor {k_floor * 1e6:7.1f} us "
                f"({by}, {kernel.bytes / 1e6:.1f} MB)   x{seconds / k_floor:.2f}"
            )
    print(
        f"  profiler: a profiled step took {profiled * 1e6:.1f} us (step start to last kernel "
        f"end), {profiled / t:.2f}x the benched forward"
    )
    return measured
