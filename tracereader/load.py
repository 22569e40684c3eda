"""Read an exported profiler trace (.json or .json.gz) into steps a person can check.

Per recorded ProfilerStep: the CPU ops under it as a tree (the dispatch chain), the CUDA runtime
and driver calls, and the GPU work (kernels, memcpys, memsets) in launch order, each attributed
to the CPU op that launched it. The link is the trace's correlation id: a GPU event carries the
id of the runtime call (cudaLaunchKernel, cuLaunchKernelEx, cudaMemcpyAsync, ...) that queued
it, and the innermost CPU op open on that call's thread is its launcher. Steps own the GPU work
they launched, even when it runs after the step's CPU side has ended.

Cost: linear in the file apart from a few sorts. The text is read in chunks and decoded one
event at a time (`json.JSONDecoder.raw_decode`, C speed per event); only the events this reader
uses are kept, in compact objects with interned names and args, so a 200 MB trace never
becomes the ~2 GB of dicts that `json.loads` would build.

Malformed input, the policy:
- A file that is not a usable trace is refused with a TraceError (one line): not a regular
  file, unreadable, empty, damaged gzip, not JSON (truncated, nested too deeply), or JSON with
  no list of event objects. The commands also refuse a trace with no ProfilerStep.
- One malformed event among good ones is skipped and counted in `Trace.skipped` (a reason ->
  count; findings turns it into a health problem): an event of a category the reader uses
  whose name is not a string, whose ts/dur are not finite numbers in a sane range, whose args
  are not an object, or an array entry that is not an object. An optional args field of the
  wrong type (a correlation id that is not an integer, dims that are not lists of integers) is
  dropped, the event kept. Events of other categories are not read at all.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
import stat
import zlib
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from tracereader import footprint
from tracereader.kernel_names import KernelClass, classify

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
CPU_CATEGORIES = ("cpu_op", "user_annotation")
# Top-level keys kept in Trace.meta: small, and what multi-rank work will need.
META_KEYS = frozenset(
    {
        "deviceProperties",
        "distributedInfo",
        "schemaVersion",
        "cuda_runtime_version",
        "cuda_driver_version",
        "cupti_version",
        "baseTimeNanoseconds",
        "displayTimeUnit",
        "record_shapes",
        "trace_id",
        "traceName",
    }
)
CPU_ARGS = ("Input Dims", "Input type")  # what compare reads; strides and values are dropped
KERNEL_ARGS = (*footprint.FIELDS, "device", "stream")
COPY_ARGS = ("bytes", "device", "stream")
# Sane bounds in microseconds: a ts beyond ~3000 years or a dur beyond ~115 days is damage,
# and bounding them keeps every sum and mean finite (no NaN/Infinity can reach --json).
MAX_ABS_TS = 1e17
MAX_DUR = 1e13

_KIND_BIT = {"kernel": 1, "memcpy": 2, "memset": 4}
_EMPTY = MappingProxyType({})
_NOTHING: tuple = ()  # the shared `launched` of ops that launched nothing (saves a list each)


class TraceError(Exception):
    """The file is not a readable profiler trace."""


class CpuOp:
    """A CPU op (or user annotation) inside a step. `args` is shared between ops: read-only."""

    __slots__ = ("name", "ts", "dur", "depth", "args", "launched", "parent", "index", "below")

    def __init__(self, name: str, ts: float, dur: float, args=_EMPTY):
        self.name = name
        self.ts = ts
        self.dur = dur
        self.depth = 0  # 0 = directly under the step
        self.args = args
        self.launched: list[GpuItem] | tuple = _NOTHING  # directly, not by children
        self.parent: CpuOp | None = None  # None = directly under the step
        self.index = -1  # position in its step's cpu_ops (-1: an op of another thread)
        self.below = 0  # kinds of GPU work launched by it or its subtree (_KIND_BIT mask)

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def __repr__(self) -> str:
        return f"CpuOp(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r}, depth={self.depth})"


class GpuItem:
    """A kernel, memcpy or memset. `args`: its footprint fields (kernels: grid, block,
    registers per thread, shared memory, blocks per SM, warps per SM, est. achieved occupancy %;
    memcpy/memset: bytes; all: device, stream), shared between items: read-only."""

    __slots__ = ("name", "kind", "ts", "dur", "runtime", "launcher", "klass", "args", "correlation")

    def __init__(self, name, kind, ts, dur, klass, args=_EMPTY, correlation=None):
        self.name: str = name
        self.kind: str = kind  # kernel | memcpy | memset
        self.ts: float = ts
        self.dur: float = dur
        self.runtime: str = "?"  # the runtime/driver call that queued it
        self.launcher: CpuOp | None = None
        self.klass: KernelClass = klass
        self.args = args
        self.correlation: int | None = correlation

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

    def __repr__(self) -> str:
        return f"RuntimeCall(name={self.name!r}, ts={self.ts!r}, dur={self.dur!r})"


@dataclass(eq=False)
class Step:
    name: str
    ts: float
    dur: float
    cpu_ops: list[CpuOp]  # in start order, with depth
    runtime: list[RuntimeCall]
    gpu: list[GpuItem]  # in launch order

    @property
    def gpu_time(self) -> float:
        return sum(item.dur for item in self.gpu)

    def op_names(self) -> list[str]:
        return [op.name for op in self.cpu_ops]

    def count(self, cls: str) -> int:
        """GPU operations of a class: a kernel that joins the one before it (a split-K
        reduce after its GEMM) is part of that operation, not another one."""
        return sum(item.klass.cls == cls and not item.klass.joins_previous for item in self.gpu)


@dataclass(eq=False)
class Trace:
    path: Path
    steps: list[Step]
    device: str | None  # the GPU's name, None for a CPU-only trace
    runtime_outside_steps: list[RuntimeCall]
    has_runtime: bool  # CUDA runtime calls were recorded (so the CUDA activity was on)
    meta: dict = field(default_factory=dict)  # deviceProperties, distributedInfo, versions
    skipped: Counter = field(default_factory=Counter)  # malformed events skipped, by reason

    @property
    def gpu_items(self) -> int:
        return sum(len(s.gpu) for s in self.steps)

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


def load(path: str | Path) -> Trace:
    path = Path(path)
    events = _Events()
    meta = _parse(path, events)
    return _build(path, events, meta)


# --- reading: the file's text, one JSON value at a time ------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_CHUNK = 1 << 22  # bytes read at a time: the text in memory stays around this size
_decode = json.JSONDecoder().raw_decode


class _Text:
    """The file's text in chunks, so that a large trace never sits in memory whole."""

    def __init__(self, stream, path: Path):
        self.stream = stream
        self.path = path
        # 'replace': one stray byte in a kernel name should not make the whole trace unreadable.
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")("replace")
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters dropped from the front of buf, for error positions
        self.eof = False

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            raw = self.stream.read(_CHUNK)
        except (OSError, EOFError, zlib.error):
            if isinstance(self.stream, gzip.GzipFile):
                raise TraceError(f"{self.path} is a damaged or truncated gzip file") from None
            raise TraceError(f"cannot read {self.path}") from None
        self.eof = not raw
        text = self.decoder.decode(raw, final=self.eof)
        self.base += self.pos
        self.buf = self.buf[self.pos :] + text
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-whitespace character ('' at the end); pos is left on it."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def value(self):
        """Decode the JSON value at pos, reading more text when it runs past the chunk."""
        self.peek()  # raw_decode does not skip leading whitespace
        while True:
            try:
                value, end = _decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                # An error at the chunk's end (or an unterminated string, which only the end
                # can cause) means the value goes on in the next chunk; elsewhere it is damage.
                at_end = err.pos >= len(self.buf) - 16 or err.msg.startswith("Unterminated")
                if at_end and self.more():
                    continue
                self.invalid(f"{err.msg} at character {self.base + err.pos}")
            except RecursionError:
                raise TraceError(
                    f"{self.path} nests JSON too deeply to be a profiler trace"
                ) from None
            if end < len(self.buf) or self.eof:  # a number cut by the chunk's end looks whole
                self.pos = end
                return value
            self.more()

    def expect(self, chars: str) -> str:
        found = self.peek()
        if found == "" or found not in chars:
            what = "the end of the file" if found == "" else repr(found)
            self.invalid(f"expected one of {' '.join(chars)} but found {what}")
        self.pos += 1
        return found

    def invalid(self, why: str):
        raise TraceError(f"{self.path} is not valid JSON (truncated?): {why}")


def _open(path: Path):
    try:
        info = os.stat(path)
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err.strerror or err}") from None
    # /dev/zero, a FIFO or a folder would be read forever or not at all.
    if not stat.S_ISREG(info.st_mode):
        raise TraceError(f"{path} is not a regular file")
    try:
        stream = open(path, "rb")  # closed by _parse
        magic = stream.read(2)
        stream.seek(0)
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err.strerror or err}") from None
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=stream, mode="rb"), stream
    return stream, stream


def _parse(path: Path, events: _Events) -> dict:
    """Walk the top-level JSON (an object with traceEvents, or a bare array of events),
    handing each event to `events` and keeping the metadata in META_KEYS."""
    stream, raw = _open(path)
    meta: dict = {}
    with raw, stream:
        text = _Text(stream, path)
        first = text.peek()
        if first == "":
            raise TraceError(f"{path} is empty")
        found = False
        if first == "[":  # the bare-array form of the Chrome trace format
            text.pos += 1
            _event_list(text, events)
            found = True
        elif first == "{":
            text.pos += 1
            if text.peek() == "}":
                text.pos += 1
            else:
                while True:
                    if text.peek() != '"':
                        text.expect('"')
                    key = text.value()
                    text.expect(":")
                    if key == "traceEvents" and text.peek() == "[":
                        text.pos += 1
                        _event_list(text, events)
                        found = True
                    elif key in META_KEYS:
                        meta[key] = text.value()
                    else:
                        text.value()  # parsed to find its end, then dropped
                    if text.expect(",}") == "}":
                        break
        elif first in '"-0123456789tfn':
            text.value()
        else:
            text.invalid(f"starts with {first!r}")
        if text.peek() != "":
            text.invalid("more data after the trace")
    if not found or (events.seen and events.seen == events.skipped["not an object"]):
        raise TraceError(f"{path} is JSON but not a profiler trace (no traceEvents list)")
    return meta


def _event_list(text: _Text, events: _Events) -> None:
    take = events.take
    if text.peek() == "]":
        text.pos += 1
        return
    while True:
        take(text.value())
        if text.expect(",]") == "]":
            return


# --- keeping the events the reader uses, compactly -----------------------------------------


def _number(value) -> float | None:
    """A finite float from a JSON number, or None (strings, bools, NaN, Infinity)."""
    kind = type(value)
    if kind is float:
        return value if -MAX_ABS_TS < value < MAX_ABS_TS else None  # False for NaN too
    if kind is int:
        return float(value) if -MAX_ABS_TS < value < MAX_ABS_TS else None
    return None


def _small(value):
    """An args value kept as is when it is a sane scalar or a list of ints, else None."""
    kind = type(value)
    if kind is int or kind is str:
        return value
    if kind is float:
        return value if value == value and abs(value) < MAX_ABS_TS else None
    if kind is list and len(value) <= 8 and all(type(v) is int for v in value):
        return tuple(value)
    return None


class _Events:
    """Collects the events this reader uses as compact objects; counts malformed ones."""

    def __init__(self):
        self.steps: list[tuple[float, float, str, object]] = []  # ts, dur, name, thread
        self.ops: dict[object, list[CpuOp]] = {}  # by thread
        self.calls: dict[object, list[RuntimeCall]] = {}  # by thread
        self.by_correlation: dict[int, RuntimeCall] = {}
        self.items: list[GpuItem] = []
        self.skipped: Counter = Counter()
        self.seen = 0
        self._names: dict[str, str] = {}
        self._args: dict[tuple, MappingProxyType] = {}
        self._shapes: dict[tuple, tuple] = {}
        self._classes: dict[str, KernelClass] = {}

    def name(self, raw: str) -> str:
        name = self._names.get(raw)
        if name is None:
            name = raw
            if not raw.isascii():
                # A lone surrogate from a JSON escape cannot be printed or written as UTF-8.
                name = raw.encode("utf-8", "replace").decode("utf-8")
            self._names[raw] = name
        return name

    def take(self, event) -> None:
        self.seen += 1
        if type(event) is not dict:
            self.skipped["not an object"] += 1
            return
        if event.get("ph") != "X":
            return
        cat = event.get("cat")
        if type(cat) is not str:
            return
        if cat in CPU_CATEGORIES:
            group = 0
        elif cat in RUNTIME_CATEGORIES:
            group = 1
        elif cat in GPU_CATEGORIES:
            group = 2
        else:
            return
        name = event.get("name")
        if type(name) is not str:
            self.skipped["no name" if name is None else "a name that is not a string"] += 1
            return
        ts, dur = _number(event.get("ts")), _number(event.get("dur"))
        if ts is None:
            self.skipped["no finite numeric ts"] += 1
            return
        if dur is None or not 0 <= dur < MAX_DUR:
            self.skipped["no finite, non-negative numeric dur"] += 1
            return
        args = event.get("args")
        if args is None:
            args = {}
        elif type(args) is not dict:
            self.skipped["args that are not an object"] += 1
            return
        name = self.name(name)
        if group == 2:
            self._gpu(name, GPU_CATEGORIES[cat], ts, dur, args)
            return
        pid, tid = event.get("pid"), event.get("tid")
        if type(pid) not in (int, str, type(None)) or type(tid) not in (int, str, type(None)):
            self.skipped["a pid or tid that is not a number or string"] += 1
            return
        thread = (pid, tid)
        if group == 1:
            call = RuntimeCall(name, ts, dur)
            self.calls.setdefault(thread, []).append(call)
            corr = args.get("correlation")
            if type(corr) is int:  # only a real id links: no None, bool or string keys
                self.by_correlation[corr] = call
        elif name.startswith("ProfilerStep#"):  # user_annotation; cpu_op in older torch
            self.steps.append((ts, dur, name, thread))
        else:
            self.ops.setdefault(thread, []).append(CpuOp(name, ts, dur, self._cpu_args(args)))

    def _cpu_args(self, args: dict):
        dims, types = args.get("Input Dims"), args.get("Input type")
        if dims is None and types is None:
            return _EMPTY
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

    def _dims(self, dims) -> tuple | None:
        """Input Dims as a tuple of shape tuples, interned: the same shapes repeat every step."""
        if type(dims) is not list:
            return None
        shapes = []
        for shape in dims:
            if type(shape) is not list or not all(type(d) is int for d in shape):
                return None
            shape = tuple(shape)
            shapes.append(self._shapes.setdefault(shape, shape))
        shapes = tuple(shapes)
        return self._shapes.setdefault(shapes, shapes)

    def _gpu(self, name: str, kind: str, ts: float, dur: float, args: dict) -> None:
        corr = args.get("correlation")
        if type(corr) is not int:
            return  # nothing links it to a launch: it cannot be placed in a step
        wanted = KERNEL_ARGS if kind == "kernel" else COPY_ARGS
        key = tuple((k, _small(args.get(k))) for k in wanted if k in args)
        kept = self._args.get(key)
        if kept is None:
            kept = self._args[key] = MappingProxyType({k: v for k, v in key if v is not None})
        klass = self._classes.get(name)
        if klass is None:
            klass = self._classes[name] = classify(name)
        self.items.append(GpuItem(name, kind, ts, dur, klass, kept, corr))


# --- building steps: sort once, bisect into steps, one stack sweep per thread --------------


def _device_name(meta: dict) -> str | None:
    props = meta.get("deviceProperties")
    if props and isinstance(props, list) and isinstance(props[0], dict):
        name = props[0].get("name")
        return name if isinstance(name, str) else None
    return None


def _build(path: Path, events: _Events, meta: dict) -> Trace:
    events.steps.sort(key=lambda s: s[0])
    steps = [Step(name, ts, dur, [], [], []) for ts, dur, name, _ in events.steps]
    starts = [s.ts for s in steps]
    ends = [s.ts + s.dur for s in steps]
    step_thread = [thread for *_, thread in events.steps]

    def step_of(ts: float) -> int:
        """The step whose span holds ts (its start and end included), or -1."""
        i = bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= ends[i] else -1

    has_runtime = any(events.calls.values())
    outside: list[RuntimeCall] = []
    for thread in events.ops.keys() | events.calls.keys():
        ops = events.ops.get(thread, [])
        ops.sort(key=lambda op: (op.ts, -op.dur))  # parents before the children they hold
        calls = events.calls.get(thread, [])
        calls.sort(key=lambda c: c.ts)
        _sweep(ops, calls, steps, step_of, step_thread, thread, outside)
    del events.ops, events.calls

    for item in events.items:
        call = events.by_correlation.get(item.correlation)
        if call is None or call.step is None:
            continue  # launched outside the recorded steps, or by no recorded call
        item.runtime = call.name
        item.launcher = call.launcher
        call.step.gpu.append(item)
    for step in steps:
        # Launch order: by the launching call's start; the file's order breaks ties.
        step.gpu.sort(key=lambda i: events.by_correlation[i.correlation].ts)
        step.runtime.sort(key=lambda c: c.ts)
        for item in step.gpu:
            op = item.launcher
            if op is not None:
                if op.launched is _NOTHING:
                    op.launched = []
                op.launched.append(item)
                op.below |= _KIND_BIT[item.kind]
        # Children come after their parent in start order: one backward pass fills `below`.
        for op in reversed(step.cpu_ops):
            if op.below and op.parent is not None:
                op.parent.below |= op.below
    outside.sort(key=lambda c: c.ts)
    return Trace(
        path=path,
        steps=steps,
        device=_device_name(meta),
        runtime_outside_steps=outside,
        has_runtime=has_runtime,
        meta=meta,
        skipped=events.skipped,
    )


def _sweep(ops, calls, steps, step_of, step_thread, thread, outside) -> None:
    """One pass over a thread's ops and runtime calls in time order: nest the ops of each step
    (a stack of open ops), and give each call the innermost op open when it was made."""
    stack: list[CpuOp] = []
    stack_end: list[float] = []  # clamped to the parent's end, so ends only shrink upward
    current = -2  # the step whose ops the stack holds
    i = j = 0
    while i < len(ops) or j < len(calls):
        # An op starting at the call's ts holds it, so ops go first on ties.
        if j >= len(calls) or (i < len(ops) and ops[i].ts <= calls[j].ts):
            op = ops[i]
            i += 1
            s = step_of(op.ts)
            if s != current:
                stack.clear()
                stack_end.clear()
                current = s
            if s < 0:
                continue  # outside every step: not needed
            while stack and op.ts >= stack_end[-1]:
                stack.pop()
                stack_end.pop()
            op.depth = len(stack)
            if stack:
                op.parent = stack[-1]
                stack_end.append(min(op.ts + op.dur, stack_end[-1]))
            else:
                stack_end.append(op.ts + op.dur)
            stack.append(op)
            if step_thread[s] == thread:
                step = steps[s]
                op.index = len(step.cpu_ops)
                step.cpu_ops.append(op)
        else:
            call = calls[j]
            j += 1
            s = step_of(call.ts)
            if s < 0:
                outside.append(call)
                continue
            call.step = steps[s]
            steps[s].runtime.append(call)
            if s == current:
                while stack and stack_end[-1] < call.ts:
                    stack.pop()
                    stack_end.pop()
                call.launcher = stack[-1] if stack else None


# --- questions about a step ----------------------------------------------------------------


def subtree(step: Step, op: CpuOp) -> list[CpuOp]:
    """`op` and everything nested under it, in start order."""
    start = op.index
    if not 0 <= start < len(step.cpu_ops) or step.cpu_ops[start] is not op:
        raise ValueError(f"{op.name} is not a CPU op of {step.name}")
    out = [op]
    for other in step.cpu_ops[start + 1 :]:
        if other.depth <= op.depth:
            break
        out.append(other)
    return out


def launched_below(op: CpuOp, kind: str | None = None) -> bool:
    """Whether `op` or anything under it launched GPU work (of `kind`, if given)."""
    return bool(op.below & (_KIND_BIT[kind] if kind else 7))


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
