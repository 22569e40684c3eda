"""The profiled step's readings that --bench holds against its clocks and the traffic model: the
step's time while profiled, GPU busy (the union), each modelled kernel's profiled time matched
by class and order, the precision each GEMM's name says. `model` is the traffic model's kernels
(common.measuring.traffic.Kernel): only their `cls` is read here."""

from __future__ import annotations

import statistics

from tracereader.analyses import breakdown
from tracereader.trace import load as trace_reader

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


def matched_times(trace: trace_reader.Trace, model: list) -> tuple[list[float | None], list[str]]:
    """Each model kernel's profiled duration (median over steps), matched by class and order;
    a split-K GEMM's two kernels are one GEMM, timed together. A class whose count in a step
    differs from the model's is not matched: its kernels get None, and a line says why."""
    per_step, skipped = [], {}
    for step in trace.steps:
        done = operations(step)
        by_cls = {}
        for cls, classes in MATCH.items():
            items = [us for kind, us in done if kind in classes]
            wanted = sum(k.cls == cls for k in model)
            if len(items) == wanted:
                by_cls[cls] = iter(us / 1e6 for us in items)
            else:
                skipped.setdefault(
                    cls,
                    f"the trace has {len(items)} {cls}-like kernels per step where the model "
                    f"has {wanted}: per-kernel comparison skipped",
                )
        per_step.append([next(by_cls[k.cls]) if k.cls in by_cls else None for k in model])
    times = []
    for column in zip(*per_step, strict=True):
        known = [t for t in column if t is not None]
        times.append(statistics.median(known) if len(known) == len(column) else None)
    return times, list(skipped.values())


def kernel_times(trace: trace_reader.Trace, model: list) -> list[float] | str:
    """matched_times, all or nothing: every kernel's time, or why not."""
    times, skipped = matched_times(trace, model)
    return "; ".join(skipped) if skipped else times


def named_precisions(trace: trace_reader.Trace, model: list) -> list[str]:
    """Per model kernel, the precision the name of its GEMM in the trace says ("" where none
    does), matching the model's GEMMs to the last recorded step's in launch order; all "" when
    their counts differ."""
    out = [""] * len(model)
    if not trace.steps:
        return out
    gemms = [
        i.klass.facts.get("precision", "")
        for i in trace.steps[-1].gpu
        if i.klass.cls == "gemm" and not i.klass.joins_previous
    ]
    wanted = [n for n, k in enumerate(model) if k.cls == "gemm"]
    if len(gemms) != len(wanted):
        return out
    for n, named in zip(wanted, gemms, strict=True):
        out[n] = named
    return out


def gpu_busy_s(trace: trace_reader.Trace) -> float:
    """Median over the recorded steps of their GPU busy time: the union of their GPU work's
    intervals (streams that overlap count once), as explain reports it."""
    return statistics.median(breakdown.step(s)["gpu_busy_us"] for s in trace.steps) / 1e6
