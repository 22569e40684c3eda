"""The allocator's events of a trace recorded with `profile_memory=True`, compactly.

torch.profiler writes one instant event named `[memory]` per allocation and per free, with
args `Addr`, `Bytes` (negative: a free), `Total Allocated` and `Total Reserved` (the device's
totals just after it), `Device Type` (c10's code: 0 CPU, 1 CUDA, ...) and `Device Id`, on the
thread that made the call, and `Ev Idx`, the profiler's own order of its events. `load` keeps
them only when asked (`load(path, memory=True)`): as arrays, one entry per event, in time
order, so that a trace of millions of allocations stays a few bytes per event.

Each event is then linked to the CPU op open on its thread when it was made (the innermost,
as a runtime call is linked to its launcher), where one was recorded there; the analysis
(`analyses.memory`) decides what to name it.
"""

from __future__ import annotations

from array import array
from collections import Counter

from tracereader.trace.model import CpuOp

# c10::DeviceType codes, as torch writes them in `Device Type`
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia"}
MAX_ABS = 1 << 62  # bytes and addresses beyond this are damage (and would overflow the arrays)
MAX_DEVICES = 32  # one process drives a few: past it, damage (the arrays hold 2**16)
MAX_THREADS = 1 << 16  # the thread index array's bound
_NUMBER = (int, float)
_ID_TYPES = frozenset({int, str, type(None)})  # a pid or tid, as the loader takes them
_FIELDS = ("Bytes", "Total Allocated", "Addr", "Total Reserved", "Device Type", "Device Id")


def _malformed(values: tuple) -> str:
    """The first of _FIELDS whose value is no int within MAX_ABS."""
    for field, value in zip(_FIELDS, values, strict=True):
        if type(value) is not int or not -MAX_ABS < value < MAX_ABS:
            return field
    return "?"


class MemoryEvents:
    """The `[memory]` events, in time order (ties: the profiler's Ev Idx, else file order).
    Per event: `ts` (us), `bytes` (negative: a free), `allocated` and `reserved` (the device's
    totals after it), `addr`, `device` (an index into `devices`) and `op` (the innermost CPU op
    open on its thread then, or None). `malformed`: the events left out, by the field that
    made them unusable."""

    __slots__ = (
        "ts", "bytes", "allocated", "reserved", "addr", "device", "devices", "op", "malformed"
    )  # fmt: skip

    def __init__(self):
        self.ts = array("d")
        self.bytes = array("q")
        self.allocated = array("q")
        self.reserved = array("q")
        self.addr = array("q")
        self.device = array("H")
        self.devices: list[tuple[int, int]] = []  # (Device Type, Device Id)
        self.op: list[CpuOp | None] = []
        self.malformed: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.ts)

    def device_name(self, index: int) -> str:
        kind, number = self.devices[index]
        name = DEVICE_TYPES.get(kind, f"device type {kind}")
        return name if number < 0 else f"{name}:{number}"


class Collector:
    """What the loader hands `[memory]` events to, in file order, straight into arrays;
    `finish` puts them in time order and links them to their ops."""

    def __init__(self):
        self.events = MemoryEvents()
        self.order = array("q")  # Ev Idx, else the file's order
        self.thread = array("H")  # an index into threads
        self.threads: dict[object, int] = {}
        self.devices: dict[tuple[int, int], int] = {}
        self.bad: Counter[str] = Counter()  # malformed [memory] events, skipped, by field
        self.numbered = array("q")  # where `order` is the file's order (no usable Ev Idx)

    @property
    def skipped(self) -> int:
        return self.bad.total()

    def take(self, event: dict) -> None:
        args = event.get("args")
        ts = event.get("ts")
        if type(ts) not in _NUMBER or not -1e17 < ts < 1e17:  # False for NaN too
            self.bad["ts"] += 1
            return
        if type(args) is not dict:
            self.bad["args"] += 1
            return
        size, total = args.get("Bytes"), args.get("Total Allocated")
        addr, reserved = args.get("Addr"), args.get("Total Reserved", 0)
        kind, number = args.get("Device Type"), args.get("Device Id", -1)
        values = (size, total, addr, reserved, kind, number)
        for value in values:  # the common case kept to few calls: millions of events
            if type(value) is not int or not -MAX_ABS < value < MAX_ABS:
                self.bad[_malformed(values)] += 1
                return
        pid, tid = event.get("pid"), event.get("tid")
        if type(pid) not in _ID_TYPES or type(tid) not in _ID_TYPES:
            self.bad["pid/tid"] += 1
            return
        device = self.devices.get((kind, number))
        if device is None:
            if len(self.devices) >= MAX_DEVICES:
                self.bad[f"Device Type/Device Id (past {MAX_DEVICES} devices)"] += 1
                return
            device = self.devices[(kind, number)] = len(self.devices)
        t = self.threads.get((pid, tid))
        if t is None:
            if len(self.threads) >= MAX_THREADS:
                self.bad[f"pid/tid (past {MAX_THREADS} threads)"] += 1
                return
            t = self.threads[(pid, tid)] = len(self.threads)
        order = args.get("Ev Idx")
        out = self.events
        if type(order) is int and -MAX_ABS < order < MAX_ABS:
            self.order.append(order)
        else:  # numbered by its place among the events kept
            self.numbered.append(len(out.ts))
            self.order.append(len(out.ts))
        self.thread.append(t)
        out.ts.append(ts)
        out.bytes.append(size)
        out.allocated.append(total)
        out.reserved.append(reserved)
        out.addr.append(addr)
        out.device.append(device)

    def columns(self) -> tuple:
        """What a trace.fanout worker sends of its slab's events: arrays, and the keys of its
        device and thread indices."""
        e = self.events
        return (
            e.ts, e.bytes, e.allocated, e.reserved, e.addr, e.device, self.order, self.thread,
            self.numbered, list(self.devices), list(self.threads), dict(self.bad),
        )  # fmt: skip

    def merge(self, columns: tuple) -> bool:
        """A worker's `columns`, appended as if its events had been taken here. False, with
        nothing appended, where the devices or threads together pass their bounds: which
        events a bound leaves out is decided in file order, by a read in one process."""
        ts, size, total, reserved, addr, device, order, thread, numbered = columns[:9]
        devices, threads, bad = columns[9:]
        # a worker's own bound left events out only where the sum is past it too
        if len(self.devices.keys() | devices) > MAX_DEVICES:
            return False
        if len(self.threads.keys() | threads) > MAX_THREADS:
            return False
        device_of = array("H", (self.devices.setdefault(k, len(self.devices)) for k in devices))
        thread_of = array("H", (self.threads.setdefault(k, len(self.threads)) for k in threads))
        out, before = self.events, len(self.events.ts)
        out.ts.extend(ts)
        out.bytes.extend(size)
        out.allocated.extend(total)
        out.reserved.extend(reserved)
        out.addr.extend(addr)
        out.device.extend(array("H", map(device_of.__getitem__, device)))
        self.thread.extend(array("H", map(thread_of.__getitem__, thread)))
        self.order.extend(order)
        for k in numbered:
            self.order[before + k] += before
            self.numbered.append(before + k)
        self.bad.update(bad)
        return True

    def finish(self, ops_by_thread: dict) -> MemoryEvents:
        """The events in time order, each linked to its op; `ops_by_thread`: the loader's CPU
        ops per thread, sorted by the model (start, then the longer first)."""
        raw, order = self.events, self.order
        ts = raw.ts
        perm = sorted(range(len(ts)), key=lambda i: (ts[i], order[i]))
        out = MemoryEvents()
        out.devices = list(self.devices)
        out.malformed = self.bad
        for name in ("ts", "bytes", "allocated", "reserved", "addr", "device"):
            column = getattr(raw, name)
            setattr(out, name, array(column.typecode, [column[i] for i in perm]))
        out.op = [None] * len(perm)
        by_thread: list[list[int]] = [[] for _ in self.threads]
        thread = self.thread
        for k, i in enumerate(perm):
            by_thread[thread[i]].append(k)
        for key, t in self.threads.items():
            ops = ops_by_thread.get(key)
            if ops:
                _link(ops, by_thread[t], out)
        self.events = MemoryEvents()
        return out


def _link(ops: list[CpuOp], indices: list[int], out: MemoryEvents) -> None:
    """One sweep over a thread's ops (start order, parents first) and its memory events (time
    order): each event gets the innermost op open then, as model._sweep gives runtime calls."""
    stack: list[CpuOp] = []
    stack_end: list[float] = []  # clamped to the parent's end, so ends only shrink upward
    ts = out.ts
    i = 0
    for k in indices:
        t = ts[k]
        while i < len(ops) and ops[i].ts <= t:  # an op starting at the event holds it
            op = ops[i]
            i += 1
            while stack and op.ts >= stack_end[-1]:
                stack.pop()
                stack_end.pop()
            end = op.ts + op.dur
            stack_end.append(min(end, stack_end[-1]) if stack else end)
            stack.append(op)
        while stack and stack_end[-1] < t:
            stack.pop()
            stack_end.pop()
        out.op[k] = stack[-1] if stack else None
