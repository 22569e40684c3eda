"""Collectives on one rank: what each moved, how long it took, and how much of the
communication the compute hid.

Kind: from torch's record (`Collective name` on the NCCL kernel or on record_param_comms),
else from the kernel's name (ncclDevKernel_AllGather_..., ncclKernel_SendRecv_...).

Bus bandwidth, nccl-tests' busbw: bytes / time x a factor per kind for N ranks in the
process group (the group's size, not the world's): all-reduce 2(N-1)/N; all-gather,
reduce-scatter and all-to-all (N-1)/N; broadcast, reduce, send/recv 1. Bytes: the larger of
the message's input and output (all-gather's output and reduce-scatter's input are the whole
buffer, as nccl-tests counts them), in elements x the element size.

Per rank and step: communication time (union of the collective kernels), its overlap with
compute kernels and the exposed part (communication while no compute runs), by union.
"""

from __future__ import annotations

import math
import re
import statistics

from tracereader.analyses import breakdown
from tracereader.analyses.breakdown import is_comm
from tracereader.analyses.nesting import innermost
from tracereader.trace import intervals
from tracereader.trace.model import ELEMENT_BYTES, CpuOp, GpuItem, Step, Trace, per_step

# kind -> (pattern over torch's collective name or the kernel's name, bus factor of N)
KINDS = (
    ("all-reduce", re.compile(r"all_?reduce", re.I), lambda n: 2 * (n - 1) / n),
    ("all-gather", re.compile(r"all_?gather", re.I), lambda n: (n - 1) / n),
    ("reduce-scatter", re.compile(r"reduce_?scatter", re.I), lambda n: (n - 1) / n),
    ("all-to-all", re.compile(r"all_?to_?all|alltoall", re.I), lambda n: (n - 1) / n),
    ("broadcast", re.compile(r"broadcast", re.I), lambda n: 1.0),
    ("send/recv", re.compile(r"send|recv", re.I), lambda n: 1.0),
    ("reduce", re.compile(r"reduce", re.I), lambda n: 1.0),
)


# The CPU ops that issue a collective, whose names say which (nccl:_all_gather_base, ...),
# and torch's record_param_comms, whose name does not
ISSUING_OP = re.compile(
    r"^(c10d::|_c10d_functional::|c10d_functional::|record_param_comms$|nccl:|gloo:)"
)


def kind(item: GpuItem) -> str:
    """torch's record of the collective, else the op that issued it, else the kernel's name:
    NCCL runs some collectives as ncclKernel_SendRecv_* (seen for all-gathers, reduce-scatters
    and all-reduces in a 16-rank A100 trace), so its name alone can mislead."""
    found = _record(item).get("Collective name")
    if found:
        return kind_of(found)
    op = _up(item, 0)
    return kind_of(op.name if op is not None else item.name)


def _issues(op: CpuOp) -> bool:
    return bool(ISSUING_OP.match(op.name)) and kind_of(op.name) != "other"


def _records(op: CpuOp) -> bool:
    return "Collective name" in op.args


def _has_input(op: CpuOp) -> bool:
    return largest_input(op) is not None


@per_step
def _around(s: Step) -> tuple:
    """For the ops of one step, the innermost op around an op (itself included) that issues
    a collective of a known kind, that records one, that recorded an input: asked of every
    collective kernel, so each kept (nesting) rather than walked up the nest per kernel."""
    return innermost(_issues), innermost(_records), innermost(_has_input)


def _up(item: GpuItem, which: int) -> CpuOp | None:
    """_around's `which`th answer for the op that launched `item` (None: none launched it)."""
    if item.launcher is None or item.call is None or item.call.step is None:
        return None
    return _around(item.call.step)[which](item.launcher)


def kind_of(text: str) -> str:
    """The kind a collective's name says (a kernel's, torch's record, a c10d op's:
    c10d::_allgather_base_, c10d::_reduce_scatter_base_, gloo:all_reduce)."""
    for name, pattern, _ in KINDS:
        if pattern.search(text):
            return name
    return "other"


def bus_factor(kind_name: str, n: int) -> float | None:
    for name, _, factor in KINDS:
        if name == kind_name and n > 0:
            return factor(n)
    return None


def _record(item: GpuItem):
    """The args torch recorded about the collective: the kernel's own (torch 2.1 and later),
    else those of the record_param_comms op that issued it."""
    if "Collective name" in item.args or "In msg nelems" in item.args:
        return item.args
    op = _up(item, 1)
    return op.args if op is not None else {}


def message(item: GpuItem) -> tuple[int | None, str]:
    """(bytes, how they were read) of one collective, or (None, "")."""
    rec = _record(item)
    size = ELEMENT_BYTES.get(rec.get("dtype"))
    counts = [rec.get(k) for k in ("In msg nelems", "Out msg nelems")]
    counts = [c for c in counts if type(c) is int and c >= 0]
    if size and counts:
        n = max(counts)
        return n * size, f"{rec['dtype']} x{n}"
    op = _up(item, 2)  # older traces: the issuing op's recorded inputs
    if op is not None:
        return largest_input(op)
    return None, ""


def _size(shape, dtype) -> tuple[int, str] | None:
    if dtype not in ELEMENT_BYTES or not isinstance(shape, (list, tuple)) or not shape:
        return None
    if not all(type(d) is int and d >= 0 for d in shape):
        return None
    return math.prod(shape) * ELEMENT_BYTES[dtype], f"{dtype.removeprefix('c10::')} {list(shape)}"


def largest_input(op) -> tuple[int, str] | None:
    """The largest tensor input an op recorded (dims and type), as (bytes, 'type [dims]'):
    a collective's whole buffer (all-gather's output, reduce-scatter's input: c10d's ops
    take the output first, so the first input is the shard of one of them)."""
    dims, types = op.args.get("Input Dims"), op.args.get("Input type")
    sizes = [_size(shape, dtype) for shape, dtype in zip(dims or (), types or (), strict=False)]
    return max((found for found in sizes if found), default=None, key=lambda f: f[0])


def group_size(item: GpuItem, trace: Trace) -> int | None:
    """The process group's size: recorded with the collective, else from distributedInfo's
    pg_config when one group is named, else the world size."""
    rec = _record(item)
    size = rec.get("Group size")
    if type(size) is int and size > 0:
        return size
    ranks = rec.get("Process Group Ranks")
    if isinstance(ranks, str) and ranks.startswith("["):
        found = [r for r in ranks.strip("[]").split(",") if r.strip()]
        if found:
            return len(found)
    info = trace.meta.get("distributedInfo")
    if isinstance(info, dict):
        groups = info.get("pg_config")
        if isinstance(groups, list) and len(groups) == 1 and isinstance(groups[0], dict):
            size = groups[0].get("pg_size")
            if type(size) is int and size > 0:
                return size
        world = info.get("world_size")
        if type(world) is int and world > 0:
            return world
    return None


@per_step  # the summary and the findings both read it
def step(s: Step, trace: Trace) -> dict:
    """Per step: communication time, overlap with compute, exposed, and each collective."""
    comm = [i for i in s.gpu if is_comm(i)]
    if not comm:  # most steps of most traces: the breakdown has the compute time already
        compute_us = breakdown.step(s)["compute_us"]
        return {
            "comm_us": 0.0,
            "overlap_us": 0.0,
            "exposed_us": 0.0,
            "compute_us": compute_us,
            "collectives": [],
        }
    compute = [i for i in s.gpu if i.kind == "kernel" and not is_comm(i)]
    comm_u, compute_u = intervals.of(comm), intervals.of(compute)
    comm_us = intervals.length(comm_u)
    overlap = intervals.overlap(comm_u, compute_u)
    calls = []
    for item in comm:
        size, shape = message(item)
        n = group_size(item, trace)
        k = kind(item)
        factor = bus_factor(k, n) if n else None
        calls.append(
            {
                "name": item.name,
                "kind": k,
                "ts": item.ts,
                "us": item.dur,
                "bytes": size,
                "shape": shape,
                "group": n,
                "bus_GBps": factor * size / (item.dur * 1e3)
                if size and factor and item.dur > 0
                else None,
                "launch_ts": item.call.ts if item.call is not None else None,
            }
        )
    return {
        "comm_us": comm_us,
        "overlap_us": overlap,
        "exposed_us": comm_us - overlap,
        "compute_us": intervals.length(compute_u),
        "collectives": calls,
    }


def by_kind(steps: list[dict]) -> list[dict]:
    """Medians per kind over the steps' collectives: count per step, size, time, bus GB/s."""
    kinds: dict[str, dict] = {}
    for s in steps:
        for c in s["collectives"]:
            row = kinds.setdefault(
                c["kind"],
                {"kind": c["kind"], "n": 0, "sizes": [], "us": [], "bus": [], "group": set()},
            )
            row["n"] += 1
            row["us"].append(c["us"])
            if c["bytes"]:
                row["sizes"].append(c["bytes"])
            if c["bus_GBps"]:
                row["bus"].append(c["bus_GBps"])
            if c["group"]:
                row["group"].add(c["group"])
    out = []
    for row in kinds.values():
        out.append(
            {
                "kind": row["kind"],
                "per_step": row["n"] / max(len(steps), 1),
                "total_us": sum(row["us"]),
                "median_us": statistics.median(row["us"]),
                "median_bytes": statistics.median(row["sizes"]) if row["sizes"] else None,
                "median_bus_GBps": statistics.median(row["bus"]) if row["bus"] else None,
                "group": sorted(row["group"]),
            }
        )
    return sorted(out, key=lambda r: -r["total_us"])
