"""The top of each list, over every recorded step: kernels by total GPU time (names grouped:
template arguments, parameter lists and Inductor's numeric suffix dropped), CPU ops by the
GPU time of the work they launched themselves, and CPU ops by their self time (their time
minus their children's)."""

from __future__ import annotations

import re

from tracereader.names.kernel_names import readable
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
    """CPU ops by self time: their time minus that of the ops nested directly in them."""
    self_us: dict[str, float] = {}
    count: dict[str, int] = {}
    self_get, count_get = self_us.get, count.get  # bound once: this loop sees every op
    for step in trace.steps:
        for ops in (step.cpu_ops, step.other_ops):
            for op in ops:
                name = op.name
                own = op.dur - op.inner
                self_us[name] = self_get(name, 0.0) + (own if own > 0.0 else 0.0)
                count[name] = count_get(name, 0) + 1
    rows = [{"name": k, "self_us": v, "count": count[k]} for k, v in self_us.items()]
    return sorted(rows, key=lambda r: -r["self_us"])[:n]
