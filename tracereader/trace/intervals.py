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
    out: list[Interval] = []
    if not a or not b:
        return out
    # Unpacked once per step of the walk: called on whole traces' unions, where indexing and
    # max/min calls per pair cost more than the walk itself. The conditionals pick what
    # max/min would (the first on ties).
    i = j = 0
    n_a, n_b = len(a), len(b)
    a_start, a_end = a[0]
    b_start, b_end = b[0]
    while True:
        start = b_start if b_start > a_start else a_start
        end = b_end if b_end < a_end else a_end
        if end > start:
            out.append((start, end))
        if a_end < b_end:
            i += 1
            if i == n_a:
                return out
            a_start, a_end = a[i]
        else:
            j += 1
            if j == n_b:
                return out
            b_start, b_end = b[j]


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of union `a` outside union `b` (both sorted, disjoint)."""
    out: list[Interval] = []
    j = 0
    n_b = len(b)
    for start, end in a:
        cursor = start
        while j < n_b and b[j][1] <= cursor:
            j += 1
        k = j
        while k < n_b:
            b_start, b_end = b[k]
            if not b_start < end:  # as the loop's test was written: NaN stops it too
                break
            if b_start > cursor:
                out.append((cursor, b_start))
            if b_end > cursor:  # max(cursor, b_end), the first on ties
                cursor = b_end
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
