"""The first finding of a run of ranks: the rank the others wait for, and why; or a collective
that no compute hides; or an all-to-all whose ranks send very different amounts.

Per rank and step (`profile`, on the machine's clock): when it arrived at each collective it
issued (the issuing op's start on the step's thread: a CPU rank's c10d op, a GPU rank's launch
of the collective kernel), the time its collectives ran (a CPU rank: the issuing ops and gloo's
own ops on its worker threads, where the exchange and the wait happen; a GPU rank: the NCCL
kernels), what its own compute ran meanwhile, and its top-level regions (record_function),
each with its CPU time, the part inside ops, and the GPU time it launched.

Across ranks (`judge`), per step and collective, each rank's time from its own step start to
its arrival: the slowest rank is late by that time less the median of the others' (a rank let
go late by the last collective is not slow), the step's lateness the largest over its
collectives. The late rank is the one late in
most steps; the region is the one whose time on it exceeds the others' median by the most;
what is late is its compute (the region's excess is inside ops, or GPU time) or its host (the
region's time outside any op: Python, sleeping, waiting on I/O). Each finding carries its
stake: the straggler's lateness (the time the others wait), an uneven all-to-all's time less
what it would take were every rank to send the least any sends (the time times 1 - min/max
of the bytes sent), the exposed communication less the waits for a late rank; the largest
stake first.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from tracereader.analyses import collectives as coll
from tracereader.analyses.hostside import is_region
from tracereader.analyses.ranks import issued_collectives
from tracereader.trace import intervals
from tracereader.trace.model import ELEMENT_BYTES, Step, Trace

LATE_SHARE = 0.10  # a straggler's lateness must be this share of the step to be named
UNEVEN = 4.0  # max / min bytes sent above which an all-to-all is uneven


def _regions(step: Step, trace: Trace) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for op in step.cpu_ops:
        if op.parent is not None or not is_region(op, trace):
            continue
        kids = intervals.union(
            (k.ts, k.end) for k in step.cpu_ops if k.parent is op and not is_region(k, trace)
        )
        gpu = intervals.of(i for i in step.gpu if i.launcher is not None and _under(i, op))
        row = out.setdefault(op.name, {"us": 0.0, "ops_us": 0.0, "gpu_us": 0.0})
        row["us"] += op.dur
        row["ops_us"] += intervals.length(kids)
        row["gpu_us"] += intervals.length(gpu)
    return out


def _under(item, op) -> bool:
    up = item.launcher
    while up is not None:
        if up is op:
            return True
        up = up.parent
    return False


def _sent(op) -> int | None:
    """Bytes an all-to-all's issuing op sends: its second recorded input (c10d::alltoall_base_
    records the output, then the input)."""
    dims, types = op.args.get("Input Dims") or (), op.args.get("Input type") or ()
    if len(dims) < 2 or not dims[1]:
        return None
    return math.prod(dims[1]) * ELEMENT_BYTES.get(types[1] if len(types) > 1 else "", 4)


def _received(item) -> tuple[str, int] | None:
    """A GPU all-to-all kernel's issuing op (c10d::alltoall_base_, found up from the op that
    launched it) and the bytes this rank receives: its first recorded input, the output."""
    op = item.launcher
    while op is not None and "alltoall" not in op.name:
        op = op.parent
    if op is None:
        return None
    dims, types = op.args.get("Input Dims") or (), op.args.get("Input type") or ()
    if not dims or not dims[0]:
        return None
    return op.name, math.prod(dims[0]) * ELEMENT_BYTES.get(types[0] if types else "", 4)


def profile(trace: Trace, base: float) -> list[dict]:
    """Per step: {arrivals: [(kind, name, ts, us)], sent: [bytes or None], got: [(issuing op,
    bytes received)] of a GPU rank's all-to-alls, comm: intervals, compute: intervals,
    regions, ts, dur} on the machine's clock (`base` + the trace's ts)."""
    out = []
    for step in trace.steps:
        issued = issued_collectives(step.cpu_ops)
        if trace.on_gpu:
            kernels = [i for i in step.gpu if i.klass.cls == "collective"]
            arrivals = [(coll.kind(i), i.launched_by, base + i.ts, i.dur) for i in kernels]
            comm = intervals.of(kernels)
            compute = intervals.of(i for i in step.gpu if i.kind == "kernel" and i not in kernels)
            sent = [None] * len(arrivals)
            got = [_received(i) for i in kernels if coll.kind(i) == "all-to-all"]
        else:
            arrivals = [(kind, op.name, base + op.ts) for op, kind in issued]
            comm = intervals.union(
                [(op.ts, op.end) for op, _ in issued]
                + [(op.ts, op.end) for op in step.other_ops if op.name.startswith("gloo:")]
            )
            comm = intervals.intersect(comm, [(step.ts, step.end)])
            compute = intervals.union(
                (op.ts, op.end) for op in step.cpu_ops
                if op.parent is None and not coll.ISSUING_OP.match(op.name)
            )  # fmt: skip
            sent = [_sent(op) if kind == "all-to-all" else None for op, kind in issued]
            gloo = sorted((op for op in step.other_ops if op.name.startswith("gloo:")),
                          key=lambda op: op.ts)  # fmt: skip
            busy = [op.dur + (gloo[n].dur if n < len(gloo) else 0.0)
                    for n, (op, _) in enumerate(issued)]  # fmt: skip
            arrivals = [(*a, us) for a, us in zip(arrivals, busy, strict=True)]
            got = []
        out.append({
            "gpu": trace.on_gpu, "ts": base + step.ts, "dur": step.dur, "arrivals": arrivals,
            "sent": sent, "got": [g for g in got if g],
            "comm": [(base + a, base + b) for a, b in comm],
            "compute": [(base + a, base + b) for a, b in compute],
            "regions": _regions(step, trace),
        })  # fmt: skip
    return out


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


def _late(profiles: dict[int, list[dict]], steps: int) -> dict | None:
    """The rank the others wait for, how late (median over steps), and the waits per rank
    and step (intervals: from its arrival to the last rank's, per collective). Late is the
    time from the rank's own step start to its arrival against the other ranks' median: a
    rank that starts its step late because the last collective let it go late is not slow."""
    lates, by, waits = [], Counter(), {r: [[] for _ in range(steps)] for r in profiles}
    for k in range(steps):
        per = {r: p[k]["arrivals"] for r, p in profiles.items()}
        count = min(len(a) for a in per.values())
        best = (0.0, None)
        for c in range(count):
            times = {r: a[c][2] for r, a in per.items()}
            last = max(times, key=times.get)
            for r, t in times.items():
                waits[r][k].append((t, times[last]))
            spent = {r: t - profiles[r][k]["ts"] for r, t in times.items()}
            slow = max(spent, key=spent.get)
            late = spent[slow] - statistics.median(v for r, v in spent.items() if r != slow)
            if late > best[0]:
                best = (late, slow)
        lates.append(best[0])
        if best[1] is not None:
            by[best[1]] += 1
    if not by:
        return None
    return {"rank": by.most_common(1)[0][0], "late_us": _median(lates), "waits": waits}


def _where(profiles: dict[int, list[dict]], rank: int, steps: int) -> tuple[str | None, str]:
    """The region whose time on `rank` exceeds the others' the most, and whether the excess is
    compute (inside ops, or GPU time) or host (outside every op)."""
    best = (0.0, None, "host")
    names = {n for k in range(steps) for n in profiles[rank][k]["regions"]}
    for name in names:

        def excess(key: str, name=name) -> float:
            def value(r, k):
                row = profiles[r][k]["regions"].get(name)
                return row[key] if row else 0.0

            return _median(
                value(rank, k) - _median(value(r, k) for r in profiles if r != rank)
                for k in range(steps)
            )

        total, ops, gpu = excess("us"), excess("ops_us"), excess("gpu_us")
        if total > best[0] or gpu > best[0]:
            if profiles[rank][0]["gpu"]:
                kind = "GPU" if gpu >= 0.5 * max(total, gpu) else "host"
            else:
                kind = "compute" if ops >= 0.5 * total else "host"
            best = (max(total, gpu), name, kind)
    return best[1], best[2]


def _exposed(profiles, waits, steps: int) -> dict[int, float]:
    """Per rank, its collectives' time with no compute of its own beside them and no wait for
    a late rank (median over steps)."""
    out = {}
    for r, p in profiles.items():
        rows = []
        for k in range(steps):
            bare = intervals.subtract(p[k]["comm"], intervals.union(p[k]["compute"]))
            rows.append(intervals.length(intervals.subtract(bare, intervals.union(waits[r][k]))))
        out[r] = _median(rows)
    return out


def _finding(cause, culprit, us, step, message, fix, rank=None, late=None) -> dict:
    return {"topic": "cause", "cause": cause, "culprit": culprit, "rank": rank, "late": late,
            "us": us, "pct": 100 * us / step if step else None, "message": message,
            "next": fix}  # fmt: skip


def _uneven(profiles, exposed: dict[int, float], step: float) -> dict | None:
    """An all-to-all whose ranks send very different amounts, where it is most of the exposed
    communication."""
    sent: dict[int, list[int]] = {}
    spent: dict[int, list[float]] = {}
    names = Counter()
    for r, p in profiles.items():
        for row in p:
            for (kind, name, _, us), size in zip(row["arrivals"], row["sent"], strict=True):
                if kind == "all-to-all" and size:
                    sent.setdefault(r, []).append(size)
                    spent.setdefault(r, []).append(us)
                    names[name] += 1
    if len(sent) < 2:
        return None
    per = {r: _median(v) for r, v in sent.items()}
    heavy = max(per, key=per.get)
    light = min(per, key=per.get)
    if not per[light] or per[heavy] / per[light] < UNEVEN:
        return None
    share = 1 - per[light] / per[heavy]  # of the exchange's time, what evening it out saves
    a2a = min(_median(spent[heavy]), exposed[heavy]) * share
    culprit = names.most_common(1)[0][0]
    return _finding(
        "uneven all-to-all", culprit, a2a, step,
        f"an uneven all-to-all: rank {heavy} sends {per[heavy] / 2**20:.1f} MiB a step, rank "
        f"{light} {per[light] / 2**10:.1f} KiB ({culprit}); every rank waits for the largest "
        "share to cross",
        "balance what each rank sends (capacity factors, token dropping, re-sharding the "
        "experts), or overlap the exchange with compute", rank=heavy, late="communication",
    ) | {"even_share": share}  # fmt: skip


def _uneven_gpu(profiles, late: dict, step: float) -> dict | None:
    """A GPU run's late rank that receives UNEVEN times the bytes of another in an all-to-all
    (a skewed routing: it then computes on that many more tokens): the all-to-all is the
    cause. Its stake: the lateness, and the exchange's own time less what the least share
    takes (the heavy rank's all-to-all kernels, times 1 - min/max)."""
    got = {r: _median(b for row in p for _, b in row["got"]) for r, p in profiles.items()}
    heavy, light = max(got, key=got.get), min(got, key=got.get)
    if heavy != late["rank"] or not got[light] or got[heavy] / got[light] < UNEVEN:
        return None
    names = Counter(n for row in profiles[heavy] for n, _ in row["got"])
    a2a = _median(
        sum(a[3] for a in row["arrivals"] if a[0] == "all-to-all") for row in profiles[heavy]
    )
    share = 1 - got[light] / got[heavy]
    culprit = names.most_common(1)[0][0]
    return _finding(
        "uneven all-to-all", culprit, late["us"] + a2a * share, step,
        f"an uneven all-to-all: rank {heavy} receives {got[heavy] / 2**20:.1f} MiB a step, "
        f"rank {light} {got[light] / 2**20:.1f} MiB ({culprit}); rank {heavy} then computes on "
        f"{got[heavy] / got[light]:.0f}x the tokens and the others wait "
        f"{late['us'] / 1e3:.1f} ms for it (its {late['late']} is late in '{late['culprit']}')",
        "balance what each rank receives (capacity factors, token dropping, re-sharding the "
        "experts)", rank=heavy, late=late["late"],
    ) | {"even_share": share}  # fmt: skip


def judge(profiles: dict[int, list[dict]]) -> list[dict]:
    """The run's findings, the cause first (see the module's doc); [] with fewer than two ranks
    or without matched steps."""
    if len(profiles) < 2:
        return []
    steps = min(len(p) for p in profiles.values())
    if not steps:
        return []
    step = _median(row["dur"] for p in profiles.values() for row in p[:steps])
    late = _late(profiles, steps)
    waits = late["waits"] if late else {r: [[] for _ in range(steps)] for r in profiles}
    exposed = _exposed(profiles, waits, steps)
    found = []
    if late and late["late_us"] >= LATE_SHARE * step:
        region, kind = _where(profiles, late["rank"], steps)
        where = f" in '{region}'" if region else ""
        found.append(_finding(
            "late rank", region, late["late_us"], step,
            f"rank {late['rank']} is late: it reaches the collectives {late['late_us'] / 1e3:.1f} "
            f"ms after the others (median), and the others wait for it; its {kind} is late"
            f"{where}",
            f"even out{where} across ranks: "
            + ("the host's work there (data loading, Python, I/O) off the critical path"
               if kind == "host" else "the compute there (uneven shards, extra work on one rank)"),
            rank=late["rank"], late=kind,
        ))  # fmt: skip
    skewed = found and profiles[late["rank"]][0]["gpu"] and _uneven_gpu(profiles, found[0], step)
    if skewed:  # the late rank is late because the all-to-all gave it the most tokens
        found[0] = skewed
    uneven = _uneven(profiles, exposed, step)
    if uneven:
        found.append(uneven)
    top = max(exposed, key=exposed.get)
    if exposed[top] >= LATE_SHARE * step:
        names = Counter()
        for a in (a for p in profiles.values() for row in p for a in row["arrivals"]):
            names[a[1]] += a[3]
        culprit = names.most_common(1)[0][0] if names else None
        found.append(_finding(
            "exposed communication", culprit, exposed[top], step,
            f"communication no compute hides: {exposed[top] / 1e3:.1f} ms a step on rank {top} "
            f"({culprit}), beyond any wait for a late rank",
            "overlap it with compute (async_op=True and wait later; DDP's buckets, FSDP's "
            "prefetch), or move fewer bytes", rank=None,
        ))  # fmt: skip
    # the more specific first where they name one collective: an uneven all-to-all's time is
    # also exposed communication
    # (where the all-to-all is the exposed communication, that time is what the imbalance costs)
    last = found[-1] if found else None
    if uneven and last and last["cause"] == "exposed communication":
        if last["culprit"] == uneven["culprit"]:
            found.pop()
            uneven["us"] = last["us"] * uneven["even_share"]
            uneven["pct"] = 100 * uneven["us"] / step
    return sorted(found, key=lambda f: -f["us"])
