"""The profiling loop every script shares: warm up, record a wait/warmup/active schedule, write.

Why a schedule: the first steps pay for lazy initialisation (cuBLAS handles, workspace
allocation, module loading, compilation) and the profiler's own start-up. `wait` steps run
untraced, `warmup` steps are traced and thrown away, and only `active` steps reach the file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common import expectations, findings, share, trace_reader
from common.cli import Run
from common.expectations import Expect
from common.outputs import Outputs, atomic

WARMUP_CALLS = 3  # untimed calls before profiling, as Part 1's --warmup


def synchronize(run: Run) -> None:
    if run.on_gpu:
        torch.cuda.synchronize(run.device)


def warm_up(
    step: Callable[[], torch.Tensor],
    run: Run,
    *,
    calls: int = WARMUP_CALLS,
    compiling: bool = False,
) -> torch.Tensor:
    """Run the step a few times so lazy start-up costs stay out of the trace.

    Under torch.compile the first call compiles; its time is printed apart because it is
    paid once per shape, not per step.
    """
    start = time.perf_counter()
    out = step()
    synchronize(run)
    if compiling:
        print(
            f"compile: first call took {time.perf_counter() - start:.2f} s "
            "(Dynamo tracing + Inductor codegen, paid once per shape)"
        )
    for _ in range(calls - 1):
        out = step()
    synchronize(run)
    return out


def quiet_kineto(run: Run) -> None:
    """Kineto logs profiler start/stop and a failed GPU probe on a CPU-only machine: noise on a
    laptop console. The level is read when the profiler starts; a user's setting wins."""
    if not run.on_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")


def record(
    step: Callable[[], object], *, annotation: str, run: Run, args: argparse.Namespace
) -> profile:
    """Profile `wait + warmup + active` steps, each wrapped in `record_function(annotation)`."""
    activities = [ProfilerActivity.CPU]
    if run.on_gpu:
        activities.append(ProfilerActivity.CUDA)
    quiet_kineto(run)
    steps = args.wait + args.warmup_steps + args.active
    with profile(
        activities=activities,
        schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
        record_shapes=True,  # the table's input dims tell which GEMM is which
        acc_events=True,  # one cycle only; also keeps torch from warning that it clears events
    ) as prof:
        for _ in range(steps):
            with record_function(annotation):
                step()
            prof.step()
    return prof


def table(prof: profile, run: Run, rows: int) -> str:
    sort_by = "device_time_total" if run.on_gpu else "cpu_time_total"
    return prof.key_averages().table(sort_by=sort_by, row_limit=rows)


def write(prof: profile, outputs: Outputs, text: str) -> None:
    """Write trace and table together: both appear, or neither does."""
    with atomic(outputs.trace, outputs.table) as (trace_tmp, table_tmp):
        prof.export_chrome_trace(str(trace_tmp))
        table_tmp.write_text(text + "\n")


def profile_and_save(
    step: Callable[[], object],
    *,
    annotation: str,
    run: Run,
    args: argparse.Namespace,
    outputs: Outputs,
) -> profile:
    """Record, write, and print the table, the paths, peak memory and how to look at the trace."""
    if run.on_gpu:
        torch.cuda.reset_peak_memory_stats(run.device)
    prof = record(step, annotation=annotation, run=run, args=args)
    text = table(prof, run, args.rows)
    write(prof, outputs, text)
    print(text)
    print(f"trace: {outputs.trace}")
    print(f"table: {outputs.table}")
    if run.on_gpu:
        peak = torch.cuda.max_memory_allocated(run.device)
        print(f"peak device memory while profiling: {peak / 2**20:.1f} MiB")
    print(
        f"view: drop {outputs.trace} onto https://ui.perfetto.dev, or share the folder with "
        f"`uv run python -m common.share {outputs.trace.parent.parent} --bucket NAME`"
    )
    return prof


@dataclass(frozen=True)
class Seen:
    trace: trace_reader.Trace
    as_expected: bool


def look(outputs: Outputs, expect: Expect) -> Seen:
    """Guess first, then look: read the written trace back and hold it to the expectation."""
    trace = trace_reader.load(outputs.trace)
    sibling_path = None
    if expect.gemms_as_in:
        sibling_path = outputs.trace.with_name(
            outputs.trace.name.replace("_compile", f"_{expect.gemms_as_in}", 1)
        )
    sibling = trace_reader.load(sibling_path) if sibling_path and sibling_path.is_file() else None
    verdict = expectations.check(trace, expect, sibling=sibling)
    print(expectations.render(verdict, expect))
    print("findings (uv run python -m common.explain TRACE for the full reading):")
    for finding in findings.read(trace):
        print(f"  {'PROBLEM: ' if finding.problem else ''}[{finding.topic}] {finding.message}")
    return Seen(trace, verdict.ok)


def finish(args: argparse.Namespace, outputs: Outputs, as_expected: bool) -> int:
    """Share if asked, then the exit code: 3 for a mismatch under --strict."""
    code = share.after_run(args.traces_dir, args.bucket, outputs.trace) if args.bucket else 0
    if args.strict and not as_expected:
        print(
            "error: the trace does not match the declared expectation (--strict)", file=sys.stderr
        )
        return 3
    return code
