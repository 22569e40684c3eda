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
- communication, on a GPU trace: the summed durations of the step's collective kernels
  (NCCL's); compute: the summed durations of the rest of its GPU work (kernels, memcpy,
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
  of device, backend and rank count, cached in ~/.cache/profiling-pytorch/links.json.

No torch import here: the trace commands stay light.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tracereader import caches as jsoncache
from tracereader.analyses import collectives as coll
from tracereader.read import intervals
from tracereader.read.load import CpuOp, GpuItem, Step, Trace, TraceError, load
from tracereader.units import cell

# A rank's trace, named the ways jobs name them: the lessons' `<stem>_rank<r>.json`, HTA's
# `rank-0.json.gz`, torchtitan's `rank0_trace.json`, plain `rank0.json.gz`.
RANK_FILE = re.compile(
    r"^(?P<stem>.*?)[_-]?rank[-_]?(?P<rank>\d+)(?:_trace)?(?:\.pt\.trace)?\.json(?P<gz>\.gz)?$"
)
TRACE_FILE = re.compile(r"\.json(\.gz)?$")


class RunError(Exception):
    """The path is not a readable multi-rank run."""


# --- finding runs --------------------------------------------------------------------------


def runs_at(path: str | Path) -> dict[Path, dict[int, Path]]:
    """The runs a path names: {folder/stem: {rank: file}}. A folder gives every run in it
    (files named by rank; else, where it holds folders such as torchtitan's iteration_N/,
    the runs inside them); a path that does not exist names the run whose files are
    `<path>_rank<r>.json[.gz]`. A folder of traces named anyhow is one run: ranks from their
    distributedInfo (read with the traces), here numbered in name order."""
    path = Path(path)
    try:
        if path.is_dir():
            folder, wanted = path, None
        elif not path.exists() and path.parent.is_dir():
            folder, wanted = path.parent, path.name
        else:
            return {}
        entries = sorted(folder.iterdir())
    except OSError:
        return {}
    runs: dict[Path, dict[int, Path]] = {}
    loose = []
    for entry in entries:
        if not entry.is_file():
            continue
        found = RANK_FILE.match(entry.name)
        if not found:
            if TRACE_FILE.search(entry.name):
                loose.append(entry)
            continue
        if wanted is not None and found["stem"] != wanted:
            continue
        stem = folder / found["stem"] if found["stem"] else folder
        runs.setdefault(stem, {}).setdefault(int(found["rank"]), entry)  # .json before .gz
    if wanted is None and not runs:
        if len(loose) > 1:
            return {folder: dict(enumerate(loose))}
        for entry in entries:  # iteration_N/ folders, each a run
            if entry.is_dir():
                inner = runs_at(entry)
                if all(p.parent == entry or p == entry for p in inner):
                    runs.update(inner)
    return runs


def is_run(path: str | Path) -> bool:
    """Whether `path` names rank traces (the explain/compare hook asks this)."""
    return bool(runs_at(path))


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


@dataclass
class RankReading:
    rank: int
    path: Path
    world: int | None
    backend: str | None
    device: str | None
    steps: list[RankStep]
    notes: list[str] = field(default_factory=list)


def is_collective_kernel(item: GpuItem) -> bool:
    return item.klass.cls == "collective"  # kernel_names.COLLECTIVE: one pattern for the reader


def collective_bytes(item: GpuItem) -> tuple[int, str] | None:
    """The message's size (analyses.collectives.message): from the kernel's own args, else
    from the op that issued it."""
    size, shape = coll.message(item)
    return (size, shape) if size else None


def _gpu_step(step: Step, base: float, trace: Trace) -> RankStep:
    comm = [i for i in step.gpu if is_collective_kernel(i)]
    rest = [i for i in step.gpu if not is_collective_kernel(i)]
    comm_union = intervals.of(comm)
    rest_union = intervals.of(rest)
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
        compute_us=sum(i.dur for i in rest),
        comm_us=sum(i.dur for i in comm),
        exposed_us=intervals.length(comm_union) - intervals.overlap(comm_union, rest_union),
        collectives=collectives,
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
    rank = info.get("rank") if isinstance(info.get("rank"), int) else rank_in_name
    if "rank" not in info and not notes:
        notes.append(f"{trace.path.name} records no rank: taken from the file name")
    if rank != rank_in_name:
        notes.append(f"{trace.path.name} says it is rank {rank}")
    world = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    backend = info.get("backend") if isinstance(info.get("backend"), str) else None
    base_ns = trace.meta.get("baseTimeNanoseconds")
    base = base_ns / 1e3 if isinstance(base_ns, (int, float)) and math.isfinite(base_ns) else 0.0
    read = _gpu_step if trace.on_gpu else _cpu_step
    steps = [read(step, base, trace) for step in trace.steps]
    return RankReading(rank, trace.path, world, backend, trace.device, steps, notes)


def read_run(
    stem: Path, files: dict[int, Path], each=None, loaded: dict[int, Trace] | None = None
) -> dict:
    """The multi-rank reading of one run (a dict: text() prints it, --json dumps it);
    `each(trace)` is called on every rank's trace before it is dropped (--json keeps each
    rank's own reading); `loaded` holds traces the caller has read already, by rank (a
    lesson's rank 0 has read its own). Raises TraceError for a file that is not a usable
    trace."""
    readings = []
    for rank_in_name, path in sorted(files.items()):
        trace = (loaded or {}).get(rank_in_name)
        if trace is None:
            trace = load(path)
        if not trace.steps:
            raise TraceError(f"{path} holds no event this reader uses")
        readings.append(summarize(trace, rank_in_name))
        if each is not None:
            each(trace)
        del trace
    return analyse(stem, readings)


# --- across ranks --------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def analyse(stem: Path, readings: list[RankReading]) -> dict:
    problems = [note for r in readings for note in r.notes]
    by_rank: dict[int, RankReading] = {}
    for reading in readings:
        if reading.rank in by_rank:
            problems.append(f"two traces say they are rank {reading.rank}")
        by_rank.setdefault(reading.rank, reading)
    worlds = {r.world for r in readings if r.world is not None}
    world = max(worlds) if worlds else len(by_rank)
    if len(worlds) > 1:
        problems.append(f"the traces disagree on the world size: {sorted(worlds)}")
    missing = [r for r in range(world) if r not in by_rank]
    if missing:
        listed = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        problems.append(
            f"{len(missing)} rank(s) of {world} missing ({listed}): the reading covers "
            f"{len(by_rank)} rank(s)"
        )
    backends = sorted({r.backend for r in readings if r.backend})
    devices = sorted({r.device for r in readings if r.device})
    on_gpu = bool(devices)
    ranks = sorted(by_rank)

    # Steps are matched by name: every rank runs the same schedule.
    names = [s.name for s in by_rank[ranks[0]].steps] if ranks else []
    common = [n for n in names if all(n in {s.name for s in by_rank[r].steps} for r in ranks)]
    if ranks and len(common) < max(len(by_rank[r].steps) for r in ranks):
        problems.append(
            f"only {len(common)} step(s) are recorded on every rank: the others are left out"
        )
    step_of = {r: {s.name: s for s in by_rank[r].steps} for r in ranks}

    per_rank = []
    for r in ranks:
        steps = [step_of[r][n] for n in common]
        per_rank.append(
            {
                "rank": r,
                "path": str(by_rank[r].path),
                "step_us": _median([s.dur for s in steps]),
                "compute_us": _median([s.compute_us for s in steps]),
                "comm_us": _median([s.comm_us for s in steps]),
                "exposed_us": _median([s.exposed_us for s in steps]),
                "collectives_per_step": sorted({len(s.collectives) for s in steps}),
                "wait_us": None,
            }
        )

    steps_out, transfers, sizes, shapes = [], [], [], Counter()
    waits: dict[int, list[float]] = {r: [] for r in ranks}
    for name in common:
        starts = {r: step_of[r][name].ts for r in ranks}
        first, last = min(starts, key=starts.get), max(starts, key=starts.get)
        entry = {
            "name": name,
            "start_offsets_us": {str(r): starts[r] - starts[first] for r in ranks},
            "skew_us": starts[last] - starts[first],
            "first": first,
            "last": last,
            "collectives": [],
        }
        counts = {len(step_of[r][name].collectives) for r in ranks}
        if len(counts) > 1:
            problems.append(f"{name}: the ranks issued different numbers of collectives")
        for k in range(min(counts) if counts else 0):
            calls = {r: step_of[r][name].collectives[k] for r in ranks}
            size = next((c.bytes for c in calls.values() if c.bytes), None)
            shape = next((c.shape for c in calls.values() if c.shape), "")
            first_call = calls[ranks[0]]
            group = first_call.group or world
            item = {
                "name": first_call.name,
                "kind": first_call.kind,
                "group": group,
                "bytes": size,
                "shape": shape,
            }
            if size:
                sizes.append(size)
                shapes[shape] += 1
            if on_gpu:
                arrival = max(calls, key=lambda r: calls[r].ts)
                transfer = calls[arrival].dur
                item["last_to_arrive"] = arrival
                item["transfer_us"] = transfer
                item["wait_us"] = {}
                for r, call in calls.items():
                    wait = min(max(calls[arrival].ts - call.ts, 0.0), call.dur)
                    item["wait_us"][str(r)] = wait
                    waits[r].append(wait)
                launches = {r: c.launch_ts for r, c in calls.items() if c.launch_ts is not None}
                if len(launches) == len(calls) and len(calls) > 1:
                    # The last rank's host launched last too: its host is late; else its GPU
                    # was still busy with earlier work.
                    item["late"] = "host" if max(launches, key=launches.get) == arrival else "GPU"
                factor = coll.bus_factor(first_call.kind, group) if group and group > 1 else None
                if size and transfer > 0 and factor:
                    item["bus_GBps"] = factor * size / (transfer * 1e-6) / 1e9
                    transfers.append(transfer)
            entry["collectives"].append(item)
        steps_out.append(entry)
    if on_gpu:
        for row in per_rank:
            row["wait_us"] = _median(waits[row["rank"]])

    skews = [s["skew_us"] for s in steps_out]
    lasts = Counter(s["last"] for s in steps_out)
    straggler = lasts.most_common(1)[0] if lasts and len(ranks) > 1 else None
    bus = [c["bus_GBps"] for s in steps_out for c in s["collectives"] if "bus_GBps" in c]
    backend = backends[0] if len(backends) == 1 else ("/".join(backends) or None)
    device = devices[0] if len(devices) == 1 else ("/".join(devices) or None)
    link = None
    if on_gpu and bus and device and backend:
        link = cached_link(link_key(device, backend, world))
    median_bus = _median(bus)
    kinds: dict[str, dict] = {}
    for s in steps_out:
        for c in s["collectives"]:
            row = kinds.setdefault(c.get("kind", "?"), {"bytes": [], "us": [], "bus": [], "n": 0})
            row["n"] += 1
            if c["bytes"]:
                row["bytes"].append(c["bytes"])
            if "transfer_us" in c:
                row["us"].append(c["transfer_us"])
            if "bus_GBps" in c:
                row["bus"].append(c["bus_GBps"])
    late = Counter(c["late"] for s in steps_out for c in s["collectives"] if "late" in c)
    return {
        "run": str(stem),
        "world": world,
        "ranks": ranks,
        "backend": backend,
        "device": device,
        "steps_matched": len(common),
        "problems": problems,
        "per_rank": per_rank,
        "steps": steps_out,
        "skew_us": {"median": _median(skews), "max": max(skews) if skews else None},
        "straggler": {
            "rank": straggler[0],
            "steps": straggler[1],
            "late": late.most_common(1)[0][0] if late else None,
        }
        if straggler
        else None,
        "by_kind": [
            {
                "kind": k,
                "count": row["n"],
                "bytes": _median(row["bytes"]),
                "transfer_us": _median(row["us"]),
                "bus_GBps": _median(row["bus"]),
            }
            for k, row in kinds.items()
        ],
        "collective": {
            "per_step": per_rank[0]["collectives_per_step"] if per_rank else [],
            "bytes": _median(sizes),
            "shape": shapes.most_common(1)[0][0] if shapes else "",
            "transfer_us": _median(transfers),
            "bus_GBps": median_bus,
            "link_GBps": link["bus_bytes_per_s"] / 1e9 if link else None,
            "link_measured": link.get("measured") if link else None,
            "share_of_link": median_bus / (link["bus_bytes_per_s"] / 1e9)
            if link and median_bus
            else None,
        },
    }


# --- the link's bandwidth, cached by --bench ------------------------------------------------


def cache_path() -> Path:
    return jsoncache.path("links.json")


def link_key(device: str, backend: str, world: int) -> str:
    return f"{device} | {backend} | {world} ranks"


def _links() -> dict:
    return jsoncache.load(cache_path())


def cached_link(key: str) -> dict | None:
    """{'bus_bytes_per_s': ..., 'measured': ...} for `key`, None if never measured."""
    entry = _links().get(key)
    if not isinstance(entry, dict):
        return None
    value = entry.get("bus_bytes_per_s")
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return entry


def store_link(key: str, bus_bytes_per_s: float, measured: str) -> None:
    """Cache a measured link (written whole, then renamed: a reader never sees half)."""
    cache = _links()
    cache[key] = {"bus_bytes_per_s": bus_bytes_per_s, "measured": measured}
    jsoncache.save(cache_path(), cache)


def measured_stamp(what: str) -> str:
    return f"{what}, measured {time.strftime('%Y-%m-%d', time.gmtime())}"


# --- text ----------------------------------------------------------------------------------


def bytes_text(n: float | None) -> str:
    if n is None:
        return "? bytes"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def text(result: dict) -> str:
    on_gpu = result["device"] is not None
    where = result["device"] or "CPU only"
    lines = [
        f"run: {result['run']} ({len(result['ranks'])} of {result['world']} ranks, "
        f"{result['backend'] or 'backend unknown'}, {where}; {result['steps_matched']} "
        "recorded steps on every rank)"
    ]
    lines += [f"  PROBLEM: {p}" for p in result["problems"]]
    lane = "GPU work" if on_gpu else "CPU time on the step's thread"
    lines.append(f"per rank ({lane}, us; each column its own median over the recorded steps):")
    header = f"  {'rank':>4} {'step':>10} {'compute':>10} {'comm':>10} {'exposed':>10}"
    header += f" {'comm share':>11}" + (f" {'waits':>8}" if on_gpu else "")
    lines.append(header)
    for row in result["per_rank"]:
        busy = (row["compute_us"] or 0) + (row["comm_us"] or 0)
        share = f"{(row['comm_us'] or 0) / busy:.0%}" if busy else "-"
        line = (
            f"  {row['rank']:>4} {cell(row['step_us']):>10} {cell(row['compute_us']):>10} "
            f"{cell(row['comm_us']):>10} {cell(row['exposed_us']):>10} {share:>11}"
        )
        if on_gpu:
            line += f" {cell(row['wait_us']):>8}"
        lines.append(line)
    if on_gpu:
        lines.append(
            "  (step: the CPU's ProfilerStep; waits: time inside the collectives spent waiting "
            "for the last rank to arrive)"
        )
    skew, straggler = result["skew_us"], result["straggler"]
    if len(result["ranks"]) > 1 and skew["median"] is not None:
        line = (
            f"skew of the step starts: median {cell(skew['median'])} us, max {cell(skew['max'])} us"
        )
        if straggler:
            line += (
                f"; rank {straggler['rank']} started last in {straggler['steps']} of "
                f"{result['steps_matched']} steps (the others wait for it inside the collectives"
                + (f"; its {straggler['late']} is late" if straggler.get("late") else "")
                + ")"
            )
        lines.append(line)
    coll = result["collective"]
    per_step = "/".join(map(str, coll["per_step"])) or "0"
    if coll["per_step"] in ([0], []):
        lines.append(
            "collectives: none in the recorded steps"
            + (" (one rank: nothing to reduce)" if result["world"] == 1 else "")
        )
    else:
        kinds = len(result.get("by_kind", []))
        if kinds > 1:  # FSDP's all-gathers and reduce-scatters: sizes and bandwidth per kind
            lines.append(f"collectives: {per_step} per step, of {kinds} kinds (each below)")
        else:
            lines.append(
                f"collectives: {per_step} per step, {bytes_text(coll['bytes'])} each"
                + (f" ({coll['shape']})" if coll["shape"] else "")
            )
        if not on_gpu:
            lines.append(
                "  no bandwidth from a CPU trace: gloo reduces on a thread of its own, which "
                "this reading does not see; comm above is the calling thread's issue + wait"
            )
        elif kinds > 1:
            pass  # one median over kinds would mean nothing
        elif coll["bus_GBps"] is not None:
            line = (
                f"  transfer (the last rank's kernel) median {cell(coll['transfer_us'])} us -> "
                f"bus bandwidth (nccl-tests' factor per kind) = {coll['bus_GBps']:.1f} GB/s"
            )
            lines.append(line)
            if coll["link_GBps"]:
                lines.append(
                    f"  the link: {coll['link_GBps']:.0f} GB/s ({coll['link_measured']}): this "
                    f"all-reduce reaches {coll['share_of_link']:.0%} of it"
                    + (" (a small message is latency-bound)" if coll["share_of_link"] < 0.5 else "")
                )
            else:
                lines.append(
                    "  the link: not measured on this machine yet (run the lesson with --bench)"
                )
        else:
            lines.append("  bus bandwidth: unknown (the collective's size was not recorded)")
    for k in result.get("by_kind", []):
        if len(result.get("by_kind", [])) > 1 or k["kind"] != "all-reduce":
            bus = f", bus {k['bus_GBps']:.1f} GB/s" if k["bus_GBps"] else ""
            lines.append(
                f"  {k['kind']}: {k['count']} in all, median {bytes_text(k['bytes'])}, "
                f"transfer {cell(k['transfer_us'])} us{bus}"
            )
    first = result["per_rank"][0]["path"] if result["per_rank"] else None
    if first:
        lines.append(f"one rank in full: uv run explain {first}")
    return "\n".join(lines)


# --- the commands' side: explain FOLDER, compare RUN_A RUN_B --------------------------------


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _dump(data, out) -> None:
    json.dump(data, out, indent=2, allow_nan=False)
    out.write("\n")


def explain_main(args) -> int:
    """`uv run explain RUN_OR_FOLDER [--json]`: the reading of every run named."""
    from tracereader.render import trace as render

    results, traces = [], []

    def keep(trace: Trace) -> None:
        if args.json:
            traces.append(render.trace_dict(trace))

    try:
        for stem, files in runs_at(args.trace).items():
            results.append(read_run(stem, files, keep))
    except TraceError as err:
        return _fail(str(err))
    try:
        if args.json:
            # schema 2: every rank's own reading in `traces`, the cross-rank one in `runs`
            _dump(render.document(traces, runs=results), sys.stdout)
        else:
            print("\n\n".join(text(r) for r in results))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


def _one_run(path: str) -> dict:
    runs = runs_at(path)
    if not runs:
        if Path(path).is_file():  # a single-process trace: a run of one rank
            return read_run(Path(path), {0: Path(path)})
        raise RunError(f"{path} holds no rank traces (<stem>_rank<r>.json)")
    if len(runs) > 1:
        stems = ", ".join(p.name for p in runs)
        raise RunError(
            f"{path} holds {len(runs)} runs ({stems}): name one, e.g. {next(iter(runs))}"
        )
    stem, files = next(iter(runs.items()))
    return read_run(stem, files)


def _mean(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.mean(values) if values else None


def compare(a: dict, b: dict) -> dict:
    def side(r: dict) -> dict:
        rows = r["per_rank"]
        return {
            "run": r["run"],
            "ranks": len(r["ranks"]),
            "backend": r["backend"],
            "device": r["device"],
            "step_us": _mean(rows, "step_us"),
            "compute_us": _mean(rows, "compute_us"),
            "comm_us": _mean(rows, "comm_us"),
            "exposed_us": _mean(rows, "exposed_us"),
            "skew_us": r["skew_us"]["median"],
            "collective_bytes": r["collective"]["bytes"],
            "bus_GBps": r["collective"]["bus_GBps"],
            "rank0": r["per_rank"][0]["path"] if rows else None,
        }

    return {"a": side(a), "b": side(b), "problems": {"a": a["problems"], "b": b["problems"]}}


def compare_text(result: dict) -> str:
    a, b = result["a"], result["b"]
    lines = [
        f"A: {a['run']} ({a['ranks']} ranks, {a['backend']}, {a['device'] or 'CPU only'})",
        f"B: {b['run']} ({b['ranks']} ranks, {b['backend']}, {b['device'] or 'CPU only'})",
    ]
    for side in ("a", "b"):
        lines += [f"  PROBLEM in {side.upper()}: {p}" for p in result["problems"][side]]
    lines.append(f"{'per rank, averaged over ranks (us):':<40} {'A':>10} {'B':>10}")
    rows = [
        ("step (CPU)", "step_us"),
        ("compute", "compute_us"),
        ("communication", "comm_us"),
        ("exposed communication", "exposed_us"),
        ("skew of step starts (median)", "skew_us"),
    ]
    for label, key in rows:
        lines.append(f"  {label:<38} {cell(a[key]):>10} {cell(b[key]):>10}")
    lines.append(
        f"  {'collective size':<38} {bytes_text(a['collective_bytes']):>10} "
        f"{bytes_text(b['collective_bytes']):>10}"
    )
    bus_a = "-" if a["bus_GBps"] is None else f"{a['bus_GBps']:.1f}"
    bus_b = "-" if b["bus_GBps"] is None else f"{b['bus_GBps']:.1f}"
    lines.append(f"  {'bus bandwidth (GB/s)':<38} {bus_a:>10} {bus_b:>10}")
    if a["rank0"] and b["rank0"]:
        lines.append(f"kernel by kernel, rank 0: uv run compare {a['rank0']} {b['rank0']}")
    return "\n".join(lines)


def compare_main(args) -> int:
    """`uv run compare RUN_A RUN_B [--json]` when either names rank traces."""
    try:
        result = compare(_one_run(args.trace_a), _one_run(args.trace_b))
    except (TraceError, RunError) as err:
        return _fail(str(err))
    try:
        if args.json:
            _dump(result, sys.stdout)
        else:
            print(compare_text(result))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0
