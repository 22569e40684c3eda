"""The Part 1 cheatsheet, read off a trace: what a careful reader would point at on screen.

Each finding is one sentence with its evidence, the time at stake where it has one (us per
step and % of the median step) and what to try next. Health problems (a trace that cannot
show what it was meant to) come first and are marked so a script can refuse to trust the
rest; then the bound verdict; then the findings with a time at stake, largest first, one per
kind; then the observations that have none. A finding whose time at stake is under 1% of the
step is left out unless asked for (`read(trace, everything=True)`).

Part 3 (attention) adds: a GEMM run as split-K (two kernels, one GEMM); a 0% occupancy that is
a gap in the profiler's estimate, worked out from the kernel's footprint instead; a fused
attention kernel whose low occupancy is its design; the copy an out-of-place op makes under
aten::clone; a mask built again inside every step; float32 work inside a bf16/fp16 run; a
library's CPU work hidden in one opaque op. Each looks at one step (or each step once): no
question asks about every op against every other.
"""

from __future__ import annotations

import math
import re
import statistics

from tracereader.analyses import breakdown, collectives, idle, syncs, variation
from tracereader.names import footprint
from tracereader.names.kernel_names import CUDA_CORES, TF32, label, readable
from tracereader.read import intervals
from tracereader.read.model import (
    DTYPES,
    CpuOp,
    GpuItem,
    Step,
    Trace,
    ancestors,
    input_dtype,
    launched_below,
    subtree,
)

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
SHOWN_KERNELS = 3  # kernels given a finding each; the rest are counted
# Per-kernel notes (occupancy, split-K, launch queries) are for steps of the lessons' size;
# in a model's step of thousands of kernels they are noise (explain --kernels shows each).
SMALL_STEP = 50
LOW_OCCUPANCY_PCT = 25  # a theoretical occupancy at or below this is low
MAIN_KERNEL_SHARE = 0.1  # a kernel with this share of its step's GPU time is a main one
# An op's own CPU time, outside its children and its runtime calls, that makes a library's
# opaque bar worth pointing at: this many us and this share of the step's CPU time.
OPAQUE_US = 40
OPAQUE_SHARE = 0.2
SIXTEEN_BIT = {spelling: short for spelling, short in DTYPES.items() if short in ("bf16", "fp16")}
MASK_BUILDERS = frozenset({"aten::tril", "aten::triu", "aten::tril_", "aten::triu_"})
MASK_SOURCES = frozenset({"aten::ones", "aten::ones_like", "aten::full", "aten::new_ones"})
# Ops whose copy is their whole point: no in-place variant would avoid it.
COPYING_OPS = frozenset(
    {
        "aten::clone",
        "aten::contiguous",
        "aten::reshape",
        "aten::flatten",
        "aten::to",
        "aten::_to_copy",
        "aten::copy_",
        "aten::repeat",
        "aten::cat",
        "aten::stack",
    }
)


HIDDEN_BELOW = 0.01  # a finding with less than this share of the step at stake is left out
# Calls a first step makes when start-up work really lands in it.
START_UP_CALLS = re.compile(
    r"^(cudaMalloc|cuMemCreate|cuModuleLoad|cuLibraryLoad|cudaGetDeviceProperties)"
)


class Finding:
    """One finding (not a dataclass: see kernel_names.KernelClass)."""

    __slots__ = ("topic", "message", "problem", "us", "pct", "next")

    def __init__(
        self,
        topic: str,
        message: str,
        problem: bool = False,
        us: float | None = None,
        pct: float | None = None,
        next: str = "",
    ):
        self.topic = topic
        self.message = message
        self.problem = problem  # a health problem: the trace cannot show what it should
        self.us = us  # the time at stake per step, where it can be measured
        self.pct = pct  # that time as % of the median step
        self.next = next  # what to try next

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __eq__(self, other) -> bool:
        return type(other) is Finding and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return "Finding(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


def step_wall(trace: Trace) -> float:
    """The median step's wall time (the denominator of every finding's %)."""
    return statistics.median(s.dur for s in trace.steps) if trace.steps else 0.0


def _at_stake(finding: Finding, wall: float) -> Finding:
    if finding.us is None or finding.pct is not None or wall <= 0:
        return finding
    return Finding(**{**finding.as_dict(), "pct": 100 * finding.us / wall})


def read(trace: Trace, everything: bool = False) -> list[Finding]:
    """The findings, ranked (see the module's docstring); `everything` keeps the small ones."""
    found, hidden = ranked(trace)
    return found + hidden if everything else found


def ranked(trace: Trace) -> tuple[list[Finding], list[Finding]]:
    """(the findings shown, those left out for being under 1% of the step)."""
    health = _health(trace)
    if not trace.steps:
        return health, []
    wall = step_wall(trace)
    rest = [_at_stake(f, wall) for f in _all(trace) if f is not None]
    bound = [f for f in rest if f.topic == "bound"]
    timed = sorted(
        (f for f in rest if f.us is not None and f.topic != "bound"), key=lambda f: -f.us
    )
    plain = [f for f in rest if f.us is None and f.topic != "bound"]
    shown = [f for f in timed if f.pct is None or f.pct >= 100 * HIDDEN_BELOW]
    hidden = [f for f in timed if f not in shown]
    return [*health, *bound, *shown, *plain], hidden


def _all(trace: Trace) -> list[Finding | None]:
    return [
        _allocator(trace),
        _bound(trace),
        _syncs(trace),
        _exposed_comm(trace),
        _cold_start(trace),
        *_occupancy(trace),
        *_split_k(trace),
        *_occupancy_gap(trace),
        *_low_occupancy_by_design(trace),
        *_hidden_memcpy(trace),
        *_clone_memcpy(trace),
        _mask_rebuilt(trace),
        _upcast(trace),
        *_opaque_library(trace),
        *_compile_rows(trace),
        _end_sync(trace),
        _variation(trace),
    ]


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
                "no event to read: the trace holds no CPU op, runtime call or GPU work",
                problem=True,
            )
        )
    elif trace.unit == "window":
        out.append(
            Finding(
                "unit",
                "no ProfilerStep in the trace (profiled without a schedule, or prof.step() "
                "never called): the whole recorded window is read as one unit",
                next="profile with schedule(wait=1, warmup=1, active=2) and call prof.step() "
                "once per iteration to read steps",
            )
        )
    if trace.has_runtime and trace.steps and not trace.gpu_all:
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
        us=total / len(trace.steps),
        next="free what each step allocates (or warm up until the pool stops growing)",
    )


def _bound(trace: Trace) -> Finding | None:
    """The verdict from the GPU's busy time (union over streams) against the step's wall."""
    if not trace.steps:
        return None
    cpu = step_wall(trace)
    unit = "in the window" if trace.unit == "window" else "per step"
    if not trace.gpu_all:
        where = f"{trace.device}: " if trace.device else ""
        return Finding(
            "bound",
            f"{'CPU-only trace' if trace.device is None else where + 'no GPU events recorded'}"
            f": {cpu:.0f} us of CPU time {unit}, no GPU side",
        )
    rows = [breakdown.step(s) for s in trace.steps]
    gpu = statistics.median(r["gpu_busy_us"] for r in rows)
    waits = statistics.median(idle.split(s)["host_wait_us"] for s in trace.steps)
    if gpu < 0.2 * cpu:
        return Finding(
            "bound",
            f"overhead-bound: the GPU is busy {gpu:.1f} us {unit} (union of its work) of "
            f"{cpu:.0f} us; it mostly waits for launches",
            us=waits,
            next="fewer, larger launches: torch.compile, CUDA graphs, larger batches",
        )
    if gpu >= 0.8 * cpu:
        return Finding(
            "bound",
            f"GPU-bound: the GPU is busy {gpu:.0f} us {unit} (union of its work) of "
            f"{cpu:.0f} us of CPU time; the launches keep ahead of the GPU",
            next="the top kernels and classes below are where the time goes",
        )
    return Finding(
        "bound",
        f"balanced: the GPU is busy {gpu:.0f} us {unit} (union of its work) of {cpu:.0f} us "
        "of CPU time (which the profiler inflates); larger shapes tip it GPU-bound",
        us=waits,
    )


def _syncs(trace: Trace) -> Finding | None:
    """Host-stalling synchronizations, by the time they blocked the host per step."""
    rows: dict[str, dict] = {}
    for step in trace.steps:
        for row in syncs.step(step):
            got = rows.setdefault(row["what"], {"count": 0, "us": 0.0, "by": row["by"]})
            got["count"] += row["count"]
            got["us"] += row["blocked_us"]
    if not rows:
        return None
    n = len(trace.steps)
    total = sum(r["us"] for r in rows.values()) / n
    parts = ", ".join(
        f"{what} x{r['count'] / n:g} ({r['us'] / n:.0f} us, in {r['by']})"
        for what, r in sorted(rows.items(), key=lambda kv: -kv[1]["us"])
    )
    return Finding(
        "sync",
        f"the host stops for the GPU {total:.0f} us per step: {parts}",
        us=total,
        next="keep values on the GPU (no .item()/.cpu() inside the step), pin host memory "
        "(pin_memory=True) and copy with non_blocking=True",
    )


def _exposed_comm(trace: Trace) -> Finding | None:
    """Communication that no compute hides, per step (by union)."""
    if not trace.on_gpu:
        return None
    rows = [collectives.step(s, trace) for s in trace.steps]
    if not any(r["collectives"] for r in rows):
        return None
    exposed = statistics.median(r["exposed_us"] for r in rows)
    comm = statistics.median(r["comm_us"] for r in rows)
    return Finding(
        "communication",
        f"{comm:.0f} us of collectives per step, {exposed:.0f} us of it exposed (no compute "
        "kernel runs meanwhile)",
        us=exposed,
        next="overlap it: bucket gradients (DDP), prefetch all-gathers (FSDP), or shrink messages",
    )


def _cold_start(trace: Trace) -> Finding | None:
    """A first step wider than the rest because start-up work landed in it: its GPU work
    took longer, or it made start-up calls (allocation, module loading) that later steps do
    not. A first step whose CPU side alone is wider (in every trace the profiler's own start
    lands there) is no cold start."""
    if len(trace.steps) < 3:
        return None
    first, rest = trace.steps[0], trace.steps[1:]
    wall = statistics.median(s.dur for s in rest)
    if first.dur <= 1.5 * wall:
        return None
    busy = breakdown.step(first)["gpu_busy_us"]
    busy_rest = statistics.median(breakdown.step(s)["gpu_busy_us"] for s in rest)
    later = {c.name for s in rest for c in s.runtime}
    start_up = sorted(
        {c.name for c in first.runtime if START_UP_CALLS.match(c.name) and c.name not in later}
    )
    if not (busy > 1.5 * busy_rest > 0 or start_up):
        return None
    why = f"its GPU work {busy:.0f} us against {busy_rest:.0f} us" if busy > 1.5 * busy_rest else ""
    if start_up:
        why += ("; " if why else "") + f"start-up calls only there: {', '.join(start_up)}"
    return Finding(
        "cold start",
        f"{first.name} took {first.dur:.0f} us against {wall:.0f} us for the later steps "
        f"({why}): start-up work landed in it (allocation, library heuristics, lazy loading)",
        us=(first.dur - wall) / len(trace.steps),
        next="warm up before profiling (the schedule's wait and warmup steps)",
    )


def _occupancy(trace: Trace) -> list[Finding]:
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
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
    """The cudaDeviceSynchronize after the last step: the profiler's own flush, unless the
    GPU was still running queued work during it (then it is that work's time)."""
    syncs_after = [c for c in trace.runtime_outside_steps if c.name == "cudaDeviceSynchronize"]
    if not (syncs_after and trace.steps and syncs_after[-1].ts >= trace.steps[-1].ts):
        return None
    sync = syncs_after[-1]
    during = intervals.union(
        (max(i.ts, sync.ts), min(i.ts + i.dur, sync.ts + sync.dur))
        for i in trace.gpu_all
        if i.ts < sync.ts + sync.dur and i.ts + i.dur > sync.ts
    )
    drained = intervals.length(during)
    if sync.dur > 0 and drained >= 0.5 * sync.dur:
        return Finding(
            "profiler",
            f"cudaDeviceSynchronize after the last step ({sync.dur:.0f} us) waits for GPU work "
            f"still queued ({drained:.0f} us of it runs meanwhile): the last steps' kernels, "
            "the GPU's time, not the profiler's",
        )
    return Finding(
        "profiler",
        f"cudaDeviceSynchronize after the last step ({sync.dur:.0f} us): the profiler "
        "flushing its GPU events, not your code",
    )


def _variation(trace: Trace) -> Finding | None:
    """The same kernel (name and launcher) taking different times in different steps, merged
    into one finding: the widest few named, the rest counted."""
    varied = variation.read(trace)
    if not varied:
        return None
    shown = varied[:SHOWN_KERNELS]
    parts = "; ".join(
        f"{label(v['name'], 60)} (by {v['launched_by']}) took {v['low_us']:.1f} to "
        f"{v['high_us']:.1f} us across steps ({v['spread']:.0%} spread)"
        for v in shown
    )
    more = f"; {len(varied) - len(shown)} more vary by over 10%" if len(varied) > len(shown) else ""
    return Finding(
        "variation",
        f"{parts}{more}: read each step, not only the average",
        us=shown[0]["at_stake_us"],
        next="more steps (active=), a fixed clock, or look for what else ran on the GPU",
    )


# --- what attention's traces show (Part 3) --------------------------------------------------


def _kernels_once(step: Step) -> list[GpuItem]:
    """The step's kernels, one per distinct name (its first launch), in launch order."""
    seen: set[str] = set()
    out = []
    for item in step.gpu:
        if item.kind == "kernel" and item.name not in seen:
            seen.add(item.name)
            out.append(item)
    return out


def _dims(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, tuple | list) else "?"


def _size(nbytes) -> str:
    if not isinstance(nbytes, int):
        return "?"
    return f"{nbytes} B" if nbytes < 1024 else f"{nbytes / 1024:.3g} KB"


def _under(op: CpuOp | None) -> str:
    """ " under A > B": the two outermost ATen ops around `op` (itself included), the call a
    user made and the path it took (aten::scaled_dot_product_attention >
    aten::_scaled_dot_product_attention_math); "" when there is none."""
    names = [o.name for o in ancestors(op) if o.name.startswith("aten::")]
    return f" under {' > '.join(reversed(names[-2:]))}" if names else ""


def _split_k(trace: Trace) -> list[Finding]:
    """A GEMM that ran as a product kernel and a split-K reduce kernel."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    out, seen, gemm = [], set(), None
    for item in trace.steps[-1].gpu:
        if item.klass.cls != "gemm":
            continue
        if not item.klass.joins_previous:
            gemm = item
            continue
        if item.klass.detail != "split-K reduce":  # cuBLASLt's separate epilogue joins too
            continue
        if gemm is None or (gemm.name, item.name) in seen:
            continue
        seen.add((gemm.name, item.name))
        grid = gemm.args.get("grid")
        blocks = math.prod(grid) if isinstance(grid, tuple) else None
        sms = trace.device_properties(gemm.args.get("device", 0)).get("numSms")
        here = (
            f"here a grid of {blocks} block{'s' if blocks != 1 else ''}, {_dims(grid)}"
            + (f", for {sms} SMs" if isinstance(sms, int) else "")
            if blocks
            else "a small output"
        )
        out.append(
            Finding(
                "split-K",
                f"{gemm.launched_by}'s GEMM ran as two kernels, {readable(gemm.name)} then "
                f"{readable(item.name)}: split-K, the K dimension cut into slices that "
                "separate blocks multiply at the same time, their partial sums added up by "
                "the second kernel; cuBLAS picks it when the output has too few tiles to "
                f"keep the SMs busy ({here}); one GEMM, counted once",
            )
        )
    return out


def _occupancy_gap(trace: Trace) -> list[Finding]:
    """Kernels whose recorded occupancy is 0 while their footprint and grid fill SMs."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    gaps = []
    for item in _kernels_once(trace.steps[-1]):
        if item.args.get("est. achieved occupancy %") != 0:
            continue
        props = trace.device_properties(item.args.get("device", 0))
        occ = footprint.occupancy(item.args, props)
        if occ is not None and occ.estimated_pct >= 1:
            gaps.append((item, occ, props))
    out = []
    for item, occ, props in gaps[:SHOWN_KERNELS]:
        args = item.args
        shared, default = args["shared memory"], props.get("sharedMemPerBlock")
        why = ""
        if isinstance(default, int) and shared > default:
            why = (
                f"; its shared memory is above the {default // 1024} KB a block gets by "
                "default, the limit the profiler's estimate assumes"
            )
        grid = args["grid"]
        out.append(
            Finding(
                "occupancy",
                f"{readable(item.name)} reads 0% est. achieved occupancy (launched with "
                f"{item.runtime}): a gap in the profiler's estimate, not an idle GPU; its "
                f"footprint, {args['registers per thread']} registers x "
                f"{math.prod(args['block'])} threads and {_size(shared)} of shared memory "
                f"per block, fits {occ.blocks_per_sm} block{'s' if occ.blocks_per_sm != 1 else ''}"
                f" per SM (limit: {occ.limited_by}), {occ.warps_per_sm} of {occ.max_warps} "
                f"warps = {footprint.rounded(occ.theoretical_pct)}% (with its grid of "
                f"{math.prod(grid)} blocks: {occ.estimated_pct}%){why}",
            )
        )
    if len(gaps) > SHOWN_KERNELS:
        out.append(
            Finding(
                "occupancy",
                f"{len(gaps) - SHOWN_KERNELS} more kernels read 0% the same way (explain "
                "shows each kernel's footprint and the occupancy it allows)",
            )
        )
    return out


def _low_occupancy_by_design(trace: Trace) -> list[Finding]:
    """A main kernel whose registers or shared memory per block keep its occupancy low."""
    if trace.device is None or not trace.steps or len(trace.steps[-1].gpu) > SMALL_STEP:
        return []
    step = trace.steps[-1]
    out = []
    for item in _kernels_once(step):
        reported = item.args.get("est. achieved occupancy %")
        if not isinstance(reported, int | float) or reported <= 0:
            continue
        if item.dur < MAIN_KERNEL_SHARE * step.gpu_time:
            continue
        occ = footprint.occupancy(item.args, trace.device_properties(item.args.get("device", 0)))
        if (
            item.klass.cls != "attention"  # GEMMs are low by design too: not worth a line each
            or occ is None
            or occ.theoretical_pct > LOW_OCCUPANCY_PCT
            or occ.grid_blocks_per_sm < occ.blocks_per_sm  # the grid, not the design
            or not ("registers" in occ.limited_by or "shared memory" in occ.limited_by)
        ):
            continue
        out.append(
            Finding(
                "occupancy",
                f"{readable(item.name)} runs at {reported:g}% est. achieved occupancy by "
                f"design: {item.args['registers per thread']} registers per thread and "
                f"{_size(item.args['shared memory'])} of shared memory per block leave room "
                f"for {occ.blocks_per_sm} block{'s' if occ.blocks_per_sm != 1 else ''}, "
                f"{occ.warps_per_sm} of {occ.max_warps} warps per SM (limit: "
                f"{occ.limited_by}), because each block keeps its tiles of q, k and v and the "
                "running softmax on chip and reuses them instead of going back to GPU memory; "
                "fewer warps, less traffic: judge it by its time"
                f" ({item.dur:.1f} us here), not by its occupancy",
            )
        )
    return out[:SHOWN_KERNELS]


def _clone_memcpy(trace: Trace) -> list[Finding]:
    """A Memcpy under aten::clone beneath another op: an out-of-place op copying its input."""
    if trace.device is None or not trace.steps:
        return []
    hits: dict[str, tuple[GpuItem, set[int]]] = {}
    for n, step in enumerate(trace.steps):
        for item in step.gpu:
            if item.kind != "memcpy":
                continue
            chain = ancestors(item.launcher)
            for inner, outer in zip(chain, chain[1:], strict=False):
                if inner.name == "aten::clone":
                    if outer.name.startswith("aten::") and outer.name not in COPYING_OPS:
                        hits.setdefault(outer.name, (item, set()))[1].add(n)
                    break
    out = []
    for name, (item, steps) in hits.items():
        size = item.args.get("bytes")
        mb = f"{size / 1e6:.1f} MB " if isinstance(size, int) else ""
        every = (
            "in every recorded step"
            if len(steps) == len(trace.steps)
            else f"in {len(steps)} of {len(trace.steps)} recorded steps"
        )
        inplace = name if name.endswith("_") else f"{name}_"
        out.append(
            Finding(
                "memcpy",
                f"{name} copied its input first: a {mb}Memcpy {item.klass.detail} under "
                f"{name} > aten::clone {every}, because an out-of-place op clones its input "
                f"and works on the copy; the in-place variant ({inplace}) writes into its "
                "input and skips the copy (safe when nothing needs the old values, e.g. "
                "under torch.no_grad())",
                us=item.dur,
            )
        )
    return out


def _mask_builder(step: Step) -> CpuOp | None:
    """The first tril/triu on a square [S, S] (or [..., S, S]) tensor in the step."""
    for op in step.cpu_ops:
        if op.name in MASK_BUILDERS:
            dims = op.args.get("Input Dims")
            if dims and len(dims[0]) >= 2 and dims[0][-1] == dims[0][-2] > 1:
                return op
    return None


def _mask_rebuilt(trace: Trace) -> Finding | None:
    """A causal mask built inside every recorded step."""
    if not trace.steps:
        return None
    builders = [_mask_builder(step) for step in trace.steps]
    if not all(builders):
        return None
    step, op = trace.steps[-1], builders[-1]
    parts = [op]
    j = op.index - 1  # the op just before it at its depth: where the tensor came from
    while j >= 0 and step.cpu_ops[j].depth > op.depth:
        j -= 1
    if j >= 0 and step.cpu_ops[j].depth == op.depth and step.cpu_ops[j].name in MASK_SOURCES:
        parts.insert(0, step.cpu_ops[j])
    chain = ", then ".join(p.name for p in parts)
    where = _under(op.parent)
    shape = ", ".join(map(str, op.args["Input Dims"][0]))
    launched = ""
    if trace.device is not None:
        n = sum(len(o.launched) for p in parts for o in subtree(step, p))
        launched = f", {n} GPU operation{'s' if n != 1 else ''} for it" if n else ""
    return Finding(
        "mask",
        f"a [{shape}] mask is built again in every recorded step ({chain}{where}{launched}): "
        "constant work redone on every call; build it once outside the forward, or let a "
        "fused kernel apply causality itself (is_causal=True)",
    )


def _upcast(trace: Trace) -> Finding | None:
    """float32 work inside a run whose inputs are bf16 or fp16."""
    if not trace.steps:
        return None
    step = trace.steps[-1]
    dtype = input_dtype(step)
    if dtype not in ("bf16", "fp16"):
        return None
    gemms = [
        i
        for i in step.gpu
        if i.klass.cls == "gemm"
        and not i.klass.joins_previous
        and i.klass.facts.get("precision") in (CUDA_CORES, TF32)
    ]
    casts = [
        op
        for op in step.cpu_ops
        if op.name == "aten::_to_copy" and (op.args.get("Input type") or ("",))[0] in SIXTEEN_BIT
    ]
    if not gemms and not casts:
        return None
    parts = []
    if gemms:
        precision = gemms[0].klass.facts["precision"]
        parts.append(
            f"{len(gemms)} GEMM{'s' if len(gemms) > 1 else ''} compute in "
            + (
                "fp32 on CUDA cores, no Tensor cores"
                if precision == CUDA_CORES
                else "tf32 on Tensor cores"
            )
            + f" ({readable(gemms[0].name)})"
        )
    if casts:
        parts.append(
            f"{len(casts)} aten::_to_copy cast{'s' if len(casts) > 1 else ''} {dtype} tensors "
            "to another type"
        )
    first = gemms[0].launcher if gemms else casts[0]
    where = _under(first.parent if first else None)
    return Finding(
        "precision",
        f"float32 inside a {dtype} run: {' and '.join(parts)}{where}: the inputs are "
        f"upcast, so this work runs at float32's speed, not {dtype}'s",
        us=sum(i.dur for i in gemms) or None,
        next=f"keep the operands in {dtype} (or allow TF32 where float32 is needed)",
    )


def _opaque_library(trace: Trace) -> list[Finding]:
    """An op that launches one kernel itself (no GEMM: a GEMM library's bar is always one op)
    after much CPU time of its own, with at most small work under it (no GEMM, nothing longer
    than its own kernel): a library planning and launching where the profiler cannot look.
    Medians over the steps, matching an op to its namesakes by their order in the step."""
    if trace.device is None or not trace.steps:
        return []
    seen: dict[tuple[str, int], list[tuple[float, float, CpuOp, GpuItem, int]]] = {}
    for step in trace.steps:
        calls: dict[CpuOp, float] = {}  # children's time, then runtime calls' time
        for call in step.runtime:
            op = call.launcher
            if op is not None and op.index >= 0:
                calls[op] = calls.get(op, op.inner) + call.dur
        order: dict[str, int] = {}  # counted among the candidates only: most ops are not
        ops = step.cpu_ops
        for op in ops:
            if not op.launched:
                continue
            kernels = [i for i in op.launched if i.kind == "kernel"]
            if len(kernels) != 1 or kernels[0].klass.cls == "gemm":
                continue
            # Small work under it is its children's (SDPA's flash op routed to FA4 fills two
            # tensors first; its own time excludes them); a GEMM, or anything longer than its
            # own kernel, means it wraps real work (a module's forward, a user's annotation).
            below, wraps = 0, False
            for child in subtree(step, op)[1:]:
                below += len(child.launched)
                wraps |= any(
                    i.klass.cls == "gemm" or i.dur > kernels[0].dur for i in child.launched
                )
            if wraps:
                continue
            nth = order[op.name] = order.get(op.name, -1) + 1
            own = op.dur - calls.get(op, op.inner)
            share = own / step.dur if step.dur > 0 else 0.0
            seen.setdefault((op.name, nth), []).append((own, share, op, kernels[0], below))
    best = None
    for runs in seen.values():
        own = statistics.median(r[0] for r in runs)
        share = statistics.median(r[1] for r in runs)
        if own >= OPAQUE_US and share >= OPAQUE_SHARE and (best is None or own > best[0]):
            best = (own, share, *runs[-1][2:])
    if best is None:
        return []
    own, share, op, kernel, below = best
    under = (
        "with nothing under it that launches GPU work"
        if not below
        else f"outside the ops under it (which launch {below} small GPU "
        f"item{'s' if below > 1 else ''})"
    )
    return [
        Finding(
            "library",
            f"{op.name} spends {own:.0f} us of CPU time of its own per step ({share:.0%} of "
            f"the step), {under}, and then launches one kernel, {readable(kernel.name)}, with "
            f"{kernel.runtime}: the library plans and launches inside one bar that the profiler "
            "cannot see into",
            us=own,
        )
    ]


def step_summary(step: Step) -> str:
    busy = breakdown.step(step)["gpu_busy_us"]
    return f"{step.name}: CPU {step.dur:.0f} us, GPU busy {busy:.1f} us ({len(step.gpu)} GPU items)"
