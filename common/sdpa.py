"""04_c's plumbing around SDPA: a refused backend's reason in one line, and the table that
compares the backends after `--backend all`.

SDPA gives its reasons for refusing a backend as warnings, then raises a generic RuntimeError;
try_once turns that into CannotRun with the pinned backend's own reason.
"""

from __future__ import annotations

import re
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from common import profiling
from common.check import MismatchError
from common.cli import Run, UsageError, one_line
from common.outputs import Outputs
from tracereader.analyses import breakdown
from tracereader.trace.model import ancestors

# What SDPA's CPU op says about the backend that ran (auto's choice), by op-name prefix.
DISPATCHED = {
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
}
# How SDPA's "<kernel> not used because:" warnings name each backend.
HEADINGS = {"efficient": "memory efficient", "flash": "flash attention", "cudnn": "cudnn"}


class CannotRun(Exception):
    """The pinned backend has no kernel for this device, dtype or shape."""


def try_once(backend: str, run: Run, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """One call under the pin (the caller holds it): the output, or CannotRun with SDPA's
    reason."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            y = call()
        except RuntimeError as err:
            text = str(err)
            if "No available kernel" not in text and "No viable backend" not in text:
                raise
            raise CannotRun(why_not(backend, run, caught, err)) from None
    for w in caught:  # a backend that ran may still have something to say
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return y


def why_not(backend: str, run: Run, caught, err: RuntimeError) -> str:
    """SDPA's reason in one line. On a GPU, a refused call warns "<kernel> not used because:"
    for each fused kernel in turn, each heading followed by its reasons; the pinned backend's
    reasons are the ones that matter (the others only say they were switched off)."""
    if not run.on_gpu:
        return f"{backend} has no CPU kernel (on a CPU, SDPA runs math and flash)"
    lines = [_warning_text(w.message) for w in caught]
    reasons, inside = [], False
    for line in lines:
        if line.lower().endswith("not used because:"):
            inside = line.lower().startswith(HEADINGS[backend])
        elif inside and line:
            reasons.append(line)
    if not reasons:  # an SDPA that words its warnings otherwise: its first specific one
        reasons = [x for x in lines if x and not x.lower().endswith("because:")][:1]
    return _short("; ".join(reasons) if reasons else one_line(err))


def _warning_text(message) -> str:
    """A warning's first line without the "(Triggered internally at file:line.)" that
    C++ warnings carry."""
    text = str(message).strip()
    first = text.splitlines()[0] if text else ""
    return re.sub(r"\s*\(Triggered internally at [^)]*\)\s*$", "", first).strip()


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."


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


def comparison(rows: list[Row], title: str, *, on_gpu: bool) -> str:
    """The summary table, one row per backend; a CPU run keeps only the CPU time."""
    columns = [
        ("backend", lambda r: r.backend),
        ("kernels", lambda r: r.kernels),
        ("GPU us", lambda r: r.gpu_us),
        ("CPU us", lambda r: r.cpu_us),
        ("occupancy", lambda r: r.occupancy + ("*" if r.occupancy_unmeasured else "")),
        ("main kernel", lambda r: r.main_kernel),
        ("status", lambda r: r.status),
    ]
    if not on_gpu:
        columns = [c for c in columns if c[0] in ("backend", "CPU us", "status")]
    cells = [[head for head, _ in columns]] + [[cell(r) for _, cell in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [title]
    for line in cells:
        lines.append(
            "  " + "  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
        )
    if any(r.occupancy_unmeasured for r in rows):
        lines.append(
            "  * launched with cuLaunchKernelEx(C): the profiler reports no achieved occupancy for "
            "such launches; estimate it from the kernel's registers, shared memory and block size"
        )
    if not on_gpu:
        lines.append("  (a CPU run: kernels, GPU time and occupancy need a CUDA GPU)")
    return "\n".join(lines)


@dataclass
class Result:
    """What profiling one backend left: its table row, its outputs (None: nothing written)."""

    row: Row
    out: Outputs | None = None
    as_expected: bool = True
    wrong: bool = False


def attempt(backend: str, profile_one: Callable[[], Result]) -> Result:
    """One backend of `--backend all`: a backend that cannot run, or computes the wrong thing,
    costs its row, not the run."""
    try:
        return profile_one()
    except CannotRun as why:
        print(f"{backend}: cannot run here: {why}")
        return Result(Row(backend, f"cannot run: {why}"))
    except MismatchError as err:
        return Result(Row(backend, f"WRONG OUTPUT: {err}"), wrong=True)


def finish_all(results: list[Result], args, run: Run, shape: str) -> int:
    """After `--backend all`: the comparison table, then the run's exit code (1 when a backend
    computed the wrong thing; bad input when none could run)."""
    where = torch.cuda.get_device_name(run.device) if run.on_gpu else "CPU"
    title = (
        f"backends compared ({shape}, {run.dtype_name}, {where}; "
        f"per forward, median of the {args.active} recorded steps):"
    )
    print("\n" + comparison([r.row for r in results], title, on_gpu=run.on_gpu))
    written = [r for r in results if r.out is not None]
    if not written:
        raise UsageError("no SDPA backend could run here")
    code = profiling.finish(args, written[-1].out, all(r.as_expected for r in results))
    return 1 if any(r.wrong for r in results) else code


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
