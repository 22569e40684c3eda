"""Step-to-step variation of the same kernel: the same name launched by the same CPU op,
compared across steps by its total time in each step (never by launch position: one extra
launch would shift every pairing after it). A kernel counts only where every step launched
it the same number of times."""

from __future__ import annotations

from tracereader.trace.model import Trace


def read(trace: Trace, threshold: float = 0.10) -> list[dict]:
    """Kernels whose per-step total varies by more than `threshold` (max/min - 1), with the
    time at stake (max - min of the per-step totals), widest first."""
    if len(trace.steps) < 2:
        return []
    per_step: list[dict[tuple, list[float]]] = []
    for step in trace.steps:
        seen: dict[tuple, list[float]] = {}
        for item in step.gpu:
            if item.kind == "kernel":
                seen.setdefault((item.name, item.launched_by), []).append(item.dur)
        per_step.append(seen)
    out = []
    for key, first in per_step[0].items():
        runs = [seen.get(key) for seen in per_step]
        if any(r is None or len(r) != len(first) for r in runs):
            continue
        totals = [sum(r) for r in runs]
        low, high = min(totals), max(totals)
        if low >= 0.001 and high / low > 1 + threshold:  # a 1 ns floor keeps the ratio finite
            out.append(
                {
                    "name": key[0],
                    "launched_by": key[1],
                    "per_step": len(first),
                    "low_us": low,
                    "high_us": high,
                    "spread": high / low - 1,
                    "at_stake_us": high - low,
                }
            )
    return sorted(out, key=lambda v: -v["at_stake_us"])
