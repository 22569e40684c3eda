"""The referee of tools/dev/reader_validation/hta_compare.py: a trace's raw GPU events read with
json.load and nothing else, their union per rank, and idle / compute / non-compute, the
comm/compute overlap, the time per kind of collective and HTA's idle split, by HTA 0.5.0's
definitions (docs/reader_vs_hta.md) restated as interval arithmetic."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path

# GPU work in both formats: torch >= 1.10 (`kernel`, `gpu_memcpy`) and 2021's (`Kernel`, `Memcpy`)
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
# HTA 0.5.0's kernel types (hta/utils/utils.py), restated: communication is an NCCL kernel,
# memory a copy or set, computation anything that is neither nor a sync.
COMM_RE = re.compile(r"nccl.*Kernel")
MEMORY_RE = re.compile(r"Memcpy|Memset|dma")
NOT_COMPUTE_RE = re.compile(r"(nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
# a collective's kind from its NCCL kernel's name (ncclDevKernel_AllGather_RING_LL, ...)
KINDS = (
    ("all-reduce", re.compile(r"all_?reduce", re.I)),
    ("all-gather", re.compile(r"all_?gather", re.I)),
    ("reduce-scatter", re.compile(r"reduce_?scatter", re.I)),
    ("all-to-all", re.compile(r"all_?to_?all", re.I)),
    ("broadcast", re.compile(r"broadcast", re.I)),
    ("send/recv", re.compile(r"send|recv", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
)
IDLE_KINDS = ("host_wait", "kernel_wait", "other")
# HTA's consecutive_kernel_delay: 30, in the trace's unit (microseconds), not the 30 ns its
# docstring says
HTA_KERNEL_WAIT_US = 30.0


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both of two unions (each sorted and disjoint)."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def kind_of(name: str) -> str:
    return next((k for k, pattern in KINDS if pattern.search(name)), "other")


def idle_split(events: list[dict]) -> dict:
    """HTA's idle time breakdown restated, summed over streams: per stream, in start order, the
    gap before each event (negative where two overlap) is host wait when its runtime call
    started after the previous event's end, else kernel wait under HTA_KERNEL_WAIT_US, else
    other. Events need "stream" and "launch_ts" (None without a runtime call)."""
    out = dict.fromkeys(IDLE_KINDS, 0.0)
    streams: dict = {}
    for e in events:
        streams.setdefault(e.get("stream"), []).append(e)
    for on_stream in streams.values():
        on_stream.sort(key=lambda e: e["ts"])
        for prev, e in itertools.pairwise(on_stream):
            prev_end, gap = prev["ts"] + prev["dur"], e["ts"] - (prev["ts"] + prev["dur"])
            if e.get("launch_ts") is not None and e["launch_ts"] > prev_end:
                out["host_wait"] += gap
            elif gap < HTA_KERNEL_WAIT_US:
                out["kernel_wait"] += gap
            else:
                out["other"] += gap
    return out


def breakdown(events: list[dict]) -> dict | None:
    """Span, busy, idle / compute / non-compute % of the span, comm time and its overlap with
    compute, the summed time of each kind of collective and HTA's idle split, of GPU events
    [{"ts", "dur", "name"}, optionally "stream" and "launch_ts"]."""
    if not events:
        return None
    every = union([(e["ts"], e["ts"] + e["dur"]) for e in events])
    compute = union(
        [(e["ts"], e["ts"] + e["dur"]) for e in events if not NOT_COMPUTE_RE.match(e["name"])]
    )
    comm = union([(e["ts"], e["ts"] + e["dur"]) for e in events if COMM_RE.match(e["name"])])
    span = every[-1][1] - every[0][0]
    busy, comp, comm_us = length(every), length(compute), length(comm)
    by_kind: dict[str, float] = {}
    for e in events:
        if COMM_RE.match(e["name"]):
            k = kind_of(e["name"])
            by_kind[k] = by_kind.get(k, 0.0) + e["dur"]
    pct = (lambda us: 100.0 * us / span) if span > 0 else (lambda us: None)
    return {
        "span_us": span,
        "gpu_busy_us": busy,
        "idle_pct": pct(span - busy),
        "compute_pct": pct(comp),
        "non_compute_pct": pct(busy - comp),
        "comm_us": comm_us,
        "comm_overlap_pct": 100.0 * intersection(comm, compute) / comm_us if comm_us else None,
        "collectives_us": by_kind,
        "idle_split_us": idle_split(events),
    }


def read_json(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return {"traceEvents": data} if isinstance(data, list) else data


def raw_reading(path: Path) -> dict:
    """The referee's numbers for one file, in three scopes: every GPU event ("all"), those
    launched inside a ProfilerStep ("steps", None without steps) and those HTA keeps with the
    last step included ("hta": with two or more step names, GPU events whose correlation is a
    host event that starts before the last step ends); and "hta_events", HTA's scope with the
    host events that carry a `stream` arg added, as HTA counts them (None without any)."""
    data = read_json(path)
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict)]
    gpu, host_corr, stream_ops = [], [], []
    for e in events:
        if e.get("ph") != "X" or not isinstance(e.get("ts"), (int, float)):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if str(e.get("cat", "")).lower() in GPU_CATS:
            gpu.append(
                {
                    "ts": float(e["ts"]),
                    "dur": float(e.get("dur", 0) or 0),
                    "name": str(e.get("name", "")),
                    "corr": args.get("correlation"),
                    "stream": args.get("stream", e.get("tid")),
                }
            )
        else:
            if "correlation" in args:
                host_corr.append((float(e["ts"]), args["correlation"]))
            if args.get("stream", -1) != -1:  # Inductor's launcher ops carry "stream": 0
                stream_ops.append(
                    {"ts": float(e["ts"]), "dur": float(e.get("dur", 0) or 0), "name": e["name"]}
                )
    launched_at = dict((c, ts) for ts, c in host_corr)
    for g in gpu:
        g["launch_ts"] = launched_at.get(g["corr"])
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep")
        and str(e.get("cat", "")).lower() not in GPU_CATS | {"gpu_user_annotation"}
        and isinstance(e.get("ts"), (int, float))
    ]
    step_names = {str(e.get("name")) for e in events if "ProfilerStep" in str(e.get("name", ""))}
    in_steps = None
    if steps:
        launched = {c for ts, c in host_corr if any(a <= ts <= b for a, b in steps)}
        in_steps = [g for g in gpu if g["corr"] in launched]
    hta_scope = gpu
    if len(step_names) >= 2:
        last_end = max(b for _, b in steps) if steps else float("inf")
        kept = {c for ts, c in host_corr if ts <= last_end}
        hta_scope = [g for g in gpu if g["corr"] in kept]
        stream_ops = [o for o in stream_ops if o["ts"] <= last_end]
    info = data.get("distributedInfo")
    return {
        "file": str(path.resolve()),
        "rank": info.get("rank") if isinstance(info, dict) else None,
        "gpu_events": len(gpu),
        "all": breakdown(gpu),
        "steps": breakdown(in_steps) if in_steps is not None else None,
        "hta": breakdown(hta_scope),
        # what HTA takes for GPU events: also the host events with a stream arg
        "hta_events": breakdown(hta_scope + stream_ops) if stream_ops else None,
        "stream_ops": len(stream_ops),
    }
