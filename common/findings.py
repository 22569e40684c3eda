"""The Part 1 cheatsheet, read off a trace: what a careful reader would point at on screen.

Each finding is one sentence with its evidence. Health problems (a trace that cannot show what
it was meant to) come first and are marked so a script can refuse to trust the rest.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass

from common.kernel_names import label
from common.trace_reader import Step, Trace, subtree

OCCUPANCY = "cudaOccupancyMaxActiveBlocksPerMultiprocessor"
COMPILE_WORK = re.compile(
    r"compile_inner|CompileFx|inductor_compile|Dynamo.*compile|_compile", re.IGNORECASE
)


@dataclass(frozen=True)
class Finding:
    topic: str
    message: str
    problem: bool = False  # a health problem: the trace cannot show what it should

    def as_dict(self) -> dict:
        return asdict(self)


def read(trace: Trace) -> list[Finding]:
    health = _health(trace)
    if any(f.problem for f in health) and not trace.steps:
        return health
    found = [
        *health,
        _bound(trace),
        _cold_start(trace),
        *_occupancy(trace),
        *_hidden_memcpy(trace),
        *_compile_rows(trace),
        _end_sync(trace),
        *_variation(trace),
    ]
    return [f for f in found if f]


def _health(trace: Trace) -> list[Finding]:
    out = []
    if not trace.steps:
        out.append(
            Finding(
                "health",
                "no ProfilerStep in the trace: the schedule (wait + warmup "
                "+ active) was longer than the loop, or prof.step() was never called",
                problem=True,
            )
        )
    if trace.has_runtime and trace.steps and trace.gpu_items == 0:
        out.append(
            Finding(
                "health",
                "CUDA runtime calls were recorded but not one kernel: the "
                "GPU side needs CUPTI, which is missing or not permitted here (in "
                "containers, profiling often needs extra privileges)",
                problem=True,
            )
        )
    recompiled = [
        s.name for s in trace.steps if any(COMPILE_WORK.search(op.name) for op in s.cpu_ops)
    ]
    regions = {
        re.sub(r"^Torch-Compiled Region: ", "", op.name)
        for s in trace.steps
        for op in s.cpu_ops
        if op.name.startswith("Torch-Compiled")
    }
    if recompiled or len(regions) > 1:
        where = ", ".join(recompiled) or f"regions {sorted(regions)}"
        out.append(
            Finding(
                "health",
                f"compilation inside the recorded steps ({where}): a "
                "recompile, so these steps do not show the steady state",
                problem=True,
            )
        )
    return out


def _bound(trace: Trace) -> Finding | None:
    if not trace.steps:
        return None
    cpu = statistics.median(s.dur for s in trace.steps)
    if trace.device is None:
        return Finding("bound", f"CPU-only trace: {cpu:.0f} us of CPU time per step, no GPU side")
    gpu = statistics.median(s.gpu_time for s in trace.steps)
    if gpu < 0.2 * cpu:
        return Finding(
            "bound",
            f"overhead-bound: {cpu:.0f} us of CPU time per step against "
            f"{gpu:.1f} us of GPU work; the GPU mostly waits for launches",
        )
    if gpu >= cpu:
        return Finding(
            "bound",
            f"GPU-bound: {gpu:.0f} us of GPU work per step against "
            f"{cpu:.0f} us of CPU time; the launches keep ahead of the GPU",
        )
    return Finding(
        "bound",
        f"balanced: {gpu:.0f} us of GPU work per step against {cpu:.0f} us "
        "of CPU time (which the profiler inflates); larger shapes tip it GPU-bound",
    )


def _cold_start(trace: Trace) -> Finding | None:
    if len(trace.steps) < 3:
        return None
    first, rest = trace.steps[0], statistics.median(s.dur for s in trace.steps[1:])
    if first.dur > 1.5 * rest:
        return Finding(
            "cold start",
            f"{first.name} took {first.dur:.0f} us against {rest:.0f} us "
            "for the later steps: start-up work landed in it (allocation, library "
            "heuristics, lazy loading; after a warm-up, the profiler's own start)",
        )
    return None


def _occupancy(trace: Trace) -> list[Finding]:
    if trace.device is None or not trace.steps:
        return []
    step = trace.steps[-1]
    queries = sum(c.name == OCCUPANCY for c in step.runtime)
    gemm_launches = sorted({i.runtime for i in step.gpu if i.klass.cls == "gemm"})
    if queries:
        return [
            Finding(
                "launch",
                f"{queries} occupancy quer{'y' if queries == 1 else 'ies'} "
                f"({OCCUPANCY}) per step before launches: the library sizing its grid",
            )
        ]
    if gemm_launches:
        return [
            Finding(
                "launch",
                "no occupancy queries before the GEMMs, launched with "
                f"{', '.join(gemm_launches)} (Ampere's cuBLAS queries first; Hopper's "
                "nvjet kernels do not)",
            )
        ]
    return []


def _hidden_memcpy(trace: Trace) -> list[Finding]:
    if not trace.steps:
        return []
    step = trace.steps[-1]
    out = []
    for op in step.cpu_ops:
        below = [i for o in subtree(step, op) for i in o.launched]
        if op.name == "aten::addmm" and any(i.kind == "memcpy" for i in below):
            out.append(
                Finding(
                    "memcpy",
                    "aten::addmm runs as a Memcpy DtoD (C copied into the "
                    "output) and a GEMM that adds onto it: two GPU operations for one "
                    "CPU op",
                )
            )
            break
    return out


def _compile_rows(trace: Trace) -> list[Finding]:
    hashes = []
    for step in trace.steps:
        found = [re.search(r"CompiledFxGraph (\S+)", op.name) for op in step.cpu_ops]
        hashes.append(tuple(m.group(1) for m in found if m))
    if not any(hashes):
        return []
    same = len(set(hashes)) == 1
    rows = sorted(
        {
            op.name.split(":")[0]
            for s in trace.steps
            for op in s.cpu_ops
            if op.name.startswith(("TorchDynamo", "Torch-Compiled", "AOTDispatcher", "Pregraph"))
        }
    )
    return [
        Finding(
            "compile",
            f"compiled steps: {', '.join(rows)}; CompiledFxGraph hash "
            + (
                "the same in every step (cache hits)"
                if same
                else f"changes between steps {hashes} (recompiles)"
            ),
            problem=not same,
        )
    ]


def _end_sync(trace: Trace) -> Finding | None:
    syncs = [c for c in trace.runtime_outside_steps if c.name == "cudaDeviceSynchronize"]
    if syncs and trace.steps and syncs[-1].ts >= trace.steps[-1].ts:
        return Finding(
            "profiler",
            f"cudaDeviceSynchronize after the last step "
            f"({syncs[-1].dur:.0f} us): the profiler flushing its GPU events, not "
            "your code",
        )
    return None


def _variation(trace: Trace) -> list[Finding]:
    if len(trace.steps) < 2:
        return []
    by_position = zip(*(s.gpu for s in trace.steps), strict=False)
    out = []
    for items in by_position:
        if len({i.name for i in items}) != 1 or items[0].kind != "kernel":
            continue
        durs = [i.dur for i in items]
        low, high = min(durs), max(durs)
        if low > 0 and high / low > 1.10:
            out.append(
                Finding(
                    "variation",
                    f"{label(items[0].name, 60)} took {low:.1f} to "
                    f"{high:.1f} us across steps ({high / low - 1:.0%} spread): read "
                    "each step, not only the average",
                )
            )
    return out


def step_summary(step: Step) -> str:
    return f"{step.name}: CPU {step.dur:.0f} us, GPU work {step.gpu_time:.1f} us"
