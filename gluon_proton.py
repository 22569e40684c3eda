"""Reading gluon_geglu.py's Proton timeline per warp (03_fused_mlp.py --proton), and the plain
hopper kernel's beside it (--proton --kernel hopper): no torch, no GPU.

Proton's Chrome trace has a process per block ("... Core5 CTA33") and a thread per warp
("warp 10 (line 0)"); its spans are the kernel's three scopes. A warp's role is the scope it
records: the producer (1 warp a block) waits for a free slot of the ring, the consumers (4 or 8
warps a block) wait for data and run their epilogue. Sums over the whole trace mix 8 consumer
warps with 1 producer warp per block, so this module reads each warp against its block's span
(first scope entered to last scope left in any of its warps: the same clock, one denominator).

    events = load(path)        # the trace's events, .chrome_trace or .gz
    blocks = read(events)      # per block, per warp: shares and a verdict
    for line in summary(blocks): print(line)

An excerpt of a few blocks reads as the whole trace does: nothing here needs every block.
A saved trace: uv run python gluon_proton.py TRACE
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# gluon_geglu.py's scopes, as its kernel names them (tests/test_gluon_proton.py keeps them equal).
SLOT = "producer waits for a free slot"
DATA = "consumer waits for data"
EPILOGUE = "consumer epilogue"
# fused_geglu.py's hopper kernel (--proton --kernel hopper), which takes these names from here:
# every warp runs a tile's main loop (loads and wgmma interleaved by the compiler: no wait of
# its own to time), then its epilogue; no other warpgroup computes meanwhile.
MAIN_LOOP = "main loop"
PLAIN_EPILOGUE = "epilogue"

# The verdicts, per warp. Thresholds are shares of the block's span.
LOADS_WAIT = "loads wait on compute"
COMPUTE_WAITS = "compute waits on loads"
NEITHER = "neither"
# The producer's own work per K step is a few instructions (expect, two TMA issues): a producer
# that never found the ring full would issue as fast as slots come back and wait little. Waiting
# half its span or more, it is at least twice as fast as the consumers free slots: the loads are
# ahead and wait for the tensor cores to free slots.
PRODUCER_WAITS = 0.50
# A wait that does not block still costs the barrier's test and Proton's two timestamps: the
# shortest data waits of the H100 trace are 0.08 k cycles, about 7% of a consumer warp's span
# at the post's shape (12 K steps a tile). Above 10% a consumer warp is held by data that has
# not landed, beyond that floor: compute waits on loads.
CONSUMER_WAITS = 0.10
# The plain kernel's warps all leave the tensor cores for the epilogue at once; past a tenth of
# the span that is time a second warpgroup (gluon's pingpong) would fill with its own main loop.
EPILOGUE_STOPS = "the epilogue stops the tensor cores"
PLAIN_EPILOGUE_SHARE = 0.10


@dataclass(frozen=True)
class Warp:
    name: str  # the trace's thread: "warp 10 (line 0)"
    role: str  # "producer", "consumer" or "plain" (the hopper kernel's warps)
    waits: float  # producer: waiting for a free slot; consumer: waiting for data; plain: in its
    # main loop (each a share of the block's span)
    epilogue: float  # consumer, plain: in its epilogue (of the span); producer: 0
    verdict: str  # LOADS_WAIT, COMPUTE_WAITS, EPILOGUE_STOPS or NEITHER


@dataclass(frozen=True)
class Block:
    name: str  # the trace's process: "fused_gate_up_geglu_gluon_kernel Core5 CTA33"
    span: float  # trace units (Proton's: microseconds at its "Frequency (MHz)" of cycles)
    producers: tuple[Warp, ...]
    consumers: tuple[Warp, ...]
    plain: tuple[Warp, ...] = ()  # the hopper kernel's warps (no producer or consumer there)


def load(path: str | Path) -> list[dict]:
    """The trace's complete events, keeping only the fields read here. The whole file is parsed
    at once (json.load): a 65 MB trace of 132 blocks peaks near 250 MB and takes a second."""
    keep = ("ph", "name", "pid", "tid", "ts", "dur")

    def slim(obj: dict) -> dict:
        return {k: obj[k] for k in keep if k in obj} if "ph" in obj else obj

    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        trace = json.load(f, object_hook=slim)
    return trace.get("traceEvents", []) if isinstance(trace, dict) else trace


def verdict(role: str, waits: float, epilogue: float = 0.0) -> str:
    if role == "producer":
        return LOADS_WAIT if waits >= PRODUCER_WAITS else NEITHER
    if role == "plain":
        return EPILOGUE_STOPS if epilogue >= PLAIN_EPILOGUE_SHARE else NEITHER
    return COMPUTE_WAITS if waits >= CONSUMER_WAITS else NEITHER


def read(events: Iterable[dict]) -> list[Block]:
    """Per block (in the trace's order), each warp's shares of the block's span and its verdict.
    Complete ("X") events of the kernels' scopes only; warps that recorded none are left out."""
    blocks: dict[str, dict[str, dict[str, float]]] = {}
    edges: dict[str, list[float]] = {}
    for e in events:
        if (
            not isinstance(e, dict)
            or e.get("ph") != "X"
            or e.get("name") not in (SLOT, DATA, EPILOGUE, MAIN_LOOP, PLAIN_EPILOGUE)
        ):
            continue
        pid, tid = str(e.get("pid")), str(e.get("tid"))
        ts, dur = float(e.get("ts", 0)), float(e.get("dur", 0))
        scopes = blocks.setdefault(pid, {}).setdefault(tid, {})
        scopes[e["name"]] = scopes.get(e["name"], 0.0) + dur
        lo_hi = edges.setdefault(pid, [ts, ts + dur])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], ts), max(lo_hi[1], ts + dur)
    out = []
    for pid, warps in blocks.items():
        span = edges[pid][1] - edges[pid][0]
        producers, consumers, plain = [], [], []
        for tid, scopes in warps.items():
            if SLOT in scopes:
                share = scopes[SLOT] / span if span else 0.0
                producers.append(Warp(tid, "producer", share, 0.0, verdict("producer", share)))
            elif MAIN_LOOP in scopes or PLAIN_EPILOGUE in scopes:
                main = scopes.get(MAIN_LOOP, 0.0) / span if span else 0.0
                epilogue = scopes.get(PLAIN_EPILOGUE, 0.0) / span if span else 0.0
                plain.append(Warp(tid, "plain", main, epilogue, verdict("plain", main, epilogue)))
            else:
                share = scopes.get(DATA, 0.0) / span if span else 0.0
                epilogue = scopes.get(EPILOGUE, 0.0) / span if span else 0.0
                consumers.append(Warp(tid, "consumer", share, epilogue, verdict("consumer", share)))
        out.append(Block(pid, span, tuple(producers), tuple(consumers), tuple(plain)))
    return out


def plain_summary(blocks: list[Block]) -> list[str]:
    """The hopper kernel's two lines: the median block's main loop and epilogue per warp, and
    what the epilogue costs a kernel whose warps all compute, then all store."""
    warps = [w for b in blocks for w in b.plain]
    with_plain = [b for b in blocks if b.plain]
    main = statistics.median(statistics.fmean(w.waits for w in b.plain) for b in with_plain)
    epi = statistics.median(statistics.fmean(w.epilogue for w in b.plain) for b in with_plain)
    stopped = sum(w.verdict == EPILOGUE_STOPS for w in warps)
    head = (
        f"per warp (share of its block's span, median of {len(with_plain)} blocks): main loop "
        f"{100 * main:.0f}%, epilogue {100 * epi:.0f}% ({len(warps)} warps)"
    )
    if stopped * 2 > len(warps):
        meaning = (
            f"{EPILOGUE_STOPS} ({stopped} of {len(warps)} warps): every warp of a block stores "
            f"its tile at once, so the tensor cores idle {100 * epi:.0f}% of the span; gluon's "
            f"pingpong runs one consumer's main loop under the other's epilogue"
        )
    else:
        meaning = (
            f"the main loop sets the pace: {len(warps) - stopped} of {len(warps)} warps spend "
            "under a tenth of the span in the epilogue"
        )
    return [head, "reading: " + meaning]


def summary(blocks: list[Block]) -> list[str]:
    """Two lines: the median block's per-warp shares (with the range over every consumer warp),
    and the verdicts counted over warps."""
    producers = [w for b in blocks for w in b.producers]
    consumers = [w for b in blocks for w in b.consumers]
    if not producers and not consumers:
        if any(b.plain for b in blocks):
            return plain_summary(blocks)
        return ["per warp: no scopes of gluon_geglu.py's or fused_geglu.py's kernels in this trace"]

    def median_of_blocks(warps_of, field: str) -> float:
        return statistics.median(
            statistics.fmean(getattr(w, field) for w in warps_of(b)) for b in blocks if warps_of(b)
        )

    def pct(x: float) -> str:
        return f"{100 * x:.0f}%"

    parts = []
    if producers:
        slot = median_of_blocks(lambda b: b.producers, "waits")
        parts.append(f"producer waits for a free slot {pct(slot)}")
    if consumers:
        data = median_of_blocks(lambda b: b.consumers, "waits")
        epi = median_of_blocks(lambda b: b.consumers, "epilogue")
        lo, hi = min(w.waits for w in consumers), max(w.waits for w in consumers)
        parts.append(
            f"each consumer warp waits for data {pct(data)} ({100 * lo:.0f}-{pct(hi)} over "
            f"{len(consumers)} warps), epilogue {pct(epi)}"
        )
    head = f"per warp (share of its block's span, median of {len(blocks)} blocks): "
    loads_wait = sum(w.verdict == LOADS_WAIT for w in producers)
    compute_waits = sum(w.verdict == COMPUTE_WAITS for w in consumers)
    producers_say = loads_wait * 2 > len(producers)  # most of them
    consumers_say = compute_waits * 2 > len(consumers)
    if producers_say and consumers_say:
        meaning = (
            "the ring is full, yet data lands late: bytes in flight against L2 latency set the pace"
        )
    elif producers_say:
        meaning = "the tensor cores set the pace, as they should"
    elif consumers_say:
        meaning = "the loads do not keep up"
    else:
        meaning = "neither waits much: the epilogue or the issue of work sets the pace"
    said = []
    if producers_say:
        said.append(f"{LOADS_WAIT} ({loads_wait} of {len(producers)} producers)")
    if consumers_say:
        said.append(f"{COMPUTE_WAITS} ({compute_waits} of {len(consumers)} consumer warps)")
    return [
        head + "; ".join(parts),
        "reading: " + ", ".join([*said[:-1], ": ".join([*said[-1:], meaning])]),
    ]


def main(argv: list[str] | None = None) -> int:
    """uv run python gluon_proton.py TRACE: the reading of a saved Proton trace (or excerpt)."""
    import sys

    paths = sys.argv[1:] if argv is None else argv
    if paths in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(paths) != 1:
        print(
            "usage: python gluon_proton.py TRACE (a Proton .chrome_trace, or .gz)", file=sys.stderr
        )
        return 2
    try:
        events = load(paths[0])
    except (OSError, ValueError) as err:  # missing, unreadable, not JSON (or not gzip)
        print(f"gluon_proton.py: cannot read {paths[0]}: {err}", file=sys.stderr)
        return 2
    for line in summary(read(events)):
        print(line)
    return 0


if __name__ == "__main__":
    from tracereader.commands.shared import run_cli  # Ctrl-C, a closed or full stdout: one line

    raise SystemExit(run_cli(main))
