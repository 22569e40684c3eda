"""Across the ranks of one run: who started each step late, who waited for whom in the collectives,
the collectives' bus bandwidth against the link's; and two runs side by side."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from tracereader.analyses import collectives as coll
from tracereader.analyses.linkcurve import LinkCurve
from tracereader.analyses.ranks import RankReading
from tracereader.trace import intervals


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# long: one pass over the ranks' steps that every cross-rank figure shares; split, each
# part would walk the same aligned steps again
def analyse(stem: Path, readings: list[RankReading], link: LinkCurve | None = None) -> dict:
    """The ranks of one run side by side; `link` is the link's measured curve (bus bandwidth
    against size, per kind: analyses.linkcurve), None where unknown."""
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
    waits: dict[int, list[float]] = {r: [] for r in ranks}  # per step: the wait inside it
    waiting: dict[int, list[list]] = {r: [] for r in ranks}  # per step: when it waited
    for name in common:
        for r in ranks:
            waits[r].append(0.0)
            waiting[r].append([])
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
                    waits[r][-1] += wait
                    waiting[r][-1].append((call.ts, call.ts + wait))
                launches = {r: c.launch_ts for r, c in calls.items() if c.launch_ts is not None}
                if len(launches) == len(calls) and len(calls) > 1:
                    # Of the last rank's lateness (its kernel's start less the others'), the
                    # part its kernel sat queued after its launch beyond the others' queueing
                    # is its GPU's: where that is most of it, its GPU was still busy with
                    # earlier work; else its host launched late (launching last alone says
                    # nothing: a rank with extra GPU work launches a little later too).
                    queued = {r: c.ts - launches[r] for r, c in calls.items()}
                    lateness = calls[arrival].ts - min(
                        c.ts for r, c in calls.items() if r != arrival
                    )
                    others_q = [v for r, v in queued.items() if r != arrival]
                    extra = queued[arrival] - _median(others_q)
                    item["late"] = "GPU" if extra > 0.5 * lateness else "host"
                factor = coll.bus_factor(first_call.kind, group) if group and group > 1 else None
                if size and transfer > 0 and factor:
                    item["bus_GBps"] = factor * size / (transfer * 1e-6) / 1e9
                    transfers.append(transfer)
            entry["collectives"].append(item)
        steps_out.append(entry)
    if on_gpu:
        for row in per_rank:
            # per step, the time this rank's collectives spent waiting for the last rank to
            # arrive: exposed time that is another rank's lateness, not the link's
            row["wait_us"] = _median(waits[row["rank"]])
            # exposed time outside those waits: the waits that compute hid cost nothing
            exposed = [
                intervals.length(intervals.subtract(s.exposed, intervals.union(w)))
                for s, w in zip((step_of[row["rank"]][n] for n in common), waiting[row["rank"]],
                                strict=True)
            ]  # fmt: skip
            row["exposed_less_waits_us"] = _median(exposed)

    skews = [s["skew_us"] for s in steps_out]
    lasts = Counter(s["last"] for s in steps_out)
    straggler = lasts.most_common(1)[0] if lasts and len(ranks) > 1 else None
    bus = [c["bus_GBps"] for s in steps_out for c in s["collectives"] if "bus_GBps" in c]
    backend = backends[0] if len(backends) == 1 else ("/".join(backends) or None)
    device = devices[0] if len(devices) == 1 else ("/".join(devices) or None)
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
    result = {
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
        },
    }
    return with_link(result, link)


def _against(kind: str, nbytes, bus_GBps: float | None, link: LinkCurve | None) -> dict:
    """One collective kind's bus bandwidth held against the link's curve at its own size and
    kind: its share of the ceiling there (at most 1: faster than the curve reads as at it)."""
    known = link is not None and kind is not None and bus_GBps  # else nothing to judge
    judged = link.judge(kind, nbytes or 0, bus_GBps * 1e9) if known else None
    ceiling = judged.ceiling_bytes_per_s if judged else None
    return {
        "link_GBps": ceiling / 1e9 if ceiling else None,
        "link_measured": link.measured if link else None,
        "share_of_link": judged.share if judged else None,
        "above_link": judged.above if judged else False,
        "link_reading": judged.text() if judged and ceiling else None,
    }


def with_link(result: dict, link: LinkCurve | None) -> dict:
    """`result` (analyse's) held against the link's curve measured elsewhere: each kind's bus
    bandwidth at its own size as a share of the curve's there. No link for a CPU run."""
    if result["device"] is None:
        return result
    coll = result["collective"]
    # the headline is one kind's only where the run issues one kind (several: judged per kind)
    kind = result["by_kind"][0]["kind"] if len(result["by_kind"]) == 1 else None
    return {
        **result,
        "collective": {**coll, **_against(kind, coll["bytes"], coll["bus_GBps"], link)},
        "by_kind": [
            {**k, **_against(k["kind"], k["bytes"], k["bus_GBps"], link)} for k in result["by_kind"]
        ],
    }


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
