"""Plumbing around the profiler loop that each lesson writes out itself: warm-up, the
activities to record, the table's order, printing what was written, reading it back.

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
from torch.profiler import ProfilerActivity

import tracereader
from common.cli import Run, UsageError, command_hint, compile_in_process, one_line
from common.measuring import timing
from common.outputs import Outputs
from tracereader import Expect, Trace

WARMUP_CALLS = 3  # untimed calls before profiling, as Part 1's --warmup


def _skip_the_profilers_inductor_probe() -> None:
    """Keep torch's profiler from importing Inductor in runs that never compile.

    When it starts, the profiler checks whether Inductor runs with CUDA graphs by asking
    `hasattr(torch, "_inductor")`, and that question itself imports Inductor and Dynamo
    through torch's lazy module loader: 5 s of an 11 s eager lesson on an H100
    (tools/startup_breakdown.py, docs/startup.md). While Inductor is not loaded (and not
    configured through its environment variable) nothing can have turned its CUDA graphs on,
    so the probe is answered "no" without the import; a run that compiles has Inductor
    loaded before it profiles and takes torch's own path. If torch renames these methods,
    this does nothing.
    """
    from torch.profiler import profiler as torch_profiler

    kineto = getattr(torch_profiler, "_KinetoProfile", None)
    for name in ("prepare_trace", "start_trace"):
        method = getattr(kineto, name, None)
        if method is None or getattr(method, "_probe_skipped", False):
            continue

        def without_probe(self, *args, _method=method, **kwargs):
            if "torch._inductor" in sys.modules or "TORCHINDUCTOR_TRITON_CUDAGRAPHS" in os.environ:
                return _method(self, *args, **kwargs)
            lazy = torch.__getattr__

            def no_inductor(attribute):
                if attribute == "_inductor":
                    raise AttributeError(attribute)
                return lazy(attribute)

            torch.__getattr__ = no_inductor
            try:
                return _method(self, *args, **kwargs)
            finally:
                torch.__getattr__ = lazy

        without_probe._probe_skipped = True
        setattr(kineto, name, without_probe)


def synchronize(run: Run) -> None:
    if run.on_gpu:
        torch.cuda.synchronize(run.device)


def warm_up(
    step: Callable[[], torch.Tensor],
    run: Run,
    *,
    calls: int = WARMUP_CALLS,
    compiling: bool = False,
    uncompiled: str | None = None,
) -> torch.Tensor:
    """Run the step a few times so lazy start-up costs stay out of the trace.

    Under torch.compile the first call compiles; its time is printed apart because it is
    paid once per shape, not per step. `uncompiled` ("MODULE: what to do instead"): a module
    torch.compile may fail on; its failure is then one line (exit 2), not a traceback.
    """
    start = time.perf_counter()
    try:
        out = step()
    except Exception as err:
        if not (compiling and uncompiled):
            raise
        what, _, advice = uncompiled.partition(": ")
        raise UsageError(
            f"torch.compile could not compile {what} ({one_line(err)}); {advice}"
        ) from None
    synchronize(run)
    if compiling:
        print(
            f"compile: first call took {time.perf_counter() - start:.2f} s "
            f"(Dynamo tracing + Inductor codegen {compile_in_process()}; paid once per shape)"
        )
    for _ in range(calls - 1):
        out = step()
    synchronize(run)
    return out


def activities(run: Run) -> list[ProfilerActivity]:
    """What to record: the CPU always, CUDA on a GPU run.

    Two settings ride along, because they must be in place before the profiler starts:
    - On a CPU-only machine Kineto logs its start/stop and a failed GPU probe: noise on a laptop
      console. Its log level is read when the profiler starts; a user's own KINETO_LOG_LEVEL wins.
    - torch's profiler asks, as it starts, whether Inductor uses CUDA graphs, and asking
      imports Inductor (5 s of an 11 s eager lesson): _skip_the_profilers_inductor_probe
      answers "no" without the import while nothing has loaded Inductor.
    """
    _skip_the_profilers_inductor_probe()
    if not run.on_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        return [ProfilerActivity.CPU]
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def sort_key(run: Run) -> str:
    """The table's order: GPU time on a GPU (what the posts sort by), CPU time otherwise."""
    return "device_time_total" if run.on_gpu else "cpu_time_total"


# Per device, when reset_peak_memory last ran: the bytes allocated then (the weights and inputs
# the profiled steps start from) and the allocator's running total of bytes handed out.
_memory_at_reset: dict[torch.device, tuple[int, int]] = {}


def reset_peak_memory(run: Run) -> None:
    """Start counting memory here, so that what `show` prints is the profiled steps' own: not
    the float32 reference's, not an earlier variant's (04_c runs several)."""
    if run.on_gpu:
        torch.cuda.synchronize(run.device)
        torch.cuda.reset_peak_memory_stats(run.device)
        stats = torch.cuda.memory_stats(run.device)
        _memory_at_reset[run.device] = (
            stats.get("allocated_bytes.all.current", 0),
            stats.get("allocated_bytes.all.allocated", 0),
        )


def memory_line(run: Run) -> str:
    """Peak device memory since reset_peak_memory, split into what was resident before and the
    forward's own, and the bytes the allocator handed out meanwhile. The peak shows what must
    fit; the bytes handed out show an allocation avoided even where the peak stays (04_b's
    in-place mask: one score-sized tensor less per forward, the same two alive at the top)."""
    mib = 2**20
    peak = torch.cuda.max_memory_allocated(run.device) / mib
    if run.device not in _memory_at_reset:
        return f"peak device memory in this run: {peak:.1f} MiB"
    resident, handed_out = _memory_at_reset[run.device]
    handed_out = (
        torch.cuda.memory_stats(run.device).get("allocated_bytes.all.allocated", 0) - handed_out
    )
    return (
        f"device memory in the profiled steps: peak {peak:.1f} MiB = {resident / mib:.1f} MiB "
        f"resident before them (weights, inputs) + {peak - resident / mib:.1f} MiB the "
        f"forward's own; {handed_out / mib:.1f} MiB allocated in all (every step's tensors)"
    )


def show(table: str, outputs: Outputs, run: Run) -> None:
    """Print the table, where the files went, peak memory, and how to look at the trace."""
    timing.warn_if_cpu_busy(run.on_gpu)  # before the timings it is about
    print(table)
    print(f"trace: {outputs.trace}")
    print(f"table: {outputs.table}")
    if run.on_gpu:
        print(memory_line(run))
    traces_dir = outputs.trace.parent.parent
    print(
        f"view: drop {outputs.trace} onto https://ui.perfetto.dev, or share the folder with "
        f"`{command_hint('common.share', traces_dir, '--bucket', 'NAME')}`"
    )


@dataclass(frozen=True)
class Seen:
    trace: Trace
    as_expected: bool


def _provenance(trace: Trace) -> str:
    version = trace.meta.get("torch_version")
    return f"{trace.device or 'the CPU'}, {f'torch {version}' if version else 'torch unrecorded'}"


def look(outputs: Outputs, expect: Expect, *, cold_steps: int = 0) -> Seen:
    """Guess first, then look: read the written trace back and hold it to the expectation.

    `cold_steps`: recorded steps that hold start-up on purpose (a cold run's first call, with
    its compile); the expectation describes the steady state and is held to the steps after
    them, the findings read them all."""
    trace = tracereader.load(outputs.trace)
    sibling = None
    if expect.gemms_as_in:
        path = outputs.trace.with_name(
            outputs.trace.name.replace("_compile", f"_{expect.gemms_as_in}", 1)
        )
        sibling = tracereader.load(path) if path.is_file() else None
    if sibling is not None and _provenance(sibling) != _provenance(trace):
        # Kernel names depend on the GPU and the libraries torch ships: comparing them across
        # machines would report a mismatch the code did not cause.
        print(
            f"note: the {expect.gemms_as_in} trace beside this one came from "
            f"{_provenance(sibling)}, this one from {_provenance(trace)}: GEMM names not "
            f"compared (record both on one machine)"
        )
        sibling = None
    steady = trace
    if cold_steps and len(trace.steps) > cold_steps:
        steady = trace.with_steps(trace.steps[cold_steps:])
        print(f"(the first {cold_steps} recorded step(s) are the cold start: checked from "
              f"{steady.steps[0].name} on)")  # fmt: skip
    verdict = tracereader.check(steady, expect, sibling=sibling)
    print(verdict.text)
    print(f"findings (the full reading: {command_hint('explain', outputs.trace)}):")
    for finding in tracereader.read(trace).findings:
        print(f"  {'PROBLEM: ' if finding.problem else ''}[{finding.topic}] {finding.message}")
    return Seen(trace, verdict.ok)


def finish(args: argparse.Namespace, outputs: Outputs, as_expected: bool) -> int:
    """Share if asked, then the exit code: 3 for a mismatch under --strict."""
    code = 0
    if args.bucket is not None:
        from common import share  # huggingface_hub loads only when sharing is asked for

        code = share.after_run(args.traces_dir, args.bucket, outputs.trace)
    if args.strict and not as_expected:
        print(
            "error: the trace does not match the declared expectation (--strict)", file=sys.stderr
        )
        return 3
    return code
