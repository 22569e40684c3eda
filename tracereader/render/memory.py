"""The memory reading (`explain --memory`) as text and as JSON: they format, compute nothing.

Text, per device (GPUs first, the CPU's allocations apart): the allocator's events, the peak
of the allocated total (and what was reserved then), when (the step, its phase, the time from
the step's start), each step's own peak, and what was alive at the peak, grouped by the op
that allocated it, largest first (at most TOP rows, then the rest in one line). Sizes in
binary units (GiB, MiB: as torch.cuda.memory_allocated is read).
"""

from __future__ import annotations

from tracereader.render.lines import wrap
from tracereader.units import binary_size, duration

TOP = 15  # rows of ops alive at the peak; the rest is one line


def size(n: int) -> str:
    return binary_size(n)


def _when(peak: dict) -> str:
    if peak["step"] is None:
        return "outside the recorded steps"
    phase = f", {peak['phase']}" if peak["phase"] else ""
    return (
        f"in {peak['step']}{phase}, {duration(peak['from_step_start_us'])} after the step's start"
    )


def malformed(reading: dict) -> str:
    """'N malformed [memory] events left out (Bytes: 3, ts: 1)', '' where none was."""
    counts = reading.get("malformed") or {}
    if not counts:
        return ""
    fields = ", ".join(f"{field}: {n:,}" for field, n in counts.items())
    return f"{sum(counts.values()):,} malformed [memory] events left out ({fields})"


def text(reading: dict, trace_path: str, png: str | None) -> str:
    lines = [f"memory of {trace_path} (its profile_memory=True events)"]
    if malformed(reading):
        lines.append(malformed(reading))
    for d in reading["devices"]:
        peak = d["peak"]
        lines.append("")
        lines.append(
            f"{d['device']}: {d['events']} events ({d['allocations']} allocations, "
            f"{d['frees']} frees); allocated when the trace began: {size(d['before_bytes'])}"
        )
        reserved = peak["reserved_bytes"]  # the CPU's allocator reports none
        then = f" (reserved then {size(reserved)})" if reserved else ""
        lines.append(f"  peak allocated {size(peak['bytes'])}{then} {_when(peak)}")
        if len(d["step_peaks"]) > 1:
            lines.append("  each step's peak:")
            for p in d["step_peaks"]:
                phase = f" ({p['phase']})" if p["phase"] else ""
                lines.append(
                    f"    {p['step']:<18} {size(p['peak_bytes']):>11} at "
                    f"{duration(p['from_step_start_us'])}{phase}"
                )
        lines.append("  alive at the peak, by the op that allocated it:")
        lines.append(f"    {'size':>11} {'share':>6} {'allocs':>7}  op")
        total = peak["bytes"] or 1
        rows = d["at_peak"]
        for r in rows[:TOP]:
            count = "-" if r["allocations"] is None else str(r["allocations"])
            lines.append(
                f"    {size(r['bytes']):>11} {r['bytes'] / total:>6.1%} {count:>7}  {r['op']}"
            )
        rest = rows[TOP:]
        if rest:
            left = sum(r["bytes"] for r in rest)
            lines.append(f"    {size(left):>11} {left / total:>6.1%} {'':>7}  {len(rest)} more ops")
    if png:
        lines.append("")
        lines.append(f"plot: {png}")
    return "\n".join(wrap(lines))


def as_dict(reading: dict, png: str | None) -> dict:
    """For --json: the reading without the timelines (the trace holds every event)."""
    devices = [{k: v for k, v in d.items() if k != "timeline"} for d in reading["devices"]]
    steps = [{**s, "phases": [list(p) for p in s["phases"]]} for s in reading["steps"]]
    malformed = dict(reading.get("malformed") or {})
    return {"png": png, "devices": devices, "steps": steps, "malformed": malformed}
