"""Proton's timeline per warp (03_fused_mlp.py --proton): each warp against its block's span.

A warp's role is the scope it records: the producer (1 warp a block) waits for a free slot of
the ring, the consumers (4 or 8 warps a block) wait for data and run their epilogue. Sums over
the whole trace mix 8 consumer warps with 1 producer warp per block, so each warp is read
against its block's span (first scope entered to last scope left in any of its warps: the same
clock, one denominator). An excerpt of a few blocks reads as the whole trace does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tracereader.names.proton import DATA, EPILOGUE, MAIN_LOOP, PLAIN_EPILOGUE, SCOPES, SLOT

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
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("name") not in SCOPES:
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
