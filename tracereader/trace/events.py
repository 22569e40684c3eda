"""Keeping the events the reader uses, compactly: `Events.take` is handed the file's events in
order, a batch at a time (by trace.load, or a slab at a time by trace.fanout's workers), and
keeps the CPU ops, runtime calls, GPU items, nn.Module calls and steps as the model's objects,
with interned names and args; a malformed event is skipped and counted by reason (the policy
is load's docstring)."""

from __future__ import annotations

import json
from collections import Counter
from types import MappingProxyType

from tracereader.names import footprint
from tracereader.names.kernel_classes import KernelClass
from tracereader.names.kernel_names import GEMV_REDUCTION, classify, gemv_by_grid
from tracereader.trace.model import EMPTY, CpuOp, GpuItem, Module, RuntimeCall

decode = json.JSONDecoder().raw_decode  # the stdlib's C decoder: the loader's and the workers'

# category -> what it is, for today's names, the 2021 format's and MTIA's
GPU_CATEGORIES = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "mtia_ccp_events": "kernel",
}
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"})
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "Operator"})
MODULE_PREFIX = "nn.Module: "  # a python_function event that is an nn.Module's call
_GROUP = {
    **dict.fromkeys(CPU_CATEGORIES, 0),
    **dict.fromkeys(RUNTIME_CATEGORIES, 1),
    **dict.fromkeys(GPU_CATEGORIES, 2),
    "python_function": 3,
}
_ID_TYPES = frozenset({int, str, type(None)})
CPU_ARGS = ("Input Dims", "Input type")  # what compare reads; strides and values are dropped
CAST_OPS = frozenset({"aten::_to_copy", "aten::to"})  # these also keep the dtype they cast to
# What torch records about a collective, on its NCCL kernel (2.1 and later) and on the
# record_param_comms op that issued it.
COLLECTIVE_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
)
KERNEL_ARGS = (*footprint.FIELDS, "device", "stream", *COLLECTIVE_ARGS)
COPY_ARGS = ("bytes", "device", "stream")
# Sane bounds in microseconds: a ts beyond ~3000 years or a dur beyond ~115 days is damage,
# and bounding them keeps every sum and mean finite (no NaN/Infinity can reach --json).
MAX_ABS_TS = 1e17
MAX_DUR = 1e13
MAX_ELEMENTS = 2**63  # a tensor's dims and element count are int64: past them, not a shape


def _number(value) -> float | None:
    """A finite float from a JSON number, or None (strings, bools, NaN, Infinity)."""
    kind = type(value)
    if kind is int:
        return float(value) if -MAX_ABS_TS < value < MAX_ABS_TS else None
    if kind is float:
        return value if -MAX_ABS_TS < value < MAX_ABS_TS else None  # False for NaN too
    return None


def _small(value):
    """An args value kept as is when it is a sane scalar or a list of ints, else None."""
    kind = type(value)
    if kind is str or kind is int and -MAX_ELEMENTS < value < MAX_ELEMENTS:  # else no count
        return value
    if kind is float:
        return value if value == value and abs(value) < MAX_ABS_TS else None
    if kind is list and len(value) <= 8 and _a_shape(value):
        return tuple(value)
    return None


def _a_shape(dims: list) -> bool:
    """Ints that a tensor can have as its sizes: each and their product within int64 (no
    tensor has more elements; the FLOPs and bytes read from more would overflow a float)."""
    elements = 1
    for d in dims:
        if type(d) is not int or not -MAX_ELEMENTS < d < MAX_ELEMENTS:
            return False
        elements *= d
        if not -MAX_ELEMENTS < elements < MAX_ELEMENTS:
            return False
    return True


class Events:
    """Collects the events this reader uses as compact objects; counts malformed ones."""

    def __init__(self):
        self.steps: list[tuple[float, float, str, object]] = []  # ts, dur, name, thread
        self.ops: dict[object, list[CpuOp]] = {}  # by thread
        self.calls: dict[object, list[RuntimeCall]] = {}  # by thread
        self.by_correlation: dict[int, RuntimeCall] = {}
        self.items: list[GpuItem] = []
        self.modules: dict[object, list[Module]] = {}  # by thread
        self.annotations: set[str] = set()  # names recorded as user_annotation
        self.skipped: Counter = Counter()
        self.seen = 0
        self.memory = None  # a trace.memory.Collector when the allocator's events are wanted
        self._names: dict[str, str] = {}
        self._args: dict[tuple, MappingProxyType] = {}
        self._shapes: dict[tuple, tuple] = {}
        self._classes: dict[str, KernelClass] = {}
        self._by_text: dict[tuple[str, str], MappingProxyType] = {}
        self._rows: dict[tuple, MappingProxyType] = {}

    def name(self, raw: str) -> str:
        name = self._names.get(raw)
        if name is None:
            name = raw
            if not raw.isascii():
                # A lone surrogate from a JSON escape cannot be printed or written as UTF-8.
                name = raw.encode("utf-8", "replace").decode("utf-8")
            self._names[raw] = name
        return name

    # long: one loop over a batch of the file's events, each kept to few Python calls
    def take(self, batch: list) -> None:
        """Keep what the reader uses of `batch`, events in the file's order."""
        self.seen += len(batch)
        skipped, interned, memory = self.skipped, self._names.get, self.memory
        for event in batch:
            if type(event) is not dict:
                skipped["not an object"] += 1
                continue
            get = event.get
            if get("ph") != "X":
                if memory is not None and get("name") == "[memory]":
                    memory.take(event)
                continue
            cat = get("cat")
            group = _GROUP.get(cat) if type(cat) is str else None
            if group is None:
                continue
            name = get("name")
            if group == 3 and (type(name) is not str or not name.startswith(MODULE_PREFIX)):
                continue  # with_stack's other Python frames: many, and not read
            if type(name) is not str:
                skipped["no name" if name is None else "a name that is not a string"] += 1
                continue
            ts, dur = get("ts"), get("dur")
            if type(ts) is not float or not -MAX_ABS_TS < ts < MAX_ABS_TS:
                ts = _number(ts)
                if ts is None:
                    skipped["no finite numeric ts"] += 1
                    continue
            if type(dur) is not float or not 0 <= dur < MAX_DUR:
                dur = _number(dur)
                if dur is None or not 0 <= dur < MAX_DUR:
                    skipped["no finite, non-negative numeric dur"] += 1
                    continue
            args = get("args")
            if args is None:
                args = {}
            elif type(args) is not dict:
                skipped["args that are not an object"] += 1
                continue
            found = interned(name)
            name = self.name(name) if found is None else found
            if group == 2:
                self._gpu(name, GPU_CATEGORIES[cat], ts, dur, args)
                continue
            pid, tid = get("pid"), get("tid")
            if type(pid) not in _ID_TYPES or type(tid) not in _ID_TYPES:
                skipped["a pid or tid that is not a number or string"] += 1
                continue
            if group == 0 and not name.startswith("ProfilerStep#"):
                self._op(name, cat, ts, dur, args, (pid, tid))
            elif group == 1:
                call = RuntimeCall(name, ts, dur)
                calls = self.calls.get((pid, tid))
                if calls is None:
                    calls = self.calls[(pid, tid)] = []
                calls.append(call)
                corr = args.get("correlation")
                if type(corr) is int:  # only a real id links: no None, bool or string keys
                    self.by_correlation[corr] = call
            elif group == 3:
                modules = self.modules.get((pid, tid))
                if modules is None:
                    modules = self.modules[(pid, tid)] = []
                modules.append(Module(self.name(name[len(MODULE_PREFIX) :]), ts, dur))
            else:  # user_annotation; cpu_op in older torch
                self.steps.append((ts, dur, name, (pid, tid)))

    def _op(self, name: str, cat: str, ts: float, dur: float, args: dict, thread) -> None:
        ops = self.ops.get(thread)
        if ops is None:
            ops = self.ops[thread] = []
        if cat == "user_annotation":
            self.annotations.add(name)
        if "Input Dims" in args or "Input type" in args or "Collective name" in args:
            kept = self._cpu_args(args)
            if name in CAST_OPS:  # the dtype cast to: record_shapes' second concrete input
                kept = self._with_target(kept, args.get("Concrete Inputs"))
            ops.append(CpuOp(name, ts, dur, kept))
        else:
            ops.append(CpuOp(name, ts, dur))

    def _cpu_args(self, args: dict):
        dims, types = args.get("Input Dims"), args.get("Input type")
        if "Collective name" in args:  # record_param_comms: what the collective moved
            return self._collective_args(args, dims, types)
        if dims is None and types is None:
            return EMPTY
        # The same shapes repeat every step: their text (repr tells 1 from 1.0 and True,
        # which the checks below treat differently) finds the kept args without the checks.
        text = (str(dims), str(types))
        found = self._by_text.get(text)
        if found is None:
            found = self._by_text[text] = self._checked_args(dims, types)
        return found

    def _with_target(self, kept, concrete):
        target = concrete[1] if type(concrete) is list and len(concrete) > 1 else None
        if type(target) is not str or not target.isdigit():
            return kept
        key = (id(kept), target)
        found = self._args.get(key)
        if found is None:
            found = self._args[key] = MappingProxyType({**kept, "Cast to": target})
        return found

    def _checked_args(self, dims, types):
        dims = self._dims(dims)
        types = tuple(types) if type(types) is list and all(type(t) is str for t in types) else None
        key = (dims, types)
        found = self._args.get(key)
        if found is None:
            kept = {}
            if dims is not None:
                kept["Input Dims"] = dims
            if types is not None:
                kept["Input type"] = types
            found = self._args[key] = MappingProxyType(kept)
        return found

    def _collective_args(self, args: dict, dims, types):
        key = tuple((k, _small(args.get(k))) for k in COLLECTIVE_ARGS if k in args)
        dims = self._dims(dims)
        types = tuple(types) if type(types) is list and all(type(t) is str for t in types) else None
        key += (("Input Dims", dims), ("Input type", types))
        kept = self._args.get(key)
        if kept is None:
            kept = self._args[key] = MappingProxyType({k: v for k, v in key if v is not None})
        return kept

    def _dims(self, dims) -> tuple | None:
        """Input Dims as a tuple of shape tuples, interned: the same shapes repeat every step."""
        if type(dims) is not list:
            return None
        shapes = []
        for shape in dims:
            if type(shape) is not list or not _a_shape(shape):
                return None
            shape = tuple(shape)
            shapes.append(self._shapes.setdefault(shape, shape))
        shapes = tuple(shapes)
        return self._shapes.setdefault(shapes, shapes)

    def _gpu(self, name: str, kind: str, ts: float, dur: float, args: dict) -> None:
        corr = args.get("correlation")
        if type(corr) is not int:
            corr = None  # nothing links it to a launch: GPU time, but in no step
        wanted = KERNEL_ARGS if kind == "kernel" else COPY_ARGS
        key = tuple((k, _small(args.get(k))) for k in wanted if k in args)
        kept = self._args.get(key)
        if kept is None:
            kept = self._args[key] = MappingProxyType({k: v for k, v in key if v is not None})
        self.items.append(GpuItem(name, kind, ts, dur, self.klass(name, kept), kept, corr))

    def klass(self, name: str, kept) -> KernelClass:
        klass = self._classes.get(name)
        if klass is None:
            klass = self._classes[name] = classify(name)
        if klass.detail == GEMV_REDUCTION:  # a GEMV, or a norm reading one: the grid tells
            klass = gemv_by_grid(klass, footprint.blocks(kept))
        return klass

    def kept(self, items: tuple) -> MappingProxyType:
        """Args from their items (trace.fanout's workers send them so), interned."""
        found = self._rows.get(items)
        if found is None:
            found = self._rows[items] = MappingProxyType(dict(items)) if items else EMPTY
        return found

    def fresh(self) -> Events:
        """Empty of events, sharing this one's interned names, args and classes: a worker's
        slabs repeat the same few."""
        other = Events()
        other._names, other._args, other._shapes = self._names, self._args, self._shapes
        other._classes, other._by_text = self._classes, self._by_text
        return other
