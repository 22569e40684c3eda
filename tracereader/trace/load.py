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
from pathlib import Path

from tracereader.trace import fanout
from tracereader.trace.events import Events, decode
from tracereader.trace.memory import Collector

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

# Top-level keys kept in Trace.meta: small, and what multi-rank work will need.
META_KEYS = frozenset(
    {"deviceProperties", "distributedInfo", "schemaVersion", "cuda_runtime_version",
     "cuda_driver_version", "cupti_version", "baseTimeNanoseconds", "displayTimeUnit",
     "record_shapes", "trace_id", "traceName",
     "torch_version"}  # added by the lessons when they publish a trace (torch does not)
)  # fmt: skip
BAD_MEMORY = "[memory] events without numeric args"  # Trace.skipped's reason for them


class TraceError(Exception):
    """The file is not a readable profiler trace."""


def load(path: str | Path, memory: bool = False) -> Trace:
    """The trace model of a file; `memory`: also the allocator's events, in `Trace.memory`
    (None without it), read in the same pass."""
    path = Path(path)
    # Every object made here lives as long as the trace: the cyclic collector would only
    # rescan them, over and over as they accumulate (a third of the time on large traces).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _load(path, memory)
    finally:
        if collecting:
            gc.enable()


def _load(path: Path, memory: bool) -> Trace:
    events = Events()
    if memory:
        events.memory = Collector()
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
        self.keep: int | None = None  # kept from here on (base + pos), to read again

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
        drop = self.pos if self.keep is None else min(self.pos, self.keep - self.base)
        self.base += drop
        self.skip_to -= drop
        self.buf = self.buf[drop:] + text
        self.pos -= drop
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
                    value, end = decode(self.buf, self.pos)
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
        end = self._cut(_BATCH)
        if end < 0:
            return None
        text = f"[{self.buf[self.pos : end]}]"
        try:
            events, stop = decode(text)
        except (ValueError, RecursionError):  # JSONDecodeError, or an integer too long
            events, stop = None, 0
        if stop != len(text):
            self.skip_to = end  # per event past the bad cut, then try again
            return None
        self.pos = end
        return events

    def slab(self, size: int) -> tuple[str, int] | None:
        """As `batch`, but the text of up to `size` characters of whole events, undecoded (for
        trace.fanout's workers), and where it starts in the file's text; or None."""
        end = self._cut(size)
        if end < 0:
            return None
        text, start, self.pos = self.buf[self.pos : end], self.base + self.pos, end
        return text, start

    def _cut(self, size: int) -> int:
        """The position after the last '}' followed by ',' and '{' within `size` characters
        of pos (minified or indented), or -1."""
        if self.pos < self.skip_to:
            return -1
        while len(self.buf) - self.pos < size and self.more():
            pass
        self.peek()
        buf, pos = self.buf, self.pos
        cut = buf.rfind("}", pos, min(len(buf), pos + size))
        for _ in range(64):
            if cut < 0:
                return -1
            if _BETWEEN.match(buf, cut + 1):
                return cut + 1
            cut = buf.rfind("}", pos, cut)
        return -1

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


def _parse(path: Path, events: Events) -> dict:
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


def _event_list(text: _Text, events: Events) -> None:
    take = events.take
    if text.peek() == "]":
        text.pos += 1
        return
    workers, tried = None, False  # a large trace's events are decoded and kept on all cores
    try:
        while True:
            if not tried and text.base + text.pos > fanout.AFTER and not text.eof:
                tried, workers = True, fanout.start(events)
            try:
                slab = text.slab(fanout.SLAB) if workers else None
                if slab is not None:
                    workers.send(*slab)
                elif workers:
                    workers.drain()  # what was sent comes first
                if slab is None:
                    take(text.batch() or [text.value()])
                text.keep = workers.oldest if workers else None
                if text.expect(",]") == "]":
                    if workers:
                        workers.drain()
                    return
            except fanout.Refused as refused:  # read on here, from the slab refused
                workers.close()
                workers = None
                text.pos, text.keep = refused.start - text.base, None
    finally:
        if workers:
            workers.close()
