"""`--bench`: time the forward without the profiler and hold it against the device's limits.

Prints the median forward time with its spread (on a GPU: after an L2 flush, queued, and the
host's dispatch time apart); on a GPU also achieved TFLOP/s and TB/s against the measured
ceilings (each kernel's FLOPs against the ceiling of the precision they ran in, the datasheet's
peak beside), the traffic model's bytes and the floor they imply, each kernel's profiled duration
against its own floor, and how much the profiler inflated a step. A share above 100% of a
measured ceiling is printed as what it is, a measurement problem.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from common.cli import Run
from common.measuring import ceilings, timing, traffic
from common.measuring.traffic import Kernel
from tracereader import (
    CUDA_CORES,
    TENSOR_CORES,
    TF32,
    Trace,
    gpu_busy_s,
    matched_times,
    named_precisions,
    profiled_step_s,
)
from tracereader import duration as reader_duration


def us(seconds: float) -> str:
    """A duration given in seconds, in the reader's one format (tracereader.units.duration)."""
    return reader_duration(seconds * 1e6)


def flop_count(n: float) -> str:
    return f"{n / 1e9:.2f} GFLOP" if n >= 1e8 else f"{n / 1e6:.3f} MFLOP"


def flop_rate(per_s: float) -> str:
    return f"{per_s / 1e12:.1f} TFLOP/s" if per_s >= 1e11 else f"{per_s / 1e9:.3f} GFLOP/s"


def ratio(r: float) -> str:
    """A ratio to three significant digits ("0.0x" was 0.004x), never in an exponent: 0.00412x,
    0.500x, 4.67x, 23.4x, and whole from 100x up: 232x."""
    if not math.isfinite(r) or r <= 0:
        return f"{r}x"
    if r >= 100:
        return f"{r:.0f}x"
    return f"{r:.{max(1, 2 - math.floor(math.log10(r)))}f}x"


def profiler_line(
    profiled_s: float, forward_s: float, *, on_gpu: bool, forward: str, span: str = ""
) -> str:
    """How much the profiler inflated a step: a profiled step against the benched `forward`.
    On a CPU a profiled step runs the very forward plus the profiler's work, so a benched
    forward longer than it is no ratio but noise (a busy machine timed one of the two: 02 read
    "a profiled step took 174.0 us, 0.0x the benched forward"): said so in words."""
    took = f"a profiled step took {us(profiled_s)}" + (f" ({span})" if span else "")
    if not on_gpu and profiled_s < forward_s:
        return (
            f"profiler: {took}, less than the {forward} ({us(forward_s)}), which it contains: "
            "the machine was busy while one of them was timed, so neither tells the profiler's "
            "cost; rerun on a quiet machine"
        )
    if forward_s <= 0:
        return f"profiler: {took}; the {forward} took no measurable time: no ratio"
    return f"profiler: {took}, {ratio(profiled_s / forward_s)} the {forward}"


# --- which ceiling a kernel is judged against -------------------------------------------------

NAMED = {TENSOR_CORES: "16-bit", TF32: "tf32", CUDA_CORES: "fp32"}


def precision(kernel: Kernel, run_dtype: str, *, named: str = "", tf32: bool) -> str | None:
    """The precision whose ceiling judges `kernel`'s FLOPs (None: it has none).

    `named`: what the name of the kernel that ran says it computed in (tracereader's GEMM
    precision, "" when it does not say): it is what ran, so it decides. Else the operands'
    width: 16-bit operands run on the Tensor cores at the run's dtype; float32 operands on the
    Tensor cores as tf32 where torch allows TF32 for matmuls (`tf32`:
    torch.backends.cuda.matmul.allow_tf32, which set_float32_matmul_precision("high") sets),
    else on the CUDA cores."""
    if not kernel.flops:
        return None
    sixteen = run_dtype if run_dtype in ("bf16", "fp16") else "bf16"
    by_name = NAMED.get(named)
    if by_name == "16-bit":
        return "tf32" if kernel.elt == 4 else sixteen  # float32 operands on Tensor cores: tf32
    if by_name:
        return by_name
    if kernel.elt == 4:
        return "tf32" if tf32 else "fp32"
    return sixteen


def needed(model: list[Kernel], precisions: list[str | None]) -> dict[str, list]:
    """The ceilings a run needs: memory, and each precision its FLOPs run in with the shapes
    of its GEMMs of that precision (measured beside the squares)."""
    out: dict[str, list] = {ceilings.MEMORY: []}
    for kernel, p in zip(model, precisions, strict=True):
        if p:
            out.setdefault(p, [])
            if kernel.shape:
                out[p].append(kernel.shape)
    return out


NOT_A_CEILING = "the ceiling is not a ceiling; re-measure with --fresh-ceilings"
# A ceiling is itself a timing: the same GEMM's profiled rate moved by up to 1% between runs on
# an H100 (2026-11-24: fp32 8192x4096x4096 at 51.3 TFLOP/s in a lesson, 51.0 as the ceiling's
# best probe minutes before). Within this much above the ceiling a kernel is at the ceiling.
SPREAD = 0.02
ABOVE = f"above the measured ceiling: {NOT_A_CEILING}"


def _beyond_memory(nbytes: float, l2_bytes: int | None) -> str:
    """Why bytes moved faster than the copy ceiling: the L2 where they fit in it."""
    if l2_bytes and nbytes <= l2_bytes:
        return (
            f"its {nbytes / 1e6:.1f} MB fit in the {l2_bytes / 1e6:.0f} MB L2, so part of it "
            "never went to HBM"
        )
    return ABOVE


def roofline(
    model: list[Kernel],
    precisions: list[str | None],
    seconds: float,
    rates: dict[str, float],
    bytes_per_s: float,
    *,
    how: str,
    l2_bytes: int | None = None,
) -> tuple[list[str], float, float]:
    """The model's FLOPs and bytes against the ceilings, each kernel's FLOPs at its own
    precision's rate, and what `seconds` achieved: (lines, compute s, memory s). A share above
    100% of a ceiling is said to be a measurement problem, never printed as a speed."""
    flops, moved = traffic.total(model)
    compute_s = sum(k.flops / rates[p] for k, p in zip(model, precisions, strict=True) if p)
    memory_s = moved / bytes_per_s
    used = [p for p in ceilings.PRECISIONS if p in precisions]
    matrix = f"the {used[0]} ceiling" if len(used) == 1 else f"the {'/'.join(used)} ceilings"
    if used:
        at = "its ceiling" if len(used) == 1 else "their ceilings"
        work = f"{flop_count(flops)} ({'/'.join(used)}), {moved / 1e6:.1f} MB through HBM "
        work += f"(compute {us(compute_s)} at {at}, memory {us(memory_s)})"
        achieved = f"{flop_rate(flops / seconds)} ({compute_s / seconds:.0%} of {matrix}), "
    else:
        work = f"no FLOPs, {moved / 1e6:.1f} MB through HBM (memory {us(memory_s)})"
        achieved = ""
    lines = [f"model: {work}"]
    achieved = f"achieved ({how}): {achieved}{moved / seconds / 1e12:.2f} TB/s "
    achieved += f"({memory_s / seconds:.0%} of the copy ceiling)"
    lines.append(achieved)
    if compute_s > seconds * (1 + SPREAD):
        lines.append(f"  -> {compute_s / seconds:.0%} of {matrix} is {ABOVE}")
    elif compute_s > seconds:
        lines.append(f"  -> at {matrix}, within its {SPREAD:.0%} run-to-run spread")
    if memory_s > seconds:
        lines.append(
            f"  -> {memory_s / seconds:.0%} of the copy ceiling: {_beyond_memory(moved, l2_bytes)}"
        )
    return lines, compute_s, memory_s


def judge(
    model: list[Kernel],
    named: list[str],
    *,
    run_dtype: str,
    tf32: bool,
    device_name: str,
    torch_version: str,
    measure_fn: Callable[[str, str], float | None],
    fresh: bool = False,
    path: Path | None = None,
) -> tuple[list[str | None], dict[str, ceilings.Ceiling] | None, list[str]]:
    """Each kernel's precision (`named`: what the trace's kernel names say, see precision),
    the ceilings those need, from the cache or `measure_fn` (None if one could not be
    measured), and the lines that say them, the datasheet's peak beside each."""
    precisions = [
        precision(k, run_dtype, named=n, tf32=tf32) for k, n in zip(model, named, strict=True)
    ]
    wanted = needed(model, precisions)
    ceil = ceilings.get(device_name, torch_version, wanted, measure_fn, path=path, fresh=fresh)
    lines = [f"ceilings: measured on {device_name}, torch {torch_version}; datasheet beside:"]
    lines += [f"  {c.describe(device_name)}" for c in ceil.values()]
    missing = [w for w in wanted if w not in ceil]
    if missing:
        lines.append(f"no roofline: the {'/'.join(missing)} ceiling could not be measured")
        return precisions, None, lines
    return precisions, ceil, lines


def against_ceilings(
    run: Run, model: list[Kernel], named: list[str] | None = None, *, fresh: bool
) -> tuple[list[str | None], dict[str, ceilings.Ceiling] | None, list[str]]:
    """judge() on this run's GPU, with torch's TF32 setting, measuring what is not cached."""
    import torch

    return judge(
        model,
        named or [""] * len(model),
        run_dtype=run.dtype_name,
        tf32=torch.backends.cuda.matmul.allow_tf32,
        device_name=torch.cuda.get_device_name(run.device),
        torch_version=torch.__version__,
        measure_fn=lambda what, probe: ceilings.measure(run.device, what, probe),
        fresh=fresh,
    )


def floor_rates(
    model: list[Kernel],
    precisions: list[str | None],
    times: list[float | None],
    ceil: dict[str, ceilings.Ceiling],
) -> tuple[dict[str, float], list[str]]:
    """The FLOP rate per precision the floors use: the measured ceiling, or the rate of a
    profiled kernel that ran faster than it (no floor may be beaten by a kernel that was
    measured), said as a measurement problem: (rates, lines)."""
    rates = {p: ceil[p].per_s for p in set(precisions) if p}
    lines = []
    for kernel, p, seconds in zip(model, precisions, times, strict=True):
        if not p or not seconds or seconds <= 0:
            continue
        rate = kernel.flops / seconds
        if rate > rates[p]:
            over = rate / ceil[p].per_s - 1
            if over <= SPREAD:
                lines.append(
                    f"{kernel.label} ran at {flop_rate(rate)} (profiled), at the measured {p} "
                    f"ceiling (+{over:.1%}, within its {SPREAD:.0%} run-to-run spread): the "
                    f"floors below take its rate as {p}'s"
                )
            else:
                lines.append(
                    f"{kernel.label} ran at {flop_rate(rate)} (profiled), "
                    f"{rate / ceil[p].per_s:.0%} of the measured {p} ceiling: {NOT_A_CEILING}. "
                    f"The floors below take its rate as {p}'s"
                )
            rates[p] = rate
    return rates, lines


def kernel_line(
    kernel: Kernel,
    precision: str | None,
    seconds: float,
    rates: dict[str, float],
    bytes_per_s: float,
    l2_bytes: int | None = None,
) -> str:
    """One kernel's profiled time against its floor at its own precision's rate; faster than
    the floor is a measurement problem (or the L2 at work), never a speed."""
    floor, by = kernel.floor_s(
        flops_per_s=rates[precision] if precision else math.inf, bytes_per_s=bytes_per_s
    )
    by = precision if by == "matrix" else by
    line = f"{kernel.label:<26} {us(seconds):>10}   floor {us(floor):>10} "
    line += f"({by}, {kernel.bytes / 1e6:.1f} MB)"
    if floor <= 0:
        return line + "   (nothing to move or compute: no ratio)"
    ratio = seconds / floor
    line += f"   x{ratio:.2f}"
    if ratio < 1 - 1e-9:
        line += f": {_beyond_memory(kernel.bytes, l2_bytes) if by == 'memory' else ABOVE}"
    return line


def report(
    forward: Callable[[], object],
    *,
    run: Run,
    model: list[Kernel],
    trace: Trace,
    args: argparse.Namespace,
) -> timing.Timing:
    """`trace` is the run's own profiled trace, already read back by `profiling.look`."""
    timing.warn_if_cpu_busy(run.on_gpu)  # said once: here if the table's warning was not
    measured = timing.time_fn(forward, on_gpu=run.on_gpu)
    flops, _ = traffic.total(model)
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
        print(f"  {profiler_line(profiled, t, on_gpu=False, forward='benched forward')}")
        return measured
    queued = timing.time_gpu_queued(forward)
    host = timing.time_host(forward)
    busy = gpu_busy_s(recorded)
    print(f"  forward, one call (cold L2):  {measured.us()}")
    print(f"  forward, calls queued:        {queued.us()}")
    print(f"  host dispatch per call:       {host.us()}")
    print(
        f"  GPU busy per forward:         {us(busy)} (union of its GPU work's profiled intervals)"
    )
    if queued.median_s > 1.2 * busy:
        print(
            f"  -> queued calls take {us(queued.median_s)} each for {us(busy)} of GPU work: "
            f"the CPU's dispatch ({us(host.median_s)} per call: Python, ATen, Dynamo guards) "
            "is the bottleneck; do_bench's one-call number hides part of it behind its L2 flush"
        )
    import torch

    l2_bytes = getattr(torch.cuda.get_device_properties(run.device), "L2_cache_size", None)
    named = named_precisions(recorded, model)
    precisions, ceil, lines = against_ceilings(run, model, named, fresh=args.fresh_ceilings)
    for line in lines:
        print(f"  {line}")
    if ceil is None:
        print(f"  {profiler_line(profiled, t, on_gpu=True, forward='forward')}")
        return measured
    times, skipped = matched_times(recorded, model)
    rates, raised = floor_rates(model, precisions, times, ceil)
    for line in raised:
        print(f"  {line}")
    bytes_per_s = ceil[ceilings.MEMORY].per_s
    lines, compute_s, memory_s = roofline(
        model, precisions, t, rates, bytes_per_s, how="one call", l2_bytes=l2_bytes
    )
    for line in lines:
        print(f"  {line}")
    floor = max(compute_s, memory_s)
    bound = "compute" if compute_s >= memory_s else "memory"
    print(
        f"  floor: {us(floor)} ({bound}-bound); one call / floor = {t / floor:.2f}, "
        f"queued / floor = {queued.median_s / floor:.2f}, GPU busy / floor = {busy / floor:.2f}"
    )
    if any(t is not None for t in times):
        print("  per kernel (profiled durations, median of the recorded steps):")
        for kernel, p, seconds in zip(model, precisions, times, strict=True):
            if seconds is not None:
                print(f"    {kernel_line(kernel, p, seconds, rates, bytes_per_s, l2_bytes)}")
    for line in skipped:
        print(f"  per kernel: {line}")
    span = "step start to last kernel end"
    print(f"  {profiler_line(profiled, t, on_gpu=True, forward='one-call forward', span=span)}")
    return measured
