"""The findings about a step as a whole: health problems, the allocator, the bound verdict, syncs,
exposed communication, the cold start, compile work, the end-of-step sync, step variation."""

from __future__ import annotations

import re
import statistics

from tracereader.analyses import breakdown, collectives, generation, idle, streams, syncs, variation
from tracereader.analyses.nesting import innermost
from tracereader.judge.cause_text import compiled, launch_fix, sync_fix
from tracereader.judge.finding import SHOWN_KERNELS, Finding, cpu_time, steps_text
from tracereader.names.kernel_names import label
from tracereader.trace import intervals
from tracereader.trace.model import Trace
from tracereader.units import duration

# torch's own compile work (Dynamo's and Inductor's timed phases), anchored and case-sensitive:
# a user's annotation that merely has "compile" in its name ("llama_compile_step") is not it.
COMPILE_WORK = re.compile(
    r"^(_compile\.compile_inner|compile_inner|compile_fx_inner|CompileFx|inductor_compile|"
    r"OutputGraph\.call_user_compiler|create_aot_dispatcher_function)"
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


# Calls a first step makes when start-up work really lands in it.
START_UP_CALLS = re.compile(
    r"^(cudaMalloc|cuMemCreate|cuModuleLoad|cuLibraryLoad|cudaGetDeviceProperties)"
)


def _names_matching(trace: Trace, pattern: re.Pattern) -> dict[str, re.Match | None]:
    """pattern.search over the distinct op names: names repeat every step, regexes are slow."""
    found: dict[str, re.Match | None] = {}
    for step in trace.steps:
        for op in step.cpu_ops:
            if op.name not in found:
                found[op.name] = pattern.search(op.name)
    return found


def health(trace: Trace) -> list[Finding]:
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
    out.extend(_out_of_order(trace))
    compiling = _names_matching(trace, COMPILE_WORK)
    recompiled = [s.name for s in trace.steps if any(compiling[op.name] for op in s.cpu_ops)]
    # "Torch-Compiled Region: F/C": compiled frame F's C-th compilation. Two frames (a
    # prefill and a decode step compiled apart) are not a recompile; F/0 beside F/1 is.
    regions = {
        re.sub(r"^Torch-Compiled Region: ", "", name)
        for name in compiling
        if name.startswith("Torch-Compiled")
    }
    frames = [r.split("/")[0] for r in regions]
    again = sorted(r for r in regions if frames.count(r.split("/")[0]) > 1)
    if recompiled or again:
        where = steps_text(recompiled) if recompiled else f"regions {again}"
        out.append(
            Finding(
                "health",
                f"compilation inside the recorded steps ({where}): a "
                "recompile, so these steps do not show the steady state",
                problem=True,
            )
        )
    return out


def _out_of_order(trace: Trace) -> list[Finding]:
    """Work on one stream that ends inside work started before it there (analyses.streams)."""
    found = streams.out_of_order(trace)
    devices = {f["device"] for f in found}
    out = []
    for f in found:
        where = f"stream {f['stream']}" + (f" of device {f['device']}" if len(devices) > 1 else "")
        n = f["inside"]
        out.append(
            Finding(
                "health",
                f"kernels overlap on {where}: {n} start{'s' if n == 1 else ''} after another "
                f"there and end{'s' if n == 1 else ''} before it does, which one stream never "
                "runs (its work ends in order): a broken clock, or traces merged into one file; "
                "the GPU times read from this stream are not to be trusted",
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
        f"inside the recorded steps, in {steps_text(where)}: the caching allocator grew "
        "during the steps (e.g. the script keeps every step's output alive), so these steps "
        "are not steady state and their CPU time is inflated",
        us=total / len(trace.steps),
        next="free what each step allocates (or warm up until the pool stops growing)",
    )


def _bound(trace: Trace) -> Finding | None:
    """The verdict from each step's GPU window (analyses.idle): the share of it the GPU spent
    waiting for the host's launches. A GPU that lags the host is busy its whole window,
    whatever the CPU's step takes; one that starves waits on the host most of it."""
    if not trace.steps:
        return None
    cpu = cpu_time(trace)
    unit = "in the window" if trace.unit == "window" else "per step"
    if not trace.gpu_all:
        where = f"{trace.device}: " if trace.device else ""
        return Finding(
            "bound",
            f"{'CPU-only trace' if trace.device is None else where + 'no GPU events recorded'}"
            f": {cpu:.0f} us of CPU time {unit}, no GPU side",
        )
    b = idle.bound(trace)
    window, busy, waits, other, share = (
        b["window_us"], b["busy_us"], b["host_wait_us"], b["other_us"], b["host_share"]
    )  # fmt: skip
    warm = _warm_up(trace)
    if share >= 0.5 and sum(warm.values()) >= 0.25 * waits:
        what = ", ".join(f"{name} {duration(us)}" for name, us in warm.items() if us)
        return Finding(
            "bound",
            f"warm-up, not steady state: the GPU waits for the host {waits:.0f} us of its "
            f"{window:.0f} us window {unit}, and first-call work fills the host's time "
            f"({what}): these are first calls, not the loop's cost",
            us=waits,
            next="profile after warm-up: schedule(wait=1, warmup=1, active=2) with prof.step() "
            "per iteration, and keep the first iterations out of the recording",
        )
    seen = (f"the GPU is busy {busy:.0f} us of its {window:.0f} us window {unit} and waits "
            f"for the host's launches {waits:.0f} us of it ({share:.0%}); the CPU's step takes "
            f"{cpu:.0f} us")  # fmt: skip
    if b["label"] == "host-bound":
        return Finding(
            "bound",
            f"overhead-bound: {seen}: the GPU mostly waits for launches",
            us=waits,
            next=launch_fix(trace),
        )
    if b["label"] == "stalled":
        return Finding(
            "bound",
            f"stalled: {seen}; the GPU sits idle {other:.0f} us of it ({other / window:.0%}) "
            "with work already queued: waiting on an event, another stream, a copy or other "
            "ranks, not on the host",
            us=other,
            next="the syncs, copies and collectives below: what the queued work waits for",
        )
    if b["label"] == "GPU-bound":
        return Finding(
            "bound",
            f"GPU-bound: {seen}: the launches keep ahead of the GPU",
            next="the top kernels and classes below are where the time goes",
        )
    if b["host_paced"] and share <= 0.1:
        return Finding(
            "bound",
            f"balanced: {seen}; the host works {b['host_work_us']:.0f} us of it (syncs aside), "
            f"longer than the GPU is busy, and the queue drains: the launches do not keep "
            "ahead of the GPU, the host paces the step (the profiler inflates its part)",
            us=waits,
        )
    return Finding(
        "bound",
        f"balanced: {seen} (the profiler inflates the CPU's part); larger shapes tip it GPU-bound",
        us=waits,
    )


AUTOTUNE_SYNCS = frozenset({"cudaEventSynchronize", "cudaStreamSynchronize"})
MODULE_LOADS = re.compile(r"^(cuModuleLoad|cuLibraryLoad|cudaGetDeviceProperties)")


def _cudnn(op) -> bool:
    return "cudnn" in op.name


def _warm_up(trace: Trace) -> dict[str, float]:
    """First-call work inside the recorded steps, per step (median): the allocator growing,
    cuDNN timing its algorithms (syncs inside a convolution op: benchmark mode), kernels and
    libraries loaded."""
    rows = []
    cudnn = innermost(_cudnn)  # one for the trace: a sync in each op of a deep nest walks it once
    for step in trace.steps:
        row = {"allocator growth": 0.0, "cuDNN autotuning": 0.0, "module loading": 0.0}
        for call in step.runtime:
            if call.name in ALLOCATOR_CALLS:
                row["allocator growth"] += call.dur
            elif MODULE_LOADS.match(call.name):
                row["module loading"] += call.dur
            elif call.name in AUTOTUNE_SYNCS and cudnn(call.launcher) is not None:
                row["cuDNN autotuning"] += call.dur
        rows.append(row)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}


def _syncs(trace: Trace) -> Finding | None:
    """Host-stalling synchronizations, by the time they blocked the host per step."""
    rows: dict[str, dict] = {}
    for step in trace.steps:
        for row in syncs.step(step):
            got = rows.setdefault(row["what"], {"count": 0, "us": 0.0, "by": row["by"],
                                                "types": row["by_types"]})  # fmt: skip
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
    # What a sync costs is the GPU idling after it while the host queues work again: at most
    # the GPU's host wait, nothing where the GPU never waits (the host blocked on a GPU that
    # stays busy: a GPU-bound loop throttling its host).
    waits = (
        statistics.median(p["host_wait_us"] for p in idle.split(trace)) if trace.gpu_all else total
    )
    stake = min(total, waits)
    if trace.gpu_all and stake < 0.01 * total:
        return Finding(
            "sync",
            f"the host waits for the GPU {total:.0f} us per step ({parts}) while the GPU stays "
            "busy: the loop is GPU-bound and the sync only throttles the host, at no cost",
            us=stake,
        )
    top = max(rows.values(), key=lambda r: r["us"])  # the op behind most of it: its own fix
    return Finding(
        "sync",
        f"the host stops for the GPU {total:.0f} us per step ({parts}); the GPU then waits "
        f"for new launches up to {waits:.0f} us per step",
        us=stake,
        next=sync_fix(top["by"], top["types"])
        or "keep values on the GPU (no .item()/.cpu() inside the step), pin host memory "
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
                f"{steps_text([' '.join(h) or '-' for h in distinct])}; recompiles)"
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
    end = sync.ts + sync.dur
    # GPU work launched before the sync and still running during it: the queue draining
    queued = [
        i for i in trace.gpu_all
        if i.call is not None and i.call.ts < sync.ts and i.ts < end and i.ts + i.dur > sync.ts
    ]  # fmt: skip
    during = intervals.union((max(i.ts, sync.ts), min(i.ts + i.dur, end)) for i in queued)
    drained = intervals.length(during)
    last = max((i.ts + i.dur for i in queued), default=None)
    # It waited for that work if the work ran until (nearly) the sync returned: the GPU's
    # queue can drain with gaps (NCCL waits, copies), so its busy share is no test.
    if sync.dur > 0 and last is not None and end - last <= max(50.0, 0.01 * sync.dur):
        return Finding(
            "profiler",
            f"cudaDeviceSynchronize after the last step ({sync.dur:.0f} us) waits for the GPU to "
            f"finish work still queued ({len(queued)} GPU operations, busy {drained:.0f} us of "
            "it, the last ending just before it returns): the last steps' GPU time, not the "
            "profiler's",
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


def _generation(trace: Trace) -> Finding | None:
    """Per decode token: launch-bound (the GPU waits on the host) or GPU-bound."""
    g = generation.read(trace)
    if g is None:
        return None
    d = g["decode"]
    per, wait = d["per_token_us"]["median"], d["host_wait_us"]
    prefill = f"; prefill {g['prefill']['wall_us']:.0f} us" if g["prefill"] else ""
    head = f"decode {per:.0f} us per token over {d['tokens']} profiled decode steps{prefill}"
    if g["bound"] is None:
        return Finding("generation", f"{head} (CPU only: launch- or bandwidth-bound not told)")
    launches = ", ".join(f"{n} {kind}" for kind, n in sorted(d["launches"].items()))
    share = f"{d['host_share']:.0%} of its {d['window_us']:.0f} us GPU window"  # [bound]'s
    if g["bound"] == "launch":
        return Finding(
            "generation",
            f"{head}: launch-bound, the GPU waits on the host {wait:.0f} us of each token "
            f"({share}); {d['kernels']:g} kernels per token, launch calls: {launches}",
            us=wait,
            next="CUDA graphs: a token's kernels replayed with one launch (torch.cuda.graph, or "
            "torch.compile(mode='reduce-overhead'))"
            + ("" if compiled(trace) else "; torch.compile alone launches fewer kernels"),
        )
    if g["bound"] == "stalled":
        other = d["other_us"]
        return Finding(
            "generation",
            f"{head}: stalled, the GPU idle {other:.0f} us of each token with work queued "
            f"({other / d['window_us']:.0%} of its window; host wait {wait:.0f} us)",
            us=other,
            next="what the queued work waits for: the syncs, copies and collectives below",
        )
    if g["bound"] == "balanced":  # the host's part and the GPU's both count
        return Finding(
            "generation",
            f"{head}: balanced, the GPU busy {d['gpu_busy_us']:.0f} us of each token and "
            f"waiting on the host {wait:.0f} us ({share}); {d['kernels']:g} kernels per token, "
            f"launch calls: {launches}",
            us=wait,
            next="the host's part first: what the loop runs on the CPU each token beside the "
            "launches (sampling, stopping checks, copies to the host); then the GPU's: more "
            "sequences per step, quantized weights",
        )
    return Finding(
        "generation",
        f"{head}: GPU-bound, busy {d['gpu_busy_us']:.0f} us of each token (host wait "
        f"{wait:.0f} us); at a small batch each token reads every weight and the KV cache "
        "once: bandwidth-bound",
        next="more sequences per step (the weights are read once for all), quantized weights "
        "(fewer bytes per token), a smaller KV cache (fewer KV heads, an fp8 cache)",
    )


def first(trace: Trace) -> list[Finding | None]:
    """The rules ranked before the kernels' (ties keep this order)."""
    return [
        _allocator(trace),
        _bound(generation.decode_only(trace)),  # the per-step table's steps, its figures
        _generation(trace),
        _syncs(trace),
        _exposed_comm(trace),
        _cold_start(generation.decode_only(trace)),
    ]


def last(trace: Trace) -> list[Finding | None]:
    """The rules ranked after the kernels'."""
    decode = generation.decode_only(trace)
    return [*_compile_rows(decode), _end_sync(trace), _variation(decode)]
