"""04_c's readings of an SDPA backend's trace: a row of the comparison table (kernels, GPU busy,
CPU time, occupancy of the main kernel, the backend SDPA dispatched to) and where a forward's
host time goes."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tracereader.analyses import breakdown
from tracereader.trace.model import ancestors

# What SDPA's CPU op says about the backend that ran (auto's choice), by op-name prefix.
DISPATCHED = {
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
}


@dataclass
class Row:
    """One backend's line of the comparison table."""

    backend: str
    status: str
    kernels: str = "-"
    gpu_us: str = "-"
    cpu_us: str = "-"
    occupancy: str = "-"
    main_kernel: str = "-"
    occupancy_unmeasured: bool = False


def summarize(backend: str, trace, annotation: str) -> Row:
    """Per forward, medians over the recorded steps: the annotated region's CPU time; on a
    GPU also the step's kernels (memcpys and memsets counted apart), the time the GPU was busy
    with them (the union of their intervals) and the longest kernel's estimated achieved
    occupancy (from the kernel event's args, where the reader provides them)."""
    cpu = [op.dur for s in trace.steps for op in s.cpu_ops if op.name == annotation]
    ops = {n for s in trace.steps for n in s.op_names()}
    ran = [v for prefix, v in DISPATCHED.items() if any(n.startswith(prefix) for n in ops)]
    status = f"ran (SDPA chose {ran[0]})" if backend == "auto" and ran else "ran"
    row = Row(backend, status, cpu_us=f"{statistics.median(cpu):.1f}" if cpu else "-")
    if trace.device is None or not trace.steps:
        return row

    def per_step(kind: str) -> str:
        return "/".join(
            str(n) for n in sorted({sum(i.kind == kind for i in s.gpu) for s in trace.steps})
        )

    row.kernels = per_step("kernel") + "".join(
        f" +{per_step(kind)} {kind}" for kind in ("memcpy", "memset") if per_step(kind) != "0"
    )
    row.gpu_us = f"{statistics.median(breakdown.step(s)['gpu_busy_us'] for s in trace.steps):.1f}"
    last = [i for i in trace.steps[-1].gpu if i.kind == "kernel"]
    if last:
        main = max(last, key=lambda i: i.dur)
        name = main.name.removeprefix("void ")
        row.main_kernel = name if len(name) <= 34 else name[:31] + "..."
        occupancy = (getattr(main, "args", None) or {}).get("est. achieved occupancy %")
        if isinstance(occupancy, int | float):
            row.occupancy = f"{occupancy:g}%"
            # the driver's cuLaunchKernelEx and the runtime's cudaLaunchKernelExC (CuTe DSL's)
            row.occupancy_unmeasured = occupancy == 0 and "LaunchKernelEx" in (main.runtime or "")
    return row


def host_time(trace, annotation: str, top: int = 6) -> str:
    """Where one forward's CPU time goes, inside the annotated region: each op's self time
    (its duration less the ops and runtime calls nested in it) and each runtime call's,
    summed by name per step, means over the recorded steps (means, so that the parts add up
    to the whole); the largest `top` as lines."""
    per_step: list[dict[str, float]] = []
    totals = []

    def inside(op) -> bool:
        return any(a.name == annotation for a in ancestors(op))

    for step in trace.steps:
        regions = [op for op in step.cpu_ops if op.name == annotation]
        if not regions:
            continue
        spent: dict[str, float] = {}
        launched: dict[object, float] = {}  # op -> its own runtime calls' time
        for call in step.runtime:
            if call.launcher is not None and inside(call.launcher):
                spent[call.name] = spent.get(call.name, 0.0) + call.dur
                launched[call.launcher] = launched.get(call.launcher, 0.0) + call.dur
        for op in step.cpu_ops:
            if inside(op):
                own = op.dur - op.inner - launched.get(op, 0.0)
                # the region's own time: Python between the ops (an interface, a wrapper)
                name = "(no op: Python in the region)" if op.name == annotation else op.name
                spent[name] = spent.get(name, 0.0) + max(own, 0.0)
        per_step.append(spent)
        totals.append(sum(op.dur for op in regions))
    if not per_step:
        return f"host time: no {annotation} region recorded"
    names = {name for spent in per_step for name in spent}
    means = {n: statistics.fmean(s.get(n, 0.0) for s in per_step) for n in names}
    lines = [
        f"host time per forward: {statistics.fmean(totals):.1f} us in {annotation} "
        f"(mean of {len(per_step)} steps), of it"
    ]
    for name in sorted(means, key=means.__getitem__, reverse=True)[:top]:
        lines.append(f"  {means[name]:8.1f} us  {name}")
    return "\n".join(lines)
