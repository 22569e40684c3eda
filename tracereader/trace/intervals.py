"""Time accounting by union of intervals: the GPU is busy while at least one of its events
runs, whatever the number of streams; summing durations counts overlapping work twice."""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of [start, end) intervals, as sorted disjoint intervals."""
    merged: list[Interval] = []
    ordered = sorted(intervals)
    if not ordered:
        return merged
    start, end = ordered[0]
    for s, e in ordered:
        if s <= end:
            if e > end:
                end = e
        else:
            merged.append((start, end))
            start, end = s, e
    merged.append((start, end))
    return merged


def length(merged: list[Interval]) -> float:
    return sum(end - start for start, end in merged)


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Where two unions (sorted, disjoint) overlap, as a union."""
    i = j = 0
    out: list[Interval] = []
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of union `a` outside union `b` (both sorted, disjoint)."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Total length where two unions (sorted, disjoint) overlap."""
    return length(intersect(a, b))


def of(items) -> list[Interval]:
    """The union of GPU items' (or any ts/dur objects') intervals."""
    return union([(i.ts, i.ts + i.dur) for i in items])
