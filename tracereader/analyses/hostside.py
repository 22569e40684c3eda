"""Where the host's time goes in a step: the step thread's span split by what it runs, each
instant given to the first of these that covers it (so the parts add up to the step):

  compilation      Dynamo's and Inductor's own work (their timed phases, autotuning)
  data loader      `enumerate(DataLoader)#...` and regions named like loading or collating
  optimizer        `Optimizer.step#...` / `Optimizer.zero_grad#...`, a region named optimizer
  syncs            runtime calls that block the host until the GPU catches up (syncs.py)
  recompute        inside the backward, the forward run again (gradient checkpointing): the
                   backward nodes that replay it
  autograd thread  the step thread waiting inside backward() while autograd's thread runs the
                   backward's ops (kineto shows the wait, not Python overhead)
  user code        a region of the user's (record_function) holding long stretches with no op:
                   its self time, where it averages SPARSE_US or more per op it calls
  dispatch         the rest of the time inside ops: the dispatcher issuing many small ops and
                   their launches
  Python between ops  the rest of the time inside regions: the Python around those ops
                   (nn.Module calls, a library's loop such as transformers' generate)
  other            the rest of the step: no op open (the loop's own Python, unannotated)

Beside it, what the syncs cost the GPU: per step, the GPU idle that follows a blocking call
inside the step, from the call's return to the next sync: the gaps closed by work the host
launched only after the gap opened (the GPU starved, nothing queued); a sync that
closes the step (nothing launched after it in the step) is counted apart, as `end_us`: it
drains the queue once per step.
"""

from __future__ import annotations

import functools
import re
import statistics
from bisect import bisect_right
from collections import Counter

from tracereader.analyses import syncs
from tracereader.analyses.gpuside import FORWARD_ONLY
from tracereader.analyses.nesting import along, innermost
from tracereader.trace import intervals
from tracereader.trace.model import CpuOp, Step, Trace, per_step

ORDER = ("compilation", "data loader", "optimizer", "syncs", "recompute", "autograd thread",
         "user code", "dispatch", "Python between ops", "other")  # fmt: skip
# what fewer, larger launches (torch.compile, CUDA graphs) remove together
LAUNCH_BOUND = ("autograd thread", "dispatch", "Python between ops")
SPARSE_US = 100.0  # a region's self time per op it calls, above which it is the user's code
COMPILE = re.compile(
    r"\(dynamo_timed\)$|^(dynamo|entire_frame_compile|backend_compile|inductor_compile|"
    r"fx_codegen_and_compile|code_gen|async_compile|compile_attempt_\d+)$|compile_id=|"
    r"^(_compile\.compile_inner|compile_inner|compile_fx_inner|CompileFx|"
    r"OutputGraph\.call_user_compiler|create_aot_dispatcher_function|CachingAutotuner\.)"
)
DATA = re.compile(
    r"DataLoader|^(load|collate|fetch|read|get|next)_?(batch|data|sample)s?\b|^data_?load|"
    r"^load_data|pin_memory",
    re.IGNORECASE,
)
BACKWARD = re.compile(r"^(## )?backward$")  # the loop's own region around loss.backward()
OPTIMIZER = re.compile(r"^Optimizer\.(step|zero_grad)#|^(## )?optimizer(\.step)?$|^optim$")
_PLAIN = re.compile(r"^[A-Za-z_][\w.]*$")  # a region's name as a user writes it


def is_region(op: CpuOp, trace: Trace) -> bool:
    """A record_function region: recorded as user_annotation (where the trace says), else a
    plain name no op has (older formats record annotations as ops)."""
    return _is_region_name(op.name, trace)


def _is_region_name(name: str, trace: Trace) -> bool:
    if trace.annotations:
        return name in trace.annotations and not name.startswith("ProfilerStep#")
    return _plain(name)


@functools.lru_cache(maxsize=8192)  # names repeat every step
def _plain(name: str) -> bool:
    return bool(_PLAIN.match(name)) and "::" not in name


@functools.lru_cache(maxsize=32768)
def _says(pattern: re.Pattern, name: str) -> bool:
    return pattern.search(name) is not None


def _blocking(s: Step) -> list:
    """The step's runtime calls that blocked its host (syncs.blocking says why)."""
    return [call for call, _ in syncs.blocking(s)]


def sync_culprit(call) -> str:
    """The op a user wrote that synced: syncs.culprit, the innermost meaningful op around the
    call (`aten::is_nonzero` over `aten::item`, `aten::_grouped_mm` over its offsets' copy)."""
    return syncs.culprit(call)


def _matching(names, pattern) -> frozenset:
    """The names `pattern` finds: a step's ops repeat a few hundred names, so each name is
    tested once and each op is a set lookup."""
    return frozenset(name for name in names if _says(pattern, name))


def _cover(ops, names: frozenset) -> list:
    return intervals.union((op.ts, op.end) for op in ops if op.name in names)


def _user_code(s: Step, regions: frozenset, span) -> tuple[list, Counter]:
    """The self time of sparse regions (their stretches with no op), and per region its us;
    `regions`: the names of the regions that are neither a data loader's nor an optimizer's."""
    children: dict[int, list[CpuOp]] = {}  # of those regions alone
    for op in s.cpu_ops:
        if op.parent is not None and op.parent.name in regions:
            children.setdefault(id(op.parent), []).append(op)
    parts, by = [], Counter()
    for op in s.cpu_ops:
        if op.name not in regions:
            continue
        kids = children.get(id(op), [])
        own = intervals.subtract([(op.ts, op.end)], intervals.union((k.ts, k.end) for k in kids))
        self_us = intervals.length(own)
        if self_us / max(len(kids), 1) >= SPARSE_US:
            parts += own
            by[op.name] += self_us
    return intervals.intersect(intervals.union(parts), span), by


def recomputed(s: Step) -> list:
    """The spans of the backward nodes that run the forward again (a gpuside.FORWARD_ONLY op
    under an autograd node: the checkpoint's unpack hook replays the region there); the node's
    own gradient is a small part of it."""
    spans: dict[int, tuple[float, float]] = {}
    # nesting's answers: every op is walked once, however deep the nesting
    stop, root, engine_of = innermost(_node_or_forward), innermost(_root), innermost(_engine)
    for op in (*s.other_ops, *s.cpu_ops):
        if op.name not in FORWARD_ONLY:
            continue
        node = stop(op.parent)
        if node is None or node.name in FORWARD_ONLY:
            continue  # under no node, or counted at the outer forward op
        outer = root(node) if node.name.startswith("autograd::") else node
        engine = engine_of(node)
        outer = outer if engine is None else engine
        spans[id(outer)] = (outer.ts, outer.end)
    return intervals.union(spans.values())


def _node_or_forward(op: CpuOp) -> bool:
    return "Backward" in op.name or _engine(op) or op.name in FORWARD_ONLY


def _engine(op: CpuOp) -> bool:
    return op.name.startswith("autograd::engine")


def _root(op: CpuOp) -> bool:
    return op.parent is None


def _within(ops: list[CpuOp], parts: list) -> list[float]:
    """Per op, the length of its span inside `parts` (sorted, disjoint intervals)."""
    ends = [b for _, b in parts]
    n = len(parts)
    out = []
    for op in ops:  # every op a step's loop called: the min/max of each overlap inlined
        ts = op.ts
        end = op.end
        us, j = 0.0, bisect_right(ends, ts)
        while j < n:
            start, stop = parts[j]
            if not start < end:
                break
            length = (end if end < stop else stop) - (ts if ts > start else start)
            us += 0.0 if 0.0 > length else length  # max(length, 0.0)
            j += 1
        out.append(us)
    return out


def _regions(names: frozenset):
    """Per op (nesting.along): whether it and all the ops around it are regions (`names`: the
    step's region names), and the outermost op around it (itself included): an op with only
    regions above it is one the loop called, counted under the outermost region."""
    return along(
        lambda above, op: (
            op.name in names and (above is None or above[0]),
            op if above is None else above[1],
        )
    )


def _named(parts: list, ops, names: frozenset) -> Counter:
    by = Counter()
    for op in ops:
        if op.name in names and (op.parent is None or op.parent.name not in names):
            by[op.name] += intervals.length(intervals.intersect([(op.ts, op.end)], parts))
    return by


@per_step
def step(s: Step, trace: Trace) -> dict:
    """{"us": {category: us}, "culprits": {category: Counter of names}} for one step."""
    span = [(s.ts, s.end)]
    left = span
    out: dict[str, float] = {}
    culprits: dict[str, Counter] = {}

    def take(name: str, parts: list, by: Counter) -> None:
        nonlocal left
        got = intervals.intersect(left, intervals.union(parts))
        out[name] = intervals.length(got)
        left = intervals.subtract(left, got)
        culprits[name] = by

    ops = s.cpu_ops
    names = {op.name for op in ops}
    compiling, loading, stepping = (_matching(names, p) for p in (COMPILE, DATA, OPTIMIZER))
    region_names = frozenset(name for name in names if _is_region_name(name, trace))
    compile_parts = _cover(ops, compiling)
    take("compilation", compile_parts, Counter({"torch.compile": intervals.length(compile_parts)}))
    data = _cover(ops, loading)
    take("data loader", data, _named(data, ops, loading))
    optimizer = _cover(ops, stepping)
    take("optimizer", optimizer, _named(optimizer, ops, stepping))
    blocked = [c for c in _blocking(s) if c.launcher is None or c.launcher.index >= 0]
    by = Counter()
    for call in blocked:
        by[sync_culprit(call)] += call.dur
    take("syncs", [(c.ts, c.end) for c in blocked], by)
    again = recomputed(s)
    take("recompute", again, Counter({"checkpointed forward": intervals.length(again)}))
    autograd = [(op.ts, op.end) for op in s.other_ops if op.parent is None]
    backward = _matching(names, BACKWARD)
    autograd += [(op.ts, op.end) for op in ops if op.parent is None and op.name in backward]
    take("autograd thread", autograd, Counter({"backward (autograd thread)": 1.0}))
    user, by = _user_code(s, region_names - loading - stepping, span)
    take("user code", user, by)
    region = [op.name in region_names for op in ops]
    regions = _regions(region_names)
    calls = [
        op
        for op, r in zip(ops, region, strict=True)
        if not r and (op.parent is None or regions(op.parent)[0])
    ]
    by = Counter()  # by the outermost region holding the op (the loop's forward), else op
    for op, us in zip(calls, _within(calls, left), strict=True):
        by[regions(op)[1].name] += us
    take("dispatch", [(op.ts, op.end) for op in calls], by)
    tops = [op for op, r in zip(ops, region, strict=True) if r and op.parent is None]
    by = Counter()
    for op, us in zip(tops, _within(tops, left), strict=True):
        by[op.name] += us
    take("Python between ops", [(op.ts, op.end) for op in tops], by)
    out["other"] = intervals.length(left)
    culprits["other"] = Counter({"(no op open: the loop's own Python)": 1.0})
    return {"us": out, "culprits": culprits}


def read(trace: Trace) -> dict | None:
    """Per category its median us per step (they add up to about the median step) and the
    name that holds most of it over the steps; None without steps."""
    if not trace.steps:
        return None
    rows = [step(s, trace) for s in trace.steps]
    median = {k: statistics.median(r["us"][k] for r in rows) for k in ORDER}
    names: dict[str, Counter] = {k: Counter() for k in ORDER}
    for r in rows:
        for k in ORDER:
            names[k].update(r["culprits"][k])
    return {
        "host_us": statistics.median(s.dur for s in trace.steps),
        "us": median,
        "culprit": {k: (names[k].most_common(1)[0][0] if names[k] else None) for k in ORDER},
    }


def _union_launched(trace: Trace) -> list[list[float]]:
    """The union of the trace's GPU work as [start, end, launch of the item that opens it]."""
    union: list[list[float]] = []
    for item in trace.gpu_all:  # in start order
        launch = item.call.ts if item.call is not None else float("-inf")
        if union and item.ts <= union[-1][1]:
            union[-1][1] = max(union[-1][1], item.end)
        else:
            union.append([item.ts, item.end, launch])
    return union


def _starved(union: list, k: int, until: float) -> float:
    """The GPU's idle from busy interval k-1's end up to `until` (the next sync), in the gaps
    closed by work launched only after they opened: the host had nothing queued."""
    idle = 0.0
    while 0 < k < len(union) and union[k][0] <= until:
        start = union[k - 1][1]
        if union[k][2] >= start:
            idle += union[k][0] - start
        k += 1
    return idle


def sync_costs(trace: Trace) -> dict | None:
    """What the syncs inside the steps cost the GPU (see the module's doc), median per step:
    {"us", "end_us", "count", "culprit"}; None without GPU work or syncs."""
    if not trace.gpu_all or not trace.steps:
        return None
    union = _union_launched(trace)
    ends = [u[1] for u in union]
    rows, names = [], Counter()
    for s in trace.steps:
        launches = sorted(i.call.ts for i in s.gpu if i.call is not None)
        blocking = _blocking(s)
        stops = [c.ts for c in blocking[1:]] + [float("inf")] * bool(blocking)
        inside = end = 0.0
        sites = set()  # the ops that synced: an item() is a copy and a wait, one sync
        for call, stop in zip(blocking, stops, strict=True):
            k = bisect_right(ends, call.end)  # the first busy interval ending after the return
            if k >= len(union) or union[k][0] <= call.end:
                continue  # the GPU was busy when the call returned: it idled for nothing
            if bisect_right(launches, call.end) < len(launches):
                cost = _starved(union, k, stop)
                inside += cost
                op = syncs.culprit_op(call)
                sites.add(id(op) if op is not None else id(call))
                names[op.name if op is not None else call.name] += cost
            else:
                end += union[k][0] - union[k - 1][1] if k else 0.0
        rows.append((inside, end, len(sites)))
    if not any(r[0] or r[1] for r in rows):
        return None
    return {
        "us": statistics.median(r[0] for r in rows),
        "end_us": statistics.median(r[1] for r in rows),
        "count": statistics.median(r[2] for r in rows),
        "culprit": names.most_common(1)[0][0] if names else None,
    }
