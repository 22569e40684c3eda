"""The Part 1 cheatsheet, read off a trace: what a careful reader would point at on screen.

Each finding is one sentence with its evidence. Health problems (a trace that cannot show what
it was meant to) come first and are marked so a script can refuse to trust the rest.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass

from common.kernel_names import label
from common.trace_reader import Step, Trace, launched_below

OCCUPANCY = "cudaOccupancyMaxActiveBlocksPerMultiprocessor"
COMPILE_WORK = re.compile(
    r"compile_inner|CompileFx|inductor_compile|Dynamo.*compile|_compile", re.IGNORECASE
)
FX_GRAPH = re.compile(r"CompiledFxGraph (\S+)")
# The caching allocator asking the driver for memory (or handing it back): inside a recorded
# step it means the pool grew during the steps, which steady-state steps never do.
ALLOCATOR_CALLS = frozenset(
    {
        "cudaMalloc",
        "cudaFree",
        "cudaMallocAsync",
        "cudaFreeAsync",
        "cuMemCreate",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemRelease",
        "cuMemAddressReserve",
    }
)
SHOWN_STEPS = 5  # steps named in a finding; the rest are counted


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
        _allocator(trace),
        _bound(trace),
        _cold_start(trace),
        *_occupancy(trace),
        *_hidden_memcpy(trace),
        *_compile_rows(trace),
        _end_sync(trace),
        *_variation(trace),
    ]
    return [f for f in found if f]


def _names_matching(trace: Trace, pattern: re.Pattern) -> dict[str, re.Match | None]:
    """pattern.search over the distinct op names: names repeat every step, regexes are slow."""
    found: dict[str, re.Match | None] = {}
    for step in trace.steps:
        for op in step.cpu_ops:
            if op.name not in found:
                found[op.name] = pattern.search(op.name)
    return found


def _steps_text(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_STEPS])
    return shown + (f" and {len(names) - SHOWN_STEPS} more" if len(names) > SHOWN_STEPS else "")


def _health(trace: Trace) -> list[Finding]:
    out = []
    if trace.skipped:
        count = sum(trace.skipped.values())
        reasons = ", ".join(f"{n} with {why}" for why, n in trace.skipped.most_common())
        out.append(
            Finding(
                "health",
                f"{count} malformed event{'s' if count > 1 else ''} skipped ({reasons}): the "
                "file is damaged or was not written by the profiler; what they held is missing",
                problem=True,
            )
        )
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
    compiling = _names_matching(trace, COMPILE_WORK)
    recompiled = [s.name for s in trace.steps if any(compiling[op.name] for op in s.cpu_ops)]
    regions = {
        re.sub(r"^Torch-Compiled Region: ", "", name)
        for name in compiling
        if name.startswith("Torch-Compiled")
    }
    if recompiled or len(regions) > 1:
        where = _steps_text(recompiled) if recompiled else f"regions {sorted(regions)}"
        out.append(
            Finding(
                "health",
                f"compilation inside the recorded steps ({where}): a "
                "recompile, so these steps do not show the steady state",
                problem=True,
            )
        )
    return out


def _allocator(trace: Trace) -> Finding | None:
    calls: dict[str, int] = {}
    total, where = 0.0, []
    for step in trace.steps:
        in_step = [c for c in step.runtime if c.name in ALLOCATOR_CALLS]
        for call in in_step:
            calls[call.name] = calls.get(call.name, 0) + 1
            total += call.dur
        if in_step:
            where.append(f"{step.name} ({sum(c.dur for c in in_step):.0f} us)")
    if not calls:
        return None
    count = sum(calls.values())
    kinds = ", ".join(f"{name} x{n}" for name, n in calls.items())
    return Finding(
        "allocator",
        f"{count} allocator call{'s' if count > 1 else ''} ({kinds}, {total:.0f} us in all) "
        f"inside the recorded steps, in {_steps_text(where)}: the caching allocator grew "
        "during the steps (e.g. the script keeps every step's output alive), so these steps "
        "are not steady state and their CPU time is inflated",
    )


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
    for op in trace.steps[-1].cpu_ops:
        if op.name == "aten::addmm" and launched_below(op, "memcpy"):
            return [
                Finding(
                    "memcpy",
                    "aten::addmm runs as a Memcpy DtoD (C copied into the "
                    "output) and a GEMM that adds onto it: two GPU operations for one "
                    "CPU op",
                )
            ]
    return []


def _compile_rows(trace: Trace) -> list[Finding]:
    graphs = _names_matching(trace, FX_GRAPH)
    hashes = []
    for step in trace.steps:
        found = [graphs[op.name] for op in step.cpu_ops]
        hashes.append(tuple(m.group(1) for m in found if m))
    if not any(hashes):
        return []
    distinct = list(dict.fromkeys(hashes))
    same = len(distinct) == 1
    rows = sorted(
        {
            name.split(":")[0]
            for name in graphs
            if name.startswith(("TorchDynamo", "Torch-Compiled", "AOTDispatcher", "Pregraph"))
        }
    )
    return [
        Finding(
            "compile",
            f"compiled steps: {', '.join(rows)}; CompiledFxGraph hash "
            + (
                "the same in every step (cache hits)"
                if same
                else f"changes between steps ({len(distinct)} different: "
                f"{_steps_text([' '.join(h) or '-' for h in distinct])}; recompiles)"
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
    varied = []  # (spread, position, name, low, high)
    for position, items in enumerate(by_position):
        if items[0].kind != "kernel" or any(i.name != items[0].name for i in items):
            continue
        durs = [i.dur for i in items]
        low, high = min(durs), max(durs)
        if low >= 0.001 and high / low > 1.10:  # a 1 ns floor keeps the ratio finite
            varied.append((high / low, position, items[0].name, low, high))
    # A step of thousands of kernels must not bury the other findings: the widest few, in
    # launch order, and a count of the rest.
    shown = sorted(sorted(varied, reverse=True)[:SHOWN_STEPS], key=lambda v: v[1])
    out = [
        Finding(
            "variation",
            f"{label(name, 60)} took {low:.1f} to {high:.1f} us across steps "
            f"({ratio - 1:.0%} spread): read each step, not only the average",
        )
        for ratio, _, name, low, high in shown
    ]
    if len(varied) > len(shown):
        out.append(
            Finding(
                "variation",
                f"{len(varied) - len(shown)} more kernels vary by over 10% across steps",
            )
        )
    return out


def step_summary(step: Step) -> str:
    return f"{step.name}: CPU {step.dur:.0f} us, GPU work {step.gpu_time:.1f} us"
