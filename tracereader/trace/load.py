"""Read any exported profiler trace (.json or .json.gz) into the trace model (`model`).

What torch.profiler and kineto write, current and older: the categories of today
(`cpu_op`, `user_annotation`, `cuda_runtime`, `cuda_driver`, `kernel`, `gpu_memcpy`,
`gpu_memset`) and of the 2021 format (`Operator`, `Runtime`, `Kernel`, `Memcpy`, `Memset`),
MTIA's (`mtia_runtime`, `mtia_ccp_events`); an object with `traceEvents` or a bare array of
events. Of `python_function` (with_stack=True), only the nn.Module calls (`nn.Module: Linear_0`)
are kept. Other categories (flow arrows, stream-sync virtual events) are not read at all; the
allocator's `[memory]` instants (profile_memory=True) only with `load(path, memory=True)`, into
`Trace.memory` (trace.memory: compact arrays, each event linked to the op open on its thread).

Cost: linear in the file apart from a few sorts. The text is read in chunks and decoded a few
kilobytes of whole events at a time (`json.JSONDecoder.raw_decode`, C speed); only the events
this reader uses are kept, in compact objects with interned names and args, so a 200 MB trace never
becomes the ~2 GB of dicts that `json.loads` would build.

Malformed input, the policy:
- A file that is not a usable trace is refused with a TraceError (one line): not a regular
  file, unreadable, empty, damaged gzip, not JSON (truncated, nested too deeply), or JSON with
  no list of event objects. A trace without ProfilerStep is read as one window.
- One malformed event among good ones is skipped and counted in `Trace.skipped` (a reason ->
  count; findings turns it into a health problem): an event of a category the reader uses
  whose name is not a string, whose ts/dur are not finite numbers in a sane range, whose args
  are not an object, or an array entry that is not an object. An optional args field of the
  wrong type (a correlation id that is not an integer, dims that are not lists of integers) is
  dropped, the event kept.
"""

from __future__ import annotations

import codecs
import gc
import gzip
import json
import os
import re
import stat
import zlib
from collections import Counter
from pathlib import Path
from types import MappingProxyType

from tracereader.names import footprint
from tracereader.names.kernel_classes import KernelClass
from tracereader.names.kernel_names import GEMV_REDUCTION, classify, gemv_by_grid

# The model, re-exported: `load.Trace` and friends are what callers of load() handle.
from tracereader.trace.model import (  # noqa: F401
    DTYPES,
    EMPTY,
    CpuOp,
    GpuItem,
    Module,
    RuntimeCall,
    Step,
    Trace,
    ancestors,
    build,
    input_dtype,
    launched_below,
    silent_ops,
    subtree,
)

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
# Top-level keys kept in Trace.meta: small, and what multi-rank work will need.
META_KEYS = frozenset(
    {"deviceProperties", "distributedInfo", "schemaVersion", "cuda_runtime_version",
     "cuda_driver_version", "cupti_version", "baseTimeNanoseconds", "displayTimeUnit",
     "record_shapes", "trace_id", "traceName",
     "torch_version"}  # added by the lessons when they publish a trace (torch does not)
)  # fmt: skip
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


BAD_MEMORY = "[memory] events without numeric args"  # Trace.skipped's reason for them


class TraceError(Exception):
    """The file is not a readable profiler trace."""


def load(path: str | Path, memory: bool = False) -> Trace:
    """The trace model of a file; `memory`: also the allocator's events, in `Trace.memory`
    (None without it), read in the same pass."""
    path = Path(path)
    events = _Events()
    if memory:
        from tracereader.trace.memory import Collector  # only for explain --memory

        events.memory = Collector()
    # Every object made here lives as long as the trace: the cyclic collector would only
    # rescan them, over and over as they accumulate (a third of the time on large traces).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(path, events)
    finally:
        if collecting:
            gc.enable()


def _load(path: Path, events: _Events) -> Trace:
    meta = _parse(path, events)
    threads = dict(events.ops) if events.memory is not None else None  # build empties ops
    trace = build(
        path,
        events.steps,
        events.ops,
        events.calls,
        events.by_correlation,
        events.items,
        meta,
        events.skipped,
        events.modules,
    )
    trace.annotations = frozenset(events.annotations)
    trace.memory = None  # the allocator's events (trace.memory.MemoryEvents) where asked
    if events.memory is not None:
        if events.memory.skipped:
            trace.skipped[BAD_MEMORY] += events.memory.skipped
        trace.memory = events.memory.finish(threads)
    return trace


# --- reading: the file's text, one JSON value at a time ------------------------------------

_WS = re.compile(r"[ \t\n\r]*")
_CHUNK = 1 << 20  # bytes read at a time: the text, and the events parsed from it, stay small
_decode = json.JSONDecoder().raw_decode


def _bounded_int(text: str) -> int | None:
    """A JSON integer, None where it has more digits than Python converts (4,300 by default):
    no profiler writes such a number, so the event holding it is malformed, not the file."""
    try:
        return int(text)
    except ValueError:
        return None


# Only where the fast decoder met such a number: its hook costs a Python call per integer.
_decode_bounded = json.JSONDecoder(parse_int=_bounded_int).raw_decode
_BATCH = 1 << 14  # characters of events decoded at once (larger scatters the model in memory)
_BETWEEN = re.compile(r"[ \t\n\r]*,[ \t\n\r]*\{")  # what separates two events


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
        self.skip_to = 0  # batch: decode one event at a time below this position

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
        self.skip_to -= self.pos
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
                try:
                    value, end = _decode(self.buf, self.pos)
                except json.JSONDecodeError:
                    raise
                except ValueError:  # an integer past Python's digit limit
                    value, end = _decode_bounded(self.buf, self.pos)
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

    def batch(self) -> list | None:
        """The whole events from pos up to the last event boundary within _BATCH characters,
        decoded by one C call (per-event decoding costs Python calls per event); None when no
        boundary is found or the text there does not parse as a batch (a "}, {" inside a
        string), and then `value` takes over up to that point. A cut that parses is exact:
        the decoder's state after a prefix of the event list is the same as in the whole."""
        if self.pos < self.skip_to:
            return None
        if len(self.buf) - self.pos < _BATCH and self.more():
            self.peek()
        buf, pos = self.buf, self.pos
        limit = min(len(buf), pos + _BATCH)
        cut = buf.rfind("}", pos, limit)
        for _ in range(64):  # the last '}' followed by ',' and '{' (minified or indented)
            if cut < 0:
                return None
            if _BETWEEN.match(buf, cut + 1):
                break
            cut = buf.rfind("}", pos, cut)
        else:
            return None
        text = f"[{buf[pos : cut + 1]}]"
        try:
            events, end = _decode(text)
        except (ValueError, RecursionError):  # JSONDecodeError, or an integer too long
            events, end = None, 0
        if end != len(text):
            self.skip_to = cut + 1  # per event past the bad cut, then try again
            return None
        self.pos = cut + 1
        return events

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
        batch = text.batch()
        if batch:
            for event in batch:
                take(event)
        else:
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


class _Events:
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
        # Called once per event of the file: the common case is kept to few Python calls.
        self.seen += 1
        if type(event) is not dict:
            self.skipped["not an object"] += 1
            return
        if event.get("ph") != "X":
            if self.memory is not None and event.get("name") == "[memory]":
                self.memory.take(event)
            return
        cat = event.get("cat")
        group = _GROUP.get(cat) if type(cat) is str else None
        if group is None:
            return
        name = event.get("name")
        if group == 3 and (type(name) is not str or not name.startswith(MODULE_PREFIX)):
            return  # with_stack's other Python frames: many, and not read
        if type(name) is not str:
            self.skipped["no name" if name is None else "a name that is not a string"] += 1
            return
        ts = event.get("ts")
        if type(ts) is not float or not -MAX_ABS_TS < ts < MAX_ABS_TS:
            ts = _number(ts)
            if ts is None:
                self.skipped["no finite numeric ts"] += 1
                return
        dur = event.get("dur")
        if type(dur) is not float or not 0 <= dur < MAX_DUR:
            dur = _number(dur)
            if dur is None or not 0 <= dur < MAX_DUR:
                self.skipped["no finite, non-negative numeric dur"] += 1
                return
        args = event.get("args")
        if args is None:
            args = {}
        elif type(args) is not dict:
            self.skipped["args that are not an object"] += 1
            return
        found = self._names.get(name)
        name = self.name(name) if found is None else found
        if group == 2:
            self._gpu(name, GPU_CATEGORIES[cat], ts, dur, args)
            return
        pid, tid = event.get("pid"), event.get("tid")
        if type(pid) not in _ID_TYPES or type(tid) not in _ID_TYPES:
            self.skipped["a pid or tid that is not a number or string"] += 1
            return
        thread = (pid, tid)
        if group == 1:
            call = RuntimeCall(name, ts, dur)
            calls = self.calls.get(thread)
            if calls is None:
                calls = self.calls[thread] = []
            calls.append(call)
            corr = args.get("correlation")
            if type(corr) is int:  # only a real id links: no None, bool or string keys
                self.by_correlation[corr] = call
        elif group == 3:
            modules = self.modules.get(thread)
            if modules is None:
                modules = self.modules[thread] = []
            modules.append(Module(self.name(name[len(MODULE_PREFIX) :]), ts, dur))
        elif name.startswith("ProfilerStep#"):  # user_annotation; cpu_op in older torch
            self.steps.append((ts, dur, name, thread))
        else:
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
        klass = self._classes.get(name)
        if klass is None:
            klass = self._classes[name] = classify(name)
        if klass.detail == GEMV_REDUCTION:  # a GEMV, or a norm reading one: the grid tells
            klass = gemv_by_grid(klass, footprint.blocks(kept))
        self.items.append(GpuItem(name, kind, ts, dur, klass, kept, corr))
