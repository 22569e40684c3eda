"""A large trace's events decoded and kept on every core: trace.load reads the text and cuts
it into slabs of whole events; forked workers decode each slab (the stdlib's decoder, the
largest cost of reading) and keep its events (`Events.take`, the next largest); the loading
process absorbs their results in the file's order, so the model is the one a single process
builds (the tests compare them event by event). One liberty: args equal as numbers but not as
types (a stream 7 here, 7.0 there) share one form, and which one may differ.

Only where it is safe and pays: Linux (fork), a process with one thread (a lesson has torch's
threads: it reads in one process), at least LEAST_CORES cores, and a trace not read to its
end within its first AFTER characters. A slab the workers cannot read (a boundary cut inside a
string or past the event list's end, damage, a worker gone) raises Refused: the workers are
stopped and the loading process reads on from that slab's start (the text since the oldest
slab in flight is kept for that), as it would have alone, naming any damage.
Ctrl-C reaches the loading process only (workers ignore it); when it ends for any reason, the
workers see their pipe close and exit, and are reaped."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections import deque

from tracereader.trace.events import Events, decode
from tracereader.trace.memory import Collector
from tracereader.trace.model import EMPTY, CpuOp, GpuItem, Module, RuntimeCall

SLAB = 1 << 18  # characters a worker decodes at a time (its dicts: ten times as many bytes)
AFTER = 1 << 21  # characters read in one process first: a smaller trace never forks
# Each worker costs 6-8 MB of its own (the pages its objects land on, copied from the parent's
# heap); past four the loading process (it absorbs every result) is the limit, and 1 MB slabs
# cost a third more memory for no speed (H200 host, docs/reader_vs_hta.md).
MAX_WORKERS = 4
LEAST_CORES = 4  # with two, the loading process's own share leaves too little to gain
ENV = "TRACEREADER_WORKERS"  # a number of workers; 0 reads in one process


class Refused(Exception):
    """The workers could not read a slab (a cut inside a string, damage, a worker gone):
    `start`, where it begins in the file's text, is where reading goes on in one process."""

    def __init__(self, start: int, why: str):
        super().__init__(why)
        self.start = start


def workers() -> int:
    """How many workers to fork: 0 where it is unsafe or would not pay."""
    if not hasattr(os, "fork"):
        return 0
    wanted = os.environ.get(ENV, "")
    if wanted.isdecimal():
        return min(int(wanted), MAX_WORKERS)
    if sys.platform != "linux" or _threads() > 1:
        return 0  # fork copies one thread only: another's locks would stay held in the child
    cores = len(os.sched_getaffinity(0))
    return min(cores, MAX_WORKERS) if cores >= LEAST_CORES else 0


def _threads() -> int:
    """The process's threads, native ones too (torch's intra-op pool, kineto's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def start(events: Events) -> Workers | None:
    """Workers for `events`, or None (none wanted, or they could not be started)."""
    n = workers()
    if not n:
        return None
    pool = Workers(events)
    try:
        pool.fork(n)
    except OSError:  # no more processes or descriptors: read in one process
        pool.close()
        return None
    return pool


_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


class Workers:
    """Forked workers, one slab in flight each, results absorbed in the order sent."""

    def __init__(self, events: Events):
        self.events = events
        self.pids: list[int] = []
        self.to: list = []  # the pipe a worker reads its slabs from
        self.back: list = []  # the pipe it writes its results to
        self.starts: deque[int] = deque()  # where each slab in flight begins, oldest first
        self.sent = self.done = 0

    def fork(self, n: int) -> None:
        for _ in range(n):
            slab_r, slab_w = os.pipe()
            result_r, result_w = os.pipe()
            # A signal between fork and the worker's own handlers would run the CLI's.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
            try:
                pid = os.fork()
                if pid == 0:  # never returns
                    ends = [slab_w, result_r, *self._fds()]  # the loading process's ends
                    _worker(slab_r, result_w, self.events.memory is not None, ends, mask)
            except OSError:
                for fd in (slab_r, slab_w, result_r, result_w):
                    os.close(fd)
                raise
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(slab_r)
            os.close(result_w)
            self.pids.append(pid)
            self.to.append(os.fdopen(slab_w, "wb"))
            self.back.append(os.fdopen(result_r, "rb"))

    def _fds(self) -> list[int]:
        return [f.fileno() for f in self.to + self.back]

    @property
    def oldest(self) -> int | None:
        """Where the oldest slab in flight begins: the text from there must stay readable."""
        return self.starts[0] if self.starts else None

    def send(self, text: str, start: int) -> None:
        if self.sent - self.done == len(self.pids):
            self._absorb_oldest()  # frees the worker this slab goes to
        self.starts.append(start)
        data = text.encode()
        out = self.to[self.sent % len(self.pids)]
        try:
            out.write(len(data).to_bytes(8, "little") + data)
            out.flush()
        except OSError:  # the worker is gone
            raise Refused(self.starts[0], "a worker ended") from None
        self.sent += 1

    def drain(self) -> None:
        while self.done < self.sent:
            self._absorb_oldest()

    def _absorb_oldest(self) -> None:
        back = self.back[self.done % len(self.pids)]
        try:
            head = back.read(8)
            size = int.from_bytes(head, "little") if len(head) == 8 else -1
            data = back.read(size) if size > 0 else b""
            part = pickle.loads(data) if len(data) == size else None
        except (OSError, EOFError, pickle.UnpicklingError):
            part = None
        if part is None or not absorb(self.events, part):
            raise Refused(self.starts[0], "a slab the workers could not read")
        self.done += 1
        self.starts.popleft()

    def close(self) -> None:
        for pid in self.pids:  # one may be mid-slab: its result is not wanted
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        for f in self.to + self.back:
            with contextlib.suppress(OSError):
                f.close()
        self.pids, self.to, self.back = [], [], []


def _worker(slab_r: int, result_w: int, memory: bool, inherited: list[int], mask) -> None:
    """A worker's life: slabs in, each one's events out, until the pipe closes."""
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loading process's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in inherited:  # held here, they would keep this pipe open past the parent's end
            os.close(fd)
        inp, out = os.fdopen(slab_r, "rb"), os.fdopen(result_w, "wb")
        cache = Events()
        while True:
            head = inp.read(8)
            if len(head) < 8:
                break
            text = inp.read(int.from_bytes(head, "little")).decode()
            data = pickle.dumps(_read(text, memory, cache), pickle.HIGHEST_PROTOCOL)
            out.write(len(data).to_bytes(8, "little") + data)
            out.flush()
    except BaseException:
        code = 1
    finally:
        os._exit(code)  # nothing of the parent's (atexit, buffers) runs twice


def _read(text: str, memory: bool, cache: Events) -> tuple | None:
    try:
        decoded, end = decode(f"[{text}]")
    except (ValueError, RecursionError):  # damage, an integer too long, or a bad cut
        return None
    if end != len(text) + 2:
        return None
    events = cache.fresh()
    if memory:
        events.memory = Collector()
    events.take(decoded)
    return export(events)


def export(ev: Events) -> tuple:
    """A worker's events as columns of plain values: cheap to pickle, and rebuilt as the
    model's objects by `absorb`; args as indices into a table of their items (-1: none)."""
    table: dict[int, int] = {id(EMPTY): -1}
    rows: list[tuple] = []

    def ref(args) -> int:
        found = table.get(id(args))
        if found is None:
            found = table[id(args)] = len(rows)
            rows.append(tuple(args.items()))
        return found

    ops = {
        t: ([o.name for o in v], [o.ts for o in v], [o.dur for o in v], [ref(o.args) for o in v])
        for t, v in ev.ops.items()
    }
    calls = {
        t: ([c.name for c in v], [c.ts for c in v], [c.dur for c in v]) for t, v in ev.calls.items()
    }
    where = {id(c): (t, i) for t, v in ev.calls.items() for i, c in enumerate(v)}
    linked = [(corr, *where[id(c)]) for corr, c in ev.by_correlation.items()]
    items = [(g.name, g.kind, g.ts, g.dur, ref(g.args), g.correlation) for g in ev.items]
    modules = {t: [(m.name, m.ts, m.dur) for m in v] for t, v in ev.modules.items()}
    memory = ev.memory.columns() if ev.memory is not None else None
    return (
        ev.seen, dict(ev.skipped), ev.steps, list(ev.annotations), rows,
        ops, calls, linked, items, modules, memory,
    )  # fmt: skip


def absorb(ev: Events, part: tuple) -> bool:
    """A worker's `export`, appended to `ev` as if its events had been taken here; False, with
    nothing appended, where only a read in file order can number them (memory's bounds)."""
    seen, skipped, steps, annotations, rows, ops, calls, linked, items, modules, memory = part
    if memory is not None and not ev.memory.merge(memory):
        return False
    ev.seen += seen
    ev.skipped.update(skipped)
    ev.steps += steps
    ev.annotations.update(annotations)
    args = [ev.kept(row) for row in rows]
    args.append(EMPTY)  # index -1
    intern = ev._names.setdefault
    for thread, (n, ts, dur, refs) in ops.items():
        ev.ops.setdefault(thread, []).extend(
            map(CpuOp, map(intern, n, n), ts, dur, map(args.__getitem__, refs))
        )
    start: dict = {}
    for thread, (n, ts, dur) in calls.items():
        out = ev.calls.setdefault(thread, [])
        start[thread] = len(out)
        out.extend(map(RuntimeCall, map(intern, n, n), ts, dur))
    for corr, thread, i in linked:
        ev.by_correlation[corr] = ev.calls[thread][start[thread] + i]
    for name, kind, ts, dur, r, corr in items:
        kept = args[r]
        name = intern(name, name)
        ev.items.append(GpuItem(name, kind, ts, dur, ev.klass(name, kept), kept, corr))
    for thread, rows_ in modules.items():
        ev.modules.setdefault(thread, []).extend(Module(intern(n, n), ts, d) for n, ts, d in rows_)
    return True
