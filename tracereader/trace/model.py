"""The trace model: what `load` builds from a file and every analysis reads.

A trace is one process (one rank): its CPU ops per thread, the CUDA runtime and driver calls,
and the GPU work (kernels, memcpys, memsets) on its streams, linked by correlation ids: a GPU
event carries the id of the runtime call (cudaLaunchKernel, cuLaunchKernelEx,
cudaMemcpyAsync, ...) that queued it, and the innermost CPU op open on that call's thread is
its launcher.

Time is cut into units. With a schedule, a unit is a recorded ProfilerStep: the CPU ops of
the step's thread as a tree (the dispatch chain), the ops of other threads inside its span
(the autograd thread's backward), the runtime calls made during it, and the GPU work it
launched, even where that work runs after the step's CPU side has ended. Without a
ProfilerStep (a trace profiled without a schedule) the whole recorded window is one unit,
and `Trace.unit` says so.

A trace with GPU events is a GPU trace whether or not it recorded `deviceProperties`; the
device's name comes from `deviceProperties` when it is there.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections import Counter
from pathlib import Path
from types import MappingProxyType

from tracereader.names.kernel_classes import KernelClass

KIND_BIT = {"kernel": 1, "memcpy": 2, "memset": 4}
EMPTY = MappingProxyType({})
NOTHING: tuple = ()  # the shared `launched` of ops that launched nothing (saves a list each)
WINDOW = "the recorded window"  # the unit's name in a trace without ProfilerStep
UNNAMED_GPU = "a GPU (name not recorded)"


class CpuOp:
    """A CPU op (or user annotation) inside a step. `args` is shared between ops: read-only."""

    __slots__ = (
        "name",
        "ts",
        "dur",
        "depth",
        "args",
        "launched",
        "parent",
        "index",
        "below",
        "inner",
    )

    def __init__(self, name: str, ts: float, dur: float, args=EMPTY):
        self.name = name
        self.ts = ts
        self.dur = dur
        self.depth = 0  # 0 = directly under the step
        self.args = args
        self.launched: list[GpuItem] | tuple = NOTHING  # directly, not by children
        self.parent: CpuOp | None = None  # None = directly under the step
        self.index = -1  # position in its step's cpu_ops (-1: an op of another thread)
        self.below = 0  # kinds of GPU work launched by it or its subtree (KIND_BIT mask)
        self.inner = 0.0  # the summed durations of the ops nested directly in it

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def __repr__(self) -> str:
        return f"CpuOp(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r}, depth={self.depth})"


class GpuItem:
    """A kernel, memcpy or memset. `args`: its footprint fields (kernels: grid, block,
    registers per thread, shared memory, blocks per SM, warps per SM, est. achieved occupancy %;
    memcpy/memset: bytes; all: device, stream; collectives: message size, group), shared
    between items: read-only."""

    __slots__ = (
        "name",
        "kind",
        "ts",
        "dur",
        "runtime",
        "launcher",
        "klass",
        "args",
        "correlation",
        "call",
    )

    def __init__(self, name, kind, ts, dur, klass, args=EMPTY, correlation=None):
        self.name: str = name
        self.kind: str = kind  # kernel | memcpy | memset
        self.ts: float = ts
        self.dur: float = dur
        self.runtime: str = "?"  # the runtime/driver call that queued it
        self.launcher: CpuOp | None = None
        self.klass: KernelClass = klass
        self.args = args
        self.correlation: int | None = correlation
        self.call: RuntimeCall | None = None  # that call itself, when it was recorded

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def stream(self):
        return self.args.get("stream")

    @property
    def launched_by(self) -> str:
        return self.launcher.name if self.launcher else "?"

    def __repr__(self) -> str:
        return f"GpuItem(name={self.name!r}, kind={self.kind!r}, ts={self.ts!r}, dur={self.dur!r})"


class RuntimeCall:
    __slots__ = ("name", "ts", "dur", "launcher", "step")

    def __init__(self, name: str, ts: float, dur: float):
        self.name = name
        self.ts = ts
        self.dur = dur
        self.launcher: CpuOp | None = None  # the innermost CPU op open on its thread
        self.step: Step | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def __repr__(self) -> str:
        return f"RuntimeCall(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r})"


class Module:
    """One call of an eager nn.Module: the profiler's `python_function` event named
    `nn.Module: <Class>_<n>` (torch.profiler records them with with_stack=True). `name` is
    `<Class>_<n>`; n numbers a class's instances as the profiler first met them, so a name is
    the same module in every step. Nested by time on its thread, within its step."""

    __slots__ = ("name", "ts", "dur", "depth", "parent", "step")

    def __init__(self, name: str, ts: float, dur: float):
        self.name = name
        self.ts = ts
        self.dur = dur
        self.depth = 0  # 0 = no module open around it on its thread
        self.parent: Module | None = None
        self.step: Step | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def __repr__(self) -> str:
        return f"Module(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r}, depth={self.depth})"


class Step:
    """One unit of time (not a dataclass: see kernel_classes.KernelClass)."""

    def __init__(self, name: str, ts: float, dur: float, cpu_ops, runtime, gpu, other_ops=None):
        self.name = name
        self.ts = ts
        self.dur = dur
        self.cpu_ops: list[CpuOp] = cpu_ops  # of the step's thread, in start order, with depth
        self.runtime: list[RuntimeCall] = runtime  # of every thread, in start order
        self.gpu: list[GpuItem] = gpu  # in launch order
        # of other threads, in start order
        self.other_ops: list[CpuOp] = [] if other_ops is None else other_ops
        self.memo: dict[str, object] = {}  # per_step's answers

    def __repr__(self) -> str:
        return f"Step(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r}, gpu={len(self.gpu)})"

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def gpu_sum(self) -> float:
        """The summed durations of its GPU work, named a sum because it is one: work on
        several streams counts twice where it overlaps. The time the GPU was busy is the
        union, analyses.breakdown.busy (the one definition of GPU busy)."""
        return sum(item.dur for item in self.gpu)

    def op_names(self) -> list[str]:
        return [op.name for op in self.cpu_ops]

    def op_names_any_thread(self) -> list[str]:
        """The step thread's ops, then those of other threads inside the step's time: on a GPU
        autograd runs the backward (and the hooks it calls, FSDP's post-backward reduce among
        them) on a thread of its own."""
        return [op.name for op in (*self.cpu_ops, *self.other_ops)]

    def count(self, cls: str) -> int:
        """GPU operations of a class: a kernel that joins the one before it (a split-K
        reduce after its GEMM) is part of that operation, not another one."""
        return sum(item.klass.cls == cls and not item.klass.joins_previous for item in self.gpu)


class Trace:
    """One process's trace (not a dataclass: see kernel_classes.KernelClass)."""

    def __init__(
        self,
        path: Path,
        steps: list[Step],
        device: str | None,
        runtime_outside_steps: list[RuntimeCall],
        has_runtime: bool,
        meta: dict | None = None,
        skipped: Counter | None = None,
        unit: str = "step",
        device_source: str | None = None,
        gpu_all: list[GpuItem] | None = None,
        modules: list[Module] | None = None,
        module_of_call: dict | None = None,
    ):
        self.path = path
        self.steps = steps
        self.device = device  # the GPU's name (UNNAMED_GPU if not recorded), None: CPU only
        self.runtime_outside_steps = runtime_outside_steps
        self.has_runtime = has_runtime  # CUDA runtime calls were recorded (CUDA activity on)
        self.meta = {} if meta is None else meta  # deviceProperties, distributedInfo, versions
        self.skipped = Counter() if skipped is None else skipped  # malformed events, by reason
        self.unit = unit  # "step": ProfilerSteps; "window": no step, the recording is one
        self.device_source = device_source  # "deviceProperties" | "GPU events" | None
        self.gpu_all = [] if gpu_all is None else gpu_all  # every GPU event, in start order
        # nn.Module calls inside the steps (per thread, parents before children), and for each
        # runtime call in a step on a thread that has them, the innermost module open then
        # (None: outside every module). Both empty without module events.
        self.modules = [] if modules is None else modules
        self.module_of_call = {} if module_of_call is None else module_of_call
        # the names recorded as user_annotation (record_function): the user's regions, and
        # torch's own ones (ProfilerStep, DataLoader, Optimizer, compiled regions)
        self.annotations: frozenset[str] = frozenset()
        self.memo: dict[str, object] = {}  # per_step's answers about the whole trace

    def __repr__(self) -> str:
        return f"Trace(path={self.path!r}, steps={len(self.steps)}, device={self.device!r})"

    def with_steps(self, steps: list[Step]) -> Trace:
        """The same trace read over other steps (a cold step set aside, phases split)."""
        other = object.__new__(Trace)
        other.__dict__.update(self.__dict__)
        other.steps = steps
        other.memo = {}  # its answers are its own: other steps
        return other

    @property
    def gpu_items(self) -> int:
        return sum(len(s.gpu) for s in self.steps)

    @property
    def on_gpu(self) -> bool:
        """GPU events were recorded (deviceProperties alone does not make a GPU trace)."""
        return bool(self.gpu_all)

    @property
    def rank(self) -> int | None:
        info = self.meta.get("distributedInfo")
        rank = info.get("rank") if isinstance(info, dict) else None
        return rank if type(rank) is int else None

    def device_properties(self, device: object = 0) -> dict:
        """The profiler's deviceProperties entry for a device id (a kernel's args["device"]):
        SM count, warp size, registers, shared memory and threads per SM; {} when absent."""
        props = self.meta.get("deviceProperties")
        if not isinstance(props, list):
            return {}
        found = [p for p in props if isinstance(p, dict) and p.get("id") == device]
        if not found and len(props) == 1 and isinstance(props[0], dict):
            found = props  # a single-GPU trace whose entry has no id
        return found[0] if found else {}


# --- building the model: sort once, bisect into steps, one stack sweep per thread ------------


def _device(meta: dict, gpu: list[GpuItem]) -> tuple[str | None, str | None]:
    """The device's name and where it came from. The deviceProperties entry of the device
    the GPU events ran on (a process sees every GPU of its machine), else the first."""
    props = meta.get("deviceProperties")
    if isinstance(props, list) and props:
        entries = [p for p in props if isinstance(p, dict)]
        used = gpu[0].args.get("device") if gpu else None
        mine = [p for p in entries if p.get("id") == used] or entries[:1]
        name = mine[0].get("name") if mine else None
        if isinstance(name, str) and name:
            return name, "deviceProperties"
    if gpu:
        return UNNAMED_GPU, "GPU events"
    return None, None


def build(
    path: Path, steps_raw, ops, calls, by_correlation, items, meta, skipped, modules=None
) -> Trace:
    """The trace from what the loader kept: steps as (ts, dur, name, thread), ops and calls
    by thread, runtime calls by correlation id, GPU items in file order, nn.Module calls by
    thread."""
    unit = "step"
    if not steps_raw:
        steps_raw = _window(ops, calls, items)
        unit = "window"
    steps_raw.sort(key=lambda s: s[0])
    steps = [Step(name, ts, dur, [], [], []) for ts, dur, name, _ in steps_raw]
    step_thread = [thread for *_, thread in steps_raw]
    step_of, spans = _lookup(steps)
    has_runtime = any(calls.values())
    outside: list[RuntimeCall] = []
    for thread in ops.keys() | calls.keys():
        thread_ops = ops.get(thread, [])
        thread_ops.sort(key=lambda op: (op.ts, -op.dur))  # parents before the children they hold
        thread_calls = calls.get(thread, [])
        thread_calls.sort(key=lambda c: c.ts)
        _sweep(thread_ops, thread_calls, steps, step_of, spans, step_thread, thread, outside)
    kept_modules: list[Module] = []
    module_of_call: dict[RuntimeCall, Module | None] = {}
    for thread, thread_modules in (modules or {}).items():
        thread_calls = calls.get(thread, [])  # sorted by the sweep above
        kept_modules += _nest_modules(thread_modules, thread_calls, steps, step_of, module_of_call)
    ops.clear()
    calls.clear()

    items.sort(key=lambda i: i.ts)
    for item in items:
        call = by_correlation.get(item.correlation) if item.correlation is not None else None
        if call is None:
            continue
        item.call = call
        item.runtime = call.name
        if call.step is None:
            continue  # launched outside the recorded steps
        item.launcher = call.launcher
        call.step.gpu.append(item)
    for step in steps:
        # Launch order: by the launching call's start; the file's order breaks ties.
        step.gpu.sort(key=lambda i: i.call.ts)
        step.runtime.sort(key=lambda c: c.ts)
        for item in step.gpu:
            op = item.launcher
            if op is not None:
                if op.launched is NOTHING:
                    op.launched = []
                op.launched.append(item)
                op.below |= KIND_BIT[item.kind]
        # Children come after their parent in start order: one backward pass fills `below`.
        for group in (step.cpu_ops, step.other_ops):
            for op in reversed(group):
                if op.below and op.parent is not None:
                    op.parent.below |= op.below
    outside.sort(key=lambda c: c.ts)
    device, source = _device(meta, items)
    return Trace(
        path=path,
        steps=steps,
        device=device,
        runtime_outside_steps=outside,
        has_runtime=has_runtime,
        meta=meta,
        skipped=skipped,
        unit=unit,
        device_source=source,
        gpu_all=items,
        modules=kept_modules,
        module_of_call=module_of_call,
    )


def _window(ops, calls, items) -> list[tuple]:
    """No ProfilerStep: the whole recording as one unit, on the thread that made the most
    runtime calls (the one that launched the GPU work), else the one with the most ops."""
    starts, ends = [], []
    for group in (*ops.values(), *calls.values(), items):
        if group:
            starts.append(min(e.ts for e in group))
            ends.append(max(e.ts + e.dur for e in group))
    if not starts:
        return []
    busiest = max(calls, key=lambda t: len(calls[t]), default=None) if any(calls.values()) else None
    if busiest is None:
        busiest = max(ops, key=lambda t: len(ops[t]), default=None)
    start = min(starts)
    return [(start, max(ends) - start, WINDOW, busiest)]


def _lookup(steps: list[Step]):
    """step_of(ts): the step whose span holds ts (its start and end included), or -1; and
    where it answers each step: from its start to the next one's, up to its own end (the last
    entry, an empty span, is -1's: outside every step, always asked again)."""
    starts = [s.ts for s in steps]
    ends = [s.ts + s.dur for s in steps]

    def step_of(ts: float) -> int:
        i = bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= ends[i] else -1

    nexts = [*starts[1:], float("inf")][: len(starts)]  # none for a trace without steps
    spans = [(a, b, e) for a, b, e in zip(starts, nexts, ends, strict=True)]
    return step_of, [*spans, (0.0, -1.0, -1.0)]


def _sweep(ops, calls, steps, step_of, spans, step_thread, thread, outside) -> None:
    """One pass over a thread's ops and runtime calls in time order: nest the ops of each step
    (a stack of open ops), and give each call the innermost op open when it was made."""
    stack: list[CpuOp] = []
    stack_end: list[float] = []  # clamped to the parent's end, so ends only shrink upward
    current = -2  # the step whose ops the stack holds
    n_ops, n_calls = len(ops), len(calls)
    # Events come in time order, so most fall in the step of the one before: step_of answers
    # `known` again for ts in [lo, hi) up to `end`, without being asked.
    known, lo, hi, end = -1, 0.0, -1.0, -1.0
    i = j = 0
    while i < n_ops or j < n_calls:
        # An op starting at the call's ts holds it, so ops go first on ties.
        is_op = j >= n_calls or (i < n_ops and ops[i].ts <= calls[j].ts)
        ts = ops[i].ts if is_op else calls[j].ts
        if not (lo <= ts < hi and ts <= end):
            known = step_of(ts)
            lo, hi, end = spans[known]
        s = known
        if is_op:
            op = ops[i]
            i += 1
            if s != current:
                stack.clear()
                stack_end.clear()
                current = s
            if s < 0:
                continue  # outside every step: not needed
            while stack and ts >= stack_end[-1]:
                stack.pop()
                stack_end.pop()
            op.depth = len(stack)
            if stack:
                op.parent = parent = stack[-1]
                parent.inner += op.dur
                stack_end.append(min(ts + op.dur, stack_end[-1]))
            else:
                stack_end.append(ts + op.dur)
            stack.append(op)
            step = steps[s]
            if step_thread[s] == thread:
                op.index = len(step.cpu_ops)
                step.cpu_ops.append(op)
            else:
                step.other_ops.append(op)
        else:
            call = calls[j]
            j += 1
            if s < 0:
                outside.append(call)
                continue
            call.step = steps[s]
            steps[s].runtime.append(call)
            if s == current:
                while stack and stack_end[-1] < ts:
                    stack.pop()
                    stack_end.pop()
                call.launcher = stack[-1] if stack else None


def _nest_modules(modules, calls, steps, step_of, module_of_call) -> list[Module]:
    """Nest a thread's module calls by time within each step (those outside every step are
    dropped), then give each of the thread's runtime calls in a step the innermost module open
    when it was made. Returns the kept modules, parents before their children."""
    modules.sort(key=lambda m: (m.ts, -m.dur))
    kept: list[Module] = []
    stack: list[Module] = []
    for m in modules:
        s = step_of(m.ts)
        if s < 0:
            continue
        step = steps[s]
        while stack and (m.ts >= stack[-1].end or stack[-1].step is not step):
            stack.pop()
        m.depth = len(stack)
        m.parent = stack[-1] if stack else None
        m.step = step
        stack.append(m)
        kept.append(m)
    stack.clear()
    i = 0
    for call in calls:
        if call.step is None:
            continue
        while i < len(kept) and kept[i].ts <= call.ts:  # a module starting at the call holds it
            m = kept[i]
            i += 1
            while stack and stack[-1] is not m.parent:
                stack.pop()
            stack.append(m)
        while stack and (stack[-1].end < call.ts or stack[-1].step is not call.step):
            stack.pop()
        module_of_call[call] = stack[-1] if stack else None
    return kept


# --- questions about a step ----------------------------------------------------------------


def per_step(reading):
    """Remember `reading(step, *rest)` (or `reading(trace)`) while the step lives, in its own
    `memo` (`rest`: the step's trace): an answer holding the step then goes with it, where a
    weak-keyed table kept both for the process's life. The model does not change once built."""
    key = f"{reading.__module__}.{reading.__qualname__}"

    @functools.wraps(reading)
    def remembered(step, *rest):
        memo = step.memo
        found = memo.get(key)
        if found is None:
            found = memo[key] = reading(step, *rest)
        return found

    return remembered


@per_step
def in_start_order(step: Step) -> list[GpuItem]:
    """The step's GPU work by start time (step.gpu is in launch order): the unions and the
    idle split walk it in this order."""
    return sorted(step.gpu, key=_start)


def _start(item: GpuItem) -> float:
    return item.ts


def subtree(step: Step, op: CpuOp) -> list[CpuOp]:
    """`op` and everything nested under it, in start order."""
    start = op.index
    if not 0 <= start < len(step.cpu_ops) or step.cpu_ops[start] is not op:
        raise ValueError(f"{op.name} is not a CPU op of {step.name}")
    ops, out = step.cpu_ops, [op]
    for j in range(start + 1, len(ops)):  # by index: no copy of the rest of the step's ops
        if ops[j].depth <= op.depth:
            break
        out.append(ops[j])
    return out


def launched_below(op: CpuOp, kind: str | None = None) -> bool:
    """Whether `op` or anything under it launched GPU work (of `kind`, if given)."""
    return bool(op.below & (KIND_BIT[kind] if kind else 7))


# The floating-point element types, by the short name of the lessons' --dtype and file names:
# how record_shapes spells each in a trace, and torch's name for it. The one table of dtypes:
# common.cli builds the lessons' torch dtypes from it, so the reader stays torch-free.
ELEMENT_TYPES = {
    "bf16": ("c10::BFloat16", "bfloat16"),
    "fp16": ("c10::Half", "float16"),
    "fp32": ("float", "float32"),
    "fp64": ("double", "float64"),
}
DTYPES = {spelling: short for short, (spelling, _) in ELEMENT_TYPES.items()}  # as traces spell them
# Element sizes by the names torch records: "Input type" on CPU ops (c10::BFloat16, float) and
# "dtype" on collectives (BFloat16, Float).
ELEMENT_BYTES = {
    **{name: 2 for name in ("c10::BFloat16", "BFloat16", "c10::Half", "Half")},
    **{name: 4 for name in ("float", "Float", "int", "Int")},
    **{name: 8 for name in ("double", "Double", "long int", "Long")},
    **{name: 1 for name in ("c10::Float8_e4m3fn", "Float8_e4m3fn", "Float8_e5m2", "bool", "Bool")},
    **{name: 1 for name in ("unsigned char", "Byte", "signed char", "Char")},
}


def input_dtype(step: Step) -> str | None:
    """The element type the step's work started from: that of the first floating-point
    tensor among the inputs of its first CPU op that has one (q of attention, x of a matmul):
    "bf16", "fp16", "fp32", "fp64", or None without record_shapes."""
    for op in step.cpu_ops:
        for dtype in op.args.get("Input type") or ():
            if dtype in DTYPES:
                return DTYPES[dtype]
    return None


def ancestors(op: CpuOp | None) -> list[CpuOp]:
    """`op` and the ops it is nested in, innermost first."""
    out = []
    while op is not None:
        out.append(op)
        op = op.parent
    return out


def silent_ops(step: Step) -> list[str]:
    """CPU ops that launched no GPU work, themselves or below them (metadata ops like aten::t)."""
    names: dict[str, None] = {}
    for op in step.cpu_ops:
        if not op.below and op.name.startswith("aten::"):
            names.setdefault(op.name)
    return list(names)
