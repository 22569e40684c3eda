"""Proton's per-warp reading as text (explain --proton): two lines, formatted only."""

from __future__ import annotations

import statistics

from tracereader.analyses.proton import (
    COMPUTE_WAITS,
    EPILOGUE_STOPS,
    LOADS_WAIT,
    Block,
)


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
        return [
            "per warp: no scopes of modules/geglu/gluon.py's or modules/geglu/fused.py's kernels "
            "in this trace"
        ]

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
