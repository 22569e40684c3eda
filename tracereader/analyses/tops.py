"""The top of each list, over every recorded step: kernels by total GPU time (names grouped:
template arguments, parameter lists and Inductor's numeric suffix dropped), CPU ops by the
GPU time of the work they launched themselves, and CPU ops by their self time (their time
minus their children's)."""

from __future__ import annotations

import re
from bisect import bisect_right

from tracereader.names.kernel_names import readable
from tracereader.trace import intervals
from tracereader.trace.model import Trace

_SUFFIX = re.compile(r"_\d+$")


def kernel_group(name: str) -> str:
    """A kernel's name for grouping: no `void`, template arguments or parameters, and no
    trailing number (triton_poi_fused_add_0 and ..._1 are one group)."""
    bare = readable(name, width=10_000)
    if "<" in bare:
        bare = bare.split("<")[0]
    return _SUFFIX.sub("", bare)


def kernels(trace: Trace, n: int) -> tuple[list[dict], float]:
    """The n kernel groups with the most GPU time, and the total GPU time of all items."""
    groups: dict[str, dict] = {}
    keys: dict[str, str] = {}  # a name's group, read once per distinct name
    total = 0.0
    for step in trace.steps:
        for item in step.gpu:
            total += item.dur
            key = keys.get(item.name)
            if key is None:
                key = keys[item.name] = kernel_group(item.name)
            row = groups.get(key)
            if row is None:
                row = groups[key] = {
                    "name": key,
                    "class": item.klass.cls,
                    "count": 0,
                    "total_us": 0.0,
                    "names": set(),
                }
            row["count"] += 1
            row["total_us"] += item.dur
            row["names"].add(item.name)
    rows = sorted(groups.values(), key=lambda r: -r["total_us"])
    for row in rows:
        row["mean_us"] = row["total_us"] / row["count"]
        row["pct"] = 100 * row["total_us"] / total if total else 0.0
        row["distinct_names"] = len(row.pop("names"))
    return rows[:n], total


def ops_by_gpu(trace: Trace, n: int) -> list[dict]:
    """CPU ops by the GPU time of the work they launched themselves (summed)."""
    rows: dict[str, dict] = {}
    for step in trace.steps:
        for item in step.gpu:
            if item.launcher is None:
                continue
            row = rows.setdefault(
                item.launcher.name, {"name": item.launcher.name, "gpu_us": 0.0, "launches": 0}
            )
            row["gpu_us"] += item.dur
            row["launches"] += 1
    return sorted(rows.values(), key=lambda r: -r["gpu_us"])[:n]


def ops_by_self(trace: Trace, n: int) -> list[dict]:
    """CPU ops by self time: their time minus that of the ops nested directly in them, and
    minus the time their thread waited inside backward() while autograd's thread ran the
    backward's ops (a step wrapper's "self time" is mostly that wait: llama_train_wrapped's
    `train_step` read 100.6 ms of 2 steps, first of the list); that wait is `backward_wait_us`."""
    self_us: dict[str, float] = {}
    count: dict[str, int] = {}
    waited: dict[str, float] = {}
    self_get, count_get = self_us.get, count.get  # bound once: this loop sees every op
    for step in trace.steps:
        for ops in (step.cpu_ops, step.other_ops):
            for op in ops:
                name = op.name
                own = op.dur - op.inner
                self_us[name] = self_get(name, 0.0) + (own if own > 0.0 else 0.0)
                count[name] = count_get(name, 0) + 1
        for name, us in _backward_wait(step).items():
            self_us[name] -= us
            waited[name] = waited.get(name, 0.0) + us
    rows = [
        {"name": k, "self_us": max(v, 0.0), "count": count[k],
         "backward_wait_us": waited.get(k, 0.0)}
        for k, v in self_us.items()
    ]  # fmt: skip
    return sorted(rows, key=lambda r: -r["self_us"])[:n]


def _backward_wait(step) -> dict[str, float]:
    """Per op name, the part of the step thread's ops' self time during which the other
    threads ran ops (autograd's thread running the backward: analyses.hostside's "autograd
    thread"): the step thread blocked in backward(), not working."""
    busy = intervals.union((op.ts, op.end) for op in step.other_ops if op.parent is None)
    if not busy:
        return {}
    starts = [a for a, _ in busy]
    ends = [b for _, b in busy]
    around = {}  # the step thread's ops whose span meets the other threads' work
    for op in step.cpu_ops:
        k = bisect_right(starts, op.end)
        if k and ends[k - 1] > op.ts and op.dur > op.inner:
            around[id(op)] = op
    if not around:
        return {}
    children: dict[int, list] = {}
    for op in step.cpu_ops:
        if op.parent is not None and id(op.parent) in around:
            children.setdefault(id(op.parent), []).append((op.ts, op.end))
    out: dict[str, float] = {}
    for key, op in around.items():
        own = intervals.subtract([(op.ts, op.end)], intervals.union(children.get(key, ())))
        us = intervals.overlap(own, busy)
        if us > 0.0:
            out[op.name] = out.get(op.name, 0.0) + us
    return out
