"""The first finding: why the step is slow, named as an expert names it, with what fixing THAT
would save and the fix for it (never one that cannot help it).

Every candidate gets a stake, the step time a fix would save (per step, median):

- memory that grows from step to step comes first whatever the time (analyses.growth);
- the host's items (analyses.hostside) where the host is the slower side: removing t us of the
  host's step leaves max(host - t, GPU busy), so the stake is the step less that. Items that
  one fix removes together are removed together: dispatch, the Python between ops and the
  autograd thread's backward all go with fewer, larger launches;
- the syncs inside the step: the GPU idle that follows them, at most what the step would lose
  if the host's own work and the GPU's overlapped (analyses.hostside.sync_costs);
- the GPU's items (analyses.gpuside): the GPU time a fix saves, where the GPU is the slower
  side or neither is; where the host is (host-bound), the step less max(host, busy - saved).

The largest stake is the cause, if it holds at least MIN_SHARE of the step; otherwise the
generic verdict stays first and says what it could not attribute.
"""

from __future__ import annotations

import statistics

from tracereader.analyses import breakdown, gpuside, growth, hostside, idle
from tracereader.judge.cause_text import GPU_TEXT, HOST_TEXT, growth_finding
from tracereader.judge.finding import Finding, step_time
from tracereader.trace.model import Trace

MIN_SHARE = 0.05  # a cause must hold this share of the step to be named first
HOST_CAUSE = {
    "compilation": "recompilation",
    "recompute": "recompute",
    "data loader": "data loader",
    "optimizer": "optimizer",
    "user code": "user code",
    "autograd thread": "launch overhead",
    "dispatch": "launch overhead",
    "Python between ops": "launch overhead",
}


def _busy(trace: Trace) -> float:
    if not trace.gpu_all:
        return 0.0
    return statistics.median(breakdown.step(s)["gpu_busy_us"] for s in trace.steps)


def _host_candidates(trace: Trace, host: dict, wall: float, busy: float) -> list[dict]:
    """Each host item: its own stake (ranks it) and what its fix removes (reported). The
    recomputed forward's fix removes its GPU work too (gpuside.recompute)."""
    work = host["host_us"] - host["us"]["syncs"]  # the host's own work, its waits taken out
    limit = max(work, busy)
    again = gpuside.recompute(trace) if host["us"]["recompute"] else None
    out = []
    for item, cause in HOST_CAUSE.items():
        t = host["us"][item]
        if not t or (not trace.gpu_all and cause == "launch overhead"):
            continue  # a CPU-only trace's ops compute on the CPU: there is no launch to save
        removed, gpu = t, 0.0
        if item in hostside.LAUNCH_BOUND:
            removed = sum(host["us"][k] for k in hostside.LAUNCH_BOUND)
        extra = {}
        if item == "recompute" and again:
            gpu, extra = again["gpu_us"], {**again, "host_us": t}
        own = limit - max(work - t, busy - gpu)
        fix = limit - max(work - removed, busy - gpu)
        culprit = again["culprit"] if extra else host["culprit"][item]
        out.append({**extra, "cause": cause, "item": item, "culprit": culprit,
                    "rank": min(own, wall), "us": min(fix, wall), "host_item_us": t})  # fmt: skip
    return out


def _sync_candidate(trace: Trace, host: dict, wall: float, busy: float) -> dict | None:
    costs = hostside.sync_costs(trace)
    if costs is None or not costs["us"]:
        return None
    blocked = host["us"]["syncs"]
    overlap = max(wall - max(host["host_us"] - blocked, busy), 0.0)
    stake = min(costs["us"], overlap)
    return {"cause": "sync", "item": "syncs", "culprit": costs["culprit"], "rank": stake,
            "us": stake, "costs": costs}  # fmt: skip


def _gpu_candidates(trace: Trace, host: dict, wall: float, busy: float) -> list[dict]:
    b = idle.bound(trace)
    host_bound = b is not None and b["label"] == "host-bound"
    floor = host["host_us"] - host["us"]["syncs"]  # the host's own work, its waits taken out
    out = []
    for found in gpuside.read(trace):
        if found["cause"] == "recompute" and host["us"]["recompute"]:
            continue  # judged with its host part (_host_candidates)
        saved = min(found["gpu_us"], busy)
        if host_bound:
            saved = max(wall - max(floor, busy - saved), 0.0)
        saved = min(saved, wall)
        out.append({**found, "item": found["cause"], "rank": saved, "us": saved})
    return out


def candidates(trace: Trace) -> list[dict]:
    """Every cause the trace shows with its stake (us per step), largest first."""
    if not trace.steps:
        return []
    wall = step_time(trace)
    host = hostside.read(trace)
    busy = _busy(trace)
    found = _host_candidates(trace, host, wall, busy)
    if trace.gpu_all:
        sync = _sync_candidate(trace, host, wall, busy)
        found += [sync] if sync else []
        found += _gpu_candidates(trace, host, wall, busy)
    return sorted(found, key=lambda c: -c["rank"])


def first(trace: Trace) -> Finding | None:
    """The cause named first, or None where no cause holds MIN_SHARE of the step."""
    if not trace.steps:
        return None
    grown = growth.read(trace)
    if grown is not None:
        return growth_finding(grown)
    found = candidates(trace)
    wall = step_time(trace)
    if not found or wall <= 0 or found[0]["rank"] < MIN_SHARE * wall:
        return None
    top = found[0]
    host = hostside.read(trace)
    text = GPU_TEXT.get(top["cause"]) if top["item"] == "recompute" else None
    text = text or HOST_TEXT.get(top["item"]) or GPU_TEXT[top["cause"]]
    message, fix = text(trace, top, host, wall)
    return Finding(
        "cause",
        message,
        us=top["us"],
        pct=100 * top["us"] / wall,
        next=fix,
        cause=top["cause"],
        culprit=top["culprit"],
    )


def unattributed(trace: Trace) -> str:
    """What a generic verdict could not attribute: the host's largest items, for its text."""
    host = hostside.read(trace)
    if host is None or not host["host_us"]:
        return ""
    parts = sorted(host["us"].items(), key=lambda kv: -kv[1])[:3]
    shown = ", ".join(f"{k} {100 * v / host['host_us']:.0f}%" for k, v in parts if v)
    return f"no single cause holds {MIN_SHARE:.0%} of the step; the host's step: {shown}"
