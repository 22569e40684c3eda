"""Read the traces of one multi-rank run side by side: per rank, compute against
communication; across ranks, who started each step late and who waited for whom in the
all-reduce; and the all-reduce's bandwidth against the link's.

    uv run explain traces/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager
    uv run explain traces/05_tp_mlp          # every run the folder holds
    uv run compare RUN_A RUN_B               # eager vs compiled, N=2 vs N=4

A run is the set of files `<stem>_rank<r>.json[.gz]` that one torchrun launch wrote, one per
rank, each with the `distributedInfo` torch's profiler records (rank, world size, backend);
a folder of them is what Holistic Trace Analysis reads too. Give the folder, or the folder
and the stem (the file name up to `_rank`) when the folder holds several runs.

Definitions (per rank and recorded step; the text prints medians over the steps):
- communication, on a GPU trace: the union of the intervals of the step's collective kernels
  (NCCL's); compute: the union of the intervals of the rest of its GPU work (kernels, memcpy,
  memset). On a CPU trace: the time the step's thread spends inside collective ops (c10d::*,
  _c10d_functional::*, record_param_comms, nccl:*, gloo:*; nested ones counted once), and
  compute is the rest of the step.
- exposed communication: the time during which a collective kernel runs and no other GPU work
  of the step does (the union of the collectives' intervals minus the union of the rest's).
  On a CPU trace all of the communication is exposed: the thread waits in it.
- skew: per step, the latest rank's step start minus the earliest's (ranks on one machine
  share its clock: `ts` plus the trace's baseTimeNanoseconds). The last rank to start is the
  straggler; the others wait for it inside the all-reduce.
- wait inside the all-reduce (GPU): for the k-th collective kernel of a step, the start of
  the last rank's kernel minus this rank's. The last rank's kernel waits for nobody: its
  duration is the transfer time.
- bus bandwidth: bytes / transfer time x nccl-tests' factor for the collective's kind and
  its process group's size N (all-reduce 2(N-1)/N; all-gather, reduce-scatter, all-to-all
  (N-1)/N; broadcast, send/recv 1: analyses.collectives), medians per kind; comparable
  across N, and with the link's. bytes: the reduced tensor's size,
  from the kernel's `In msg nelems` and `dtype` when the trace reader keeps them, else from
  the launching op's recorded input dims and type (record_shapes). A CPU trace gives no
  bandwidth: gloo reduces on a thread of its own, which the reader does not keep.
- the link: an all-reduce of a large buffer, measured by a lesson's --bench on the same kind
  of device, backend and rank count, cached in ~/.cache/profiling-pytorch/links.json; the
  commands look it up there and hand it to the reading (cross_ranks.with_link), a lesson
  hands what it measured: no analysis opens a file.

No torch import here: the trace commands stay light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from tracereader.analyses import collectives as coll
from tracereader.trace import intervals
from tracereader.trace.load import CpuOp, GpuItem, Step, Trace

# --- finding runs --------------------------------------------------------------------------


# --- one rank's trace, summarized -----------------------------------------------------------


@dataclass
class Collective:
    name: str
    ts: float  # on the machine's clock, microseconds
    dur: float
    bytes: int | None
    shape: str = ""
    kind: str = "all-reduce"
    group: int | None = None  # the process group's size
    launch_ts: float | None = None  # the host's launch call, on the machine's clock


@dataclass
class RankStep:
    name: str
    ts: float  # step start on the machine's clock, microseconds
    dur: float
    compute_us: float
    comm_us: float
    exposed_us: float
    collectives: list[Collective]
    # where the collectives ran with no compute kernel beside them, on the machine's clock
    exposed: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class RankReading:
    rank: int
    path: Path
    world: int | None
    backend: str | None
    device: str | None
    steps: list[RankStep]
    notes: list[str] = field(default_factory=list)
    job: str = ""  # distributedInfo but the rank: the same on every rank of one launch
    profile: list = field(default_factory=list)  # analyses.straggle's, per step (read_run's)


def is_collective_kernel(item: GpuItem) -> bool:
    return item.klass.cls == "collective"  # kernel_names.COLLECTIVE: one pattern for the reader


def collective_bytes(item: GpuItem) -> tuple[int, str] | None:
    """The message's size (analyses.collectives.message): from the kernel's own args, else
    from the op that issued it."""
    size, shape = coll.message(item)
    return (size, shape) if size else None


def _gpu_step(step: Step, base: float, trace: Trace) -> RankStep:
    comm = [i for i in step.gpu if is_collective_kernel(i)]
    # communication, compute and exposed by the one definition explain prints per rank
    # (compute: kernels; a copy or a memset hides no collective)
    times = coll.step(step, trace)
    collectives = []
    for item in comm:
        found = _collective(item.name, base + item.ts, item.dur, collective_bytes(item))
        found.kind = coll.kind(item)
        found.group = coll.group_size(item, trace)
        found.launch_ts = base + item.call.ts if item.call is not None else None
        collectives.append(found)
    return RankStep(
        name=step.name,
        ts=base + step.ts,
        dur=step.dur,
        compute_us=times["compute_us"],
        comm_us=times["comm_us"],
        exposed_us=times["exposed_us"],
        collectives=collectives,
        exposed=[
            (base + a, base + b)
            for a, b in intervals.subtract(
                intervals.of(comm),
                intervals.of(i for i in step.gpu if i.kind == "kernel" and i not in comm),
            )
        ],
    )


def _collective(name: str, ts: float, dur: float, size: tuple[int, str] | None) -> Collective:
    """A collective with its message size (bytes, what it was read from) when known."""
    return Collective(name, ts, dur, size[0] if size else None, size[1] if size else "")


def issued_collectives(ops) -> list[tuple[CpuOp, str]]:
    """The collectives a thread's ops issued, each with its kind: one per nest of collective
    ops, its outermost op, unless a wait (which belongs to the collective issued before it)."""
    found = []
    for op in ops:
        # gloo:* ops are gloo's worker threads carrying out what a c10d op issued
        if not coll.ISSUING_OP.match(op.name) or "wait" in op.name or op.name.startswith("gloo:"):
            continue
        if op.parent is None or not coll.ISSUING_OP.match(op.parent.name):
            found.append((op, coll.kind_of(op.name)))
    return found


def _cpu_step(step: Step, base: float, trace: Trace) -> RankStep:
    ops = [op for op in step.cpu_ops if coll.ISSUING_OP.match(op.name)]
    comm = intervals.length(intervals.union((op.ts, op.end) for op in ops))
    collectives = []
    for op, kind in issued_collectives(step.cpu_ops):
        found = _collective(op.name, base + op.ts, op.dur, coll.largest_input(op))
        found.kind = kind
        collectives.append(found)
    return RankStep(
        name=step.name,
        ts=base + step.ts,
        dur=step.dur,
        compute_us=max(step.dur - comm, 0.0),
        comm_us=comm,
        exposed_us=comm,
        collectives=collectives,
    )


# The largest job a trace could come from: a world size or rank beyond it is damage (a
# reading that made one entry per rank of a world of 10^12 would never finish).
MAX_WORLD = 1 << 20


def _count(value, least: int) -> bool:
    """A world size (least 1) or a rank (least 0) a real job could have."""
    return type(value) is int and least <= value < MAX_WORLD


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:20] + "..."


def base_us(trace: Trace) -> float:
    """The trace's clock offset: ts plus this is the machine's clock (baseTimeNanoseconds)."""
    base_ns = trace.meta.get("baseTimeNanoseconds")
    return base_ns / 1e3 if isinstance(base_ns, (int, float)) and math.isfinite(base_ns) else 0.0


def summarize(trace: Trace, rank_in_name: int) -> RankReading:
    """One rank's trace, reduced to what the cross-rank reading needs (the trace itself can
    then be dropped: N traces of hundreds of MB need not sit in memory together)."""
    info = trace.meta.get("distributedInfo")
    notes = []
    if not isinstance(info, dict):
        info = {}
        notes.append(
            f"{trace.path.name} has no distributedInfo (the profiler records it when a process "
            "group is initialised): rank taken from the file name"
        )
    world = info.get("world_size")
    if "world_size" in info and not _count(world, 1):
        notes.append(
            f"{trace.path.name} records world_size {_shown(world)}, which no job has: "
            "taken as unknown"
        )
    world = world if _count(world, 1) else None
    rank = info.get("rank")
    if "rank" in info and not (_count(rank, 0) and (world is None or rank < world)):
        notes.append(
            f"{trace.path.name} records rank {_shown(rank)}"
            + (f" of {world}" if world else "")
            + ", which cannot be: rank taken from the file name"
        )
    rank = rank if _count(rank, 0) and (world is None or rank < world) else rank_in_name
    if "rank" not in info and not notes:
        notes.append(f"{trace.path.name} records no rank: taken from the file name")
    if rank != rank_in_name:
        notes.append(f"{trace.path.name} says it is rank {rank}")
    backend = info.get("backend") if isinstance(info.get("backend"), str) else None
    base = base_us(trace)
    read = _gpu_step if trace.on_gpu else _cpu_step
    steps = [read(step, base, trace) for step in trace.steps]
    job = repr(sorted((str(k), repr(v)) for k, v in info.items() if k != "rank"))
    return RankReading(rank, trace.path, world, backend, trace.device, steps, notes, job)


# Ranks of one launch start their steps within seconds of each other (NCCL's set-up is the
# slowest part); minutes apart, they were not started together.
APART_US = 300e6


def not_one_job(readings: list[RankReading]) -> list[str]:
    """Why traces read as ranks of one run cannot be that (ranks of two launches under one
    stem, a folder of one lesson's eager and compiled traces): different distributedInfo,
    first steps minutes apart, or not one collective between them. Empty where nothing says so."""
    if len(readings) < 2:
        return []
    said = []
    names = ", ".join(r.path.name for r in readings[:4]) + (", ..." if len(readings) > 4 else "")
    jobs = {r.job for r in readings if r.job != repr([])}
    if len(jobs) > 1:
        said.append(f"the traces record different distributedInfo ({names}): not one launch")
    starts = [r.steps[0].ts for r in readings if r.steps]
    if len(starts) > 1 and max(starts) - min(starts) > APART_US:
        apart = (max(starts) - min(starts)) / 1e6
        said.append(
            f"the ranks' first steps are {apart:,.0f} s apart ({names}): ranks of one launch "
            "start within seconds; these are separate runs, their skew means nothing"
        )
    if not any(c for r in readings for s in r.steps for c in s.collectives):
        said.append(
            f"no rank issued a collective in the recorded steps ({names}): nothing ties these "
            "traces to one job; read each alone (explain FILE) if they are separate runs"
        )
    return said


# --- across ranks --------------------------------------------------------------------------
