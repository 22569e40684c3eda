"""nn.Module attribution, where the trace carries module events: torch.profiler with
with_stack=True records each eager nn.Module call as a `python_function` event named
`nn.Module: <Class>_<n>` on the thread that ran it (with_modules=True alone records none in
eager mode).

A module is its path from the outermost module (Net_0/Sequential_0/Block_1): the same path in
every step is the same module. Per module and step, its children included:
  cpu_us   the union of its calls' spans on its thread
  gpu_us   the union of the GPU work launched while it was open: the runtime call that queued
           the work (cudaLaunchKernel, ...) was made on its thread inside its span
  launches the GPU items (kernels, memcpys, memsets) so launched
each the median over the steps (0 in a step where the module did not run).

GPU work launched outside every module is not guessed at: the autograd engine runs the
backward on a thread of its own, where the profiler records no module events, so a backward
kernel cannot be tied to the module whose forward it differentiates. That work is counted
apart: launched on a thread without module events (the backward, in a training step), and on
a module thread outside every module (the loss, the optimizer, input copies).

The level the summary shows: from the outermost modules down, a level of a single module
with children is a wrapper (the model around its body, LlamaForCausalLM_0 around LlamaModel_0
and the head): skipped, down to the first level of two or more modules. Those are the top
rows, each with its children as second-level rows; repeated siblings (a model's eight decoder
layers: one class, the same children) are one row where the siblings are more than the rows
left.
"""

from __future__ import annotations

import re
import statistics

from tracereader.analyses import breakdown
from tracereader.trace import intervals
from tracereader.trace.model import Trace

ROWS = 6  # the summary's module rows (its header and the line on unattributed work aside)
_INSTANCE = re.compile(r"_\d+$")


class _Node:
    __slots__ = ("name", "path", "depth", "parent", "children", "cpu", "gpu", "launches", "calls")

    def __init__(self, name: str, path: str, depth: int, parent, steps: int):
        self.name = name
        self.path = path
        self.depth = depth
        self.parent: _Node | None = parent
        self.children: list[_Node] = []
        self.cpu: list[list] = [[] for _ in range(steps)]  # per step: (start, end) of its calls
        self.gpu: list[list] = [[] for _ in range(steps)]  # per step: what it launched
        self.launches = [0] * steps
        self.calls = [0] * steps


def _length(spans: list) -> float:
    if len(spans) == 1:  # most modules run once per step
        return spans[0][1] - spans[0][0]
    return intervals.length(intervals.union(spans))


def _median_union(per_step: list[list]) -> float:
    return statistics.median(_length(spans) for spans in per_step)


def class_of(name: str) -> str:
    """The module's class: its name without the instance number (Linear_3 -> Linear)."""
    return _INSTANCE.sub("", name)


def read(trace: Trace) -> dict | None:
    """The module tree with each module's CPU and GPU time, the rows the summary shows and
    the GPU work outside every module; None when the trace has no module events."""
    steps = trace.steps
    index = {id(s): i for i, s in enumerate(steps)}
    nodes: dict[int, _Node] = {}  # id(Module) -> its node
    by_path: dict[str, _Node] = {}
    roots: list[_Node] = []
    for m in trace.modules:  # parents before their children
        i = index.get(id(m.step))
        if i is None:  # a step set aside (Trace.with_steps)
            continue
        parent = nodes.get(id(m.parent)) if m.parent is not None else None
        path = f"{parent.path}/{m.name}" if parent is not None else m.name
        node = by_path.get(path)
        if node is None:
            node = by_path[path] = _Node(m.name, path, m.depth, parent, len(steps))
            (parent.children if parent is not None else roots).append(node)
        nodes[id(m)] = node
        node.cpu[i].append((m.ts, m.ts + m.dur))
        node.calls[i] += 1
    if not by_path:
        return None
    of_call = trace.module_of_call
    elsewhere = [[] for _ in steps]  # launched on a thread without module events
    outside = [[] for _ in steps]  # on a module thread, outside every module
    for i, s in enumerate(steps):
        for item in s.gpu:
            span = (item.ts, item.ts + item.dur)
            if item.call not in of_call:
                elsewhere[i].append(span)
                continue
            m = of_call[item.call]
            node = nodes.get(id(m)) if m is not None else None
            if node is None:
                outside[i].append(span)
                continue
            while node is not None:
                node.gpu[i].append(span)
                node.launches[i] += 1
                node = node.parent
    tree = []

    def walk(node: _Node) -> None:
        tree.append(node)
        for child in node.children:
            walk(child)

    for root in roots:
        walk(root)
    medians = {
        node.path: {
            "path": node.path,
            "name": node.name,
            "depth": node.depth,
            "cpu_us": _median_union(node.cpu),
            "gpu_us": _median_union(node.gpu),
            "launches": statistics.median(node.launches),
            "calls": statistics.median(node.calls),
        }
        for node in tree
    }
    level, wrappers = roots, []
    while len(level) == 1 and level[0].children:
        wrappers.append(level[0].name)
        level = level[0].children
    key = "gpu_us" if trace.on_gpu else "cpu_us"
    return {
        "ranked_by": key,
        "wrappers": wrappers,
        "rows": _rows(level, medians, key, len(steps)),
        "tree": [medians[node.path] for node in tree],
        "outside_modules": {
            "gpu_busy_us": statistics.median(breakdown.step(s)["gpu_busy_us"] for s in steps),
            "other_threads_gpu_us": _median_union(elsewhere),
            "module_threads_gpu_us": _median_union(outside),
        }
        if trace.on_gpu
        else None,
    }


def _rows(level: list[_Node], medians: dict, key: str, steps: int) -> list[dict]:
    """The summary's rows: the level's modules (siblings of one class as one row), ranked, each
    followed by its children ranked, within ROWS; the top level claims its rows first."""
    tops = _grouped(level, medians, steps, key, ROWS)[:ROWS]
    left = ROWS - len(tops)
    rows = []
    for members, top in tops:
        rows.append({**top, "level": 1})
        if len(members) == 1 and left > 0:
            children = _grouped(members[0].children, medians, steps, key, left)[:left]
            left -= len(children)
            rows += [{**child, "level": 2} for _, child in children]
    return rows


def _grouped(nodes: list[_Node], medians: dict, steps: int, key: str, room: int) -> list[tuple]:
    """Sibling modules as (members, row), ranked by `key`; where they are more than `room`
    rows, repeated ones together: those of one class whose children are of the same classes
    in the same order (a model's decoder layers, not ResNet's stages of 3, 4, 6 and 3 blocks),
    per step the union of their spans."""
    by_kind: dict[tuple, list[_Node]] = {}
    for node in nodes:
        kind = (
            (class_of(node.name), *(class_of(c.name) for c in node.children))
            if len(nodes) > room
            else (node.path,)
        )
        by_kind.setdefault(kind, []).append(node)
    rows = []
    for (cls, *_), members in by_kind.items():
        if len(members) == 1:
            m = medians[members[0].path]
            row = {k: m[k] for k in ("name", "path", "cpu_us", "gpu_us", "launches")}
            rows.append((members, {**row, "modules": [m["name"]]}))
            continue
        per_step = range(steps)
        row = {
            "name": f"{cls} x{len(members)}",
            "path": members[0].path.rpartition("/")[0],  # their parent's
            "cpu_us": _median_union([[c for n in members for c in n.cpu[i]] for i in per_step]),
            "gpu_us": _median_union([[g for n in members for g in n.gpu[i]] for i in per_step]),
            "launches": statistics.median(sum(n.launches[i] for n in members) for i in per_step),
            "modules": [n.name for n in members],
        }
        rows.append((members, row))
    return sorted(rows, key=lambda r: -r[1][key])
