"""A generation's trace read as its two phases (08_generate, or any loop that annotates them):
the steps holding a `prefill` range (the prompt at once) apart from those holding a `decode`
range (one new token each). Prefill is not a slow decode step, so the per-token time, the GPU's
wait on the host per token and the launches per token are read over the decode steps alone.

Also what a decode step's guess is checked with: the runtime calls that put work on the GPU
(a CUDA graph's launch against per-kernel launches), the rows M of its GEMMs (from
record_shapes' input dims of aten::mm/addmm: batch x prompt in prefill, batch in decode) and
the key length its attention read (the cache's)."""

from __future__ import annotations

import statistics
from collections import Counter

from tracereader.analyses import breakdown, idle
from tracereader.trace.model import Step, Trace, per_step

PHASES = ("prefill", "decode")
# idle.bound's label (the one rule, also the [bound] finding's) as a generation's verdict
VERDICT = {"host-bound": "launch", "GPU-bound": "gpu", "balanced": "balanced",
           "stalled": "stalled"}  # fmt: skip
WORDS = {"launch": "launch-bound", "gpu": "GPU-bound", "balanced": "balanced",
         "stalled": "stalled (the GPU idle with work queued)"}  # fmt: skip
GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")
KERNEL_LAUNCH = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")
COPY_CALL = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset")
GEMM_OPS = ("aten::mm", "aten::addmm")
ATTENTION_OP = "aten::scaled_dot_product_attention"


@per_step  # the summary, the findings and the phases' reading each ask, over every op
def split(trace: Trace) -> dict[str, list[Step]]:
    """The recorded steps by the phase annotation they hold ({} for a trace with neither);
    kept in the trace's memo: read it, never change it."""
    found: dict[str, list[Step]] = {p: [] for p in PHASES}
    for step in trace.steps:
        names = {op.name for op in step.cpu_ops if op.depth <= 1}
        for phase in PHASES:
            if phase in names:
                found[phase].append(step)
                break
    return found if found["decode"] else {}


def decode_only(trace: Trace) -> Trace:
    """A generation's decode steps alone (the trace itself otherwise): its prefill step is
    another kind of step, not a cold start, a recompile or a variation of decode's. Their
    windows are those of the whole trace: the decode steps follow the prefill, one after
    another."""
    phases = split(trace)
    return trace.with_steps(list(phases["decode"])) if phases else trace  # the memo stays as is


def launch_calls(step: Step) -> Counter:
    """The runtime calls of a step that put work on the GPU: graph, kernel, copy."""
    kinds: Counter = Counter()
    for call in step.runtime:
        if call.name.startswith(GRAPH_LAUNCH):
            kinds["graph"] += 1
        elif call.name.startswith(KERNEL_LAUNCH):
            kinds["kernel"] += 1
        elif call.name.startswith(COPY_CALL):
            kinds["copy"] += 1
    return kinds


def _dims(step: Step, names: tuple[str, ...]):
    for op in step.cpu_ops:
        dims = op.args.get("Input Dims") if op.name in names else None
        if dims:  # a tuple of shapes, each a tuple (the loader's)
            yield dims


def gemm_rows(step: Step) -> Counter:
    """The GEMMs' rows M (their first operand's), counted: empty without record_shapes or
    where no CPU op issues them (a CUDA graph's replay)."""
    return Counter(dims[0][0] for dims in _dims(step, GEMM_OPS) if dims[0])


def key_lengths(step: Step) -> list[int]:
    """The number of keys each attention call read (its key's dims [b, heads, keys, hd])."""
    return [
        dims[1][2] for dims in _dims(step, (ATTENTION_OP,)) if len(dims) > 1 and len(dims[1]) == 4
    ]


def _median(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _class_medians(rows: list[dict]) -> dict[str, float]:
    """Per kernel class, the median over the steps of its union (0 in a step without it)."""
    names = sorted({name for r in rows for name in r["by_class_us"]})  # not a set's order
    return {n: statistics.median(r["by_class_us"].get(n, 0.0) for r in rows) for n in names}


def read(trace: Trace) -> dict | None:
    """The two phases, each over its steps (None when the trace shows no decode step):
    prefill's time (as a token's: idle.step_times) and GPU busy time; per decode token (the
    headline) its time, GPU busy and its union per kernel class, the GPU's wait on the host,
    kernels and launch calls, and
    the verdict over the decode steps by idle.bound's rule: "launch" (host-bound), "gpu",
    "balanced" (the GPU waits on the host a tenth to half of its window) or "stalled"."""
    phases = split(trace)
    if not phases:
        return None
    decode = phases["decode"]
    rows = [breakdown.step(s) for s in decode]
    gpu = trace.on_gpu  # a CPU trace has no GPU time to split
    window = {id(s): p for s, p in zip(trace.steps, idle.split(trace), strict=True)}
    waits = [window[id(s)]["host_wait_us"] for s in decode if id(s) in window] if gpu else [0.0]
    # a token's time: the longer of the host's step and the GPU's window for it (with CUDA
    # graphs the host queues a token in well under a millisecond; the GPU takes its time)
    times = dict(zip(map(id, trace.steps), idle.step_times(trace), strict=True))
    per_token = _median([times[id(s)] if id(s) in times else s.dur for s in decode])
    launches = launch_calls(decode[-1])
    out = {
        "prefill": None,
        "decode": {
            "tokens": len(decode),
            "per_token_us": per_token,
            "gpu_busy_us": statistics.median(r["gpu_busy_us"] for r in rows) if gpu else None,
            "host_wait_us": statistics.median(waits) if gpu else None,
            "kernels": statistics.median(r["kernels"] for r in rows),
            "launches": dict(launches),
            "by_class_us": _class_medians(rows) if gpu else {},
        },
        "bound": None,
    }
    if phases["prefill"]:
        prefill = phases["prefill"]
        out["prefill"] = {
            "steps": len(prefill),
            "wall_us": statistics.median(times[id(s)] for s in prefill),
            "gpu_busy_us": statistics.median(breakdown.step(s)["gpu_busy_us"] for s in prefill)
            if gpu
            else None,
        }
    verdict = idle.bound(decode_only(trace)) if gpu else None
    out["bound"] = VERDICT[verdict["label"]] if verdict else None
    if verdict:  # the verdict's own figures: the GPU's window per token and its shares
        out["decode"].update({k: verdict[k] for k in ("window_us", "host_share", "other_us")})
    return out
