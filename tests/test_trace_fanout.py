"""A large trace read on several cores (trace.fanout) is the trace read in one process, event by
event: every step's ops with their nesting and args, every GPU item with its class, launcher and
args, the skipped counts in their order, the allocator's events linked to their ops. Forced
here on small traces (workers from the first event, slabs of a few KB, so dozens of slabs);
where a slab cannot be read (a cut inside a string or past the list's end, damage, a worker
gone) the loading process reads on from there alone, naming damage as it always did; no worker
outlives the read."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import EXTERNAL_TRACES
from tracereader.trace import fanout
from tracereader.trace.load import TraceError, load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TRACES = [
    "labelled/memory_list.json.gz",  # the allocator's events, growing
    "labelled/loader_main_thread.json.gz",
    "labelled/optimizer_forloop.json.gz",
    "labelled/ranks/compute_straggler/compute_straggler_rank0.json.gz",  # CPU only, gloo
    "h200/models/llama_train_wrapped_l8_h2048_b4_s1024_bf16.json.gz",  # annotations, modules
    "h100/03_simple_mlp/b64_s128_d768_h3072_bf16_compile.json.gz",
]


def model(trace) -> list:
    """Everything the reader reads from a trace, as plain values."""

    def op(o):
        return None if o is None else (o.name, o.ts, o.dur)

    def gpu(g):
        return (g.name, g.kind, g.ts, g.dur, g.runtime, g.klass, dict(g.args), g.correlation,
                op(g.launcher), op(g.call))  # fmt: skip

    out: list = [trace.device, trace.unit, trace.has_runtime, trace.meta]
    out += [list(trace.skipped.items()), sorted(trace.annotations)]
    out += [[gpu(g) for g in trace.gpu_all], [op(c) for c in trace.runtime_outside_steps]]
    out += [(m.name, m.ts, m.dur, m.depth, op(m.parent)) for m in trace.modules]
    out.append(sorted((op(c), op(m)) for c, m in trace.module_of_call.items()))
    for s in trace.steps:
        out.append((s.name, s.ts, s.dur, [gpu(g) for g in s.gpu]))
        out += [(*op(c), op(c.launcher)) for c in s.runtime]
        out += [
            (*op(o), o.depth, dict(o.args), o.index, o.below, o.inner, op(o.parent),
             [gpu(g) for g in o.launched])
            for o in s.cpu_ops + s.other_ops
        ]  # fmt: skip
    memory = trace.memory
    if memory is not None:
        out.append((list(memory.ts), list(memory.bytes), list(memory.addr), memory.devices))
        out.append((list(memory.device), list(memory.allocated), list(memory.malformed.items())))
        out.append([op(o) for o in memory.op])
    return out


@pytest.fixture
def forced(monkeypatch):
    """Workers from the first event, slabs of 4 KB; `one` reads in one process."""
    monkeypatch.setattr(fanout, "AFTER", 0)
    monkeypatch.setattr(fanout, "SLAB", 4096)
    forks = []
    start = fanout.start
    monkeypatch.setattr(fanout, "start", lambda events: forks.append(1) or start(events))

    def read(path, workers: int):
        monkeypatch.setenv(fanout.ENV, str(workers))
        forks.clear()
        return load(path, memory=True), bool(forks)

    return read


def no_children_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: Linux and macOS only")
@pytest.mark.parametrize("name", TRACES)
def test_a_trace_read_on_several_cores_is_the_trace_read_in_one(name, forced):
    alone, _ = forced(os.path.join(FIXTURES, name), 0)
    fanned, forked = forced(os.path.join(FIXTURES, name), 3)
    assert forked and model(fanned) == model(alone)
    assert no_children_left()


@pytest.mark.slow  # another project's traces, 2-3 MB each
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
@pytest.mark.parametrize("name", ["hta/df_index_resolver.json.gz", "hta/mtia_rank_0.json.gz"])
def test_outside_traces_too(name, forced, monkeypatch):
    monkeypatch.setattr(fanout, "SLAB", 1 << 16)
    alone, _ = forced(EXTERNAL_TRACES / name, 0)
    fanned, forked = forced(EXTERNAL_TRACES / name, 2)
    assert forked and model(fanned) == model(alone)


def _trace(tmp_path, events: list, text=None) -> str:
    path = tmp_path / "t.json.gz"
    body = text if text is not None else json.dumps({"traceEvents": events}, indent=1)
    with gzip.open(path, "wt") as f:
        f.write(body)
    return str(path)


def _ops(n: int, name=lambda i: f"aten::op{i % 7}") -> list:
    return [
        {"ph": "X", "cat": "cpu_op", "name": name(i), "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
        for i in range(n)
    ]


@pytest.fixture
def refusals(monkeypatch) -> list:
    """Each slab the workers refused, counted where the loading process raises it."""
    seen: list = []

    class Counted(fanout.Refused):
        def __init__(self, start, why):
            seen.append(why)
            super().__init__(start, why)

    monkeypatch.setattr(fanout, "Refused", Counted)
    return seen


def test_a_slab_cut_inside_a_string_is_read_on_in_one_process(tmp_path, forced, refusals):
    """Names holding `}, {` put a slab's boundary inside a string: the workers refuse it, and
    the loading process reads on from that slab's start as it would alone."""
    trick = _ops(3000, name=lambda i: f"aten::x{'}, {' * 300 if i % 50 == 0 else ''}{i % 3}")
    path = _trace(tmp_path, trick)
    alone, _ = forced(path, 0)
    fanned, forked = forced(path, 2)
    assert forked and refusals
    assert model(fanned) == model(alone)
    assert sum(len(s.cpu_ops) for s in fanned.steps) == 3000
    assert no_children_left()


def test_a_slab_past_the_event_lists_end_is_read_on_in_one_process(tmp_path, forced, refusals):
    """Keys after traceEvents (a tool's rewrite puts deviceProperties last): the last slab's
    cut falls between two objects of that list, it is refused, and nothing is lost."""
    text = json.dumps({"traceEvents": _ops(2000), "deviceProperties": [{"id": 0}, {"id": 1}]})
    path = _trace(tmp_path, [], text=text)
    alone, _ = forced(path, 0)
    fanned, forked = forced(path, 2)
    assert forked and refusals and model(fanned) == model(alone)
    assert fanned.meta["deviceProperties"] == [{"id": 0}, {"id": 1}]


@pytest.mark.parametrize("how", ["a worker dies", "fork fails"])
def test_workers_that_die_or_never_start_leave_the_read_whole(how, tmp_path, forced, monkeypatch):
    """A worker killed (the kernel's OOM killer) or a fork refused (a process limit): the
    read goes on in one process, the same model, no process or pipe left behind."""
    path = _trace(tmp_path, _ops(3000))
    alone, _ = forced(path, 0)
    if how == "a worker dies":
        read = fanout._read
        handled = []  # in each worker, its slabs so far

        def dies(text, memory, cache):
            handled.append(1)
            if len(handled) == 3:
                os._exit(9)
            return read(text, memory, cache)

        monkeypatch.setattr(fanout, "_read", dies)
    else:
        forks = iter([os.fork])

        def fork():
            return next(forks, _refused)()

        def _refused():
            raise BlockingIOError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(fanout.os, "fork", fork)
    descriptors = len(os.listdir("/proc/self/fd"))
    fanned, forked = forced(path, 3)
    assert forked and model(fanned) == model(alone)
    assert no_children_left() and len(os.listdir("/proc/self/fd")) == descriptors


@pytest.mark.parametrize("devices", [3, 40])  # 40: past the bound, which file order decides
def test_allocator_events_are_numbered_and_bounded_as_in_one_process(devices, tmp_path, forced):
    """Memory events spread over the slabs, some without Ev Idx (numbered by their place in the
    file), some malformed, on several threads and devices, each linked to the op open then."""
    events = _ops(2000)
    for i in range(3000):
        args = {
            "Addr": 4096 * (i % 50),
            "Bytes": 512 if i % 2 else -512,
            "Total Allocated": i,
            "Total Reserved": 1 << 20,
            "Device Type": 1,
            "Device Id": i % devices,
        }
        if i % 3:
            args["Ev Idx"] = 10_000 - i
        if i % 97 == 0:
            args["Bytes"] = "512"  # malformed: counted, left out
        events.append(
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 1,
                "tid": 1 + i % 3,
                "ts": 6.6 * (i // 4),
                "args": args,
            }
        )  # ties: the order decides
    events.sort(key=lambda e: e["ts"])
    path = _trace(tmp_path, events)
    alone, _ = forced(path, 0)
    fanned, forked = forced(path, 2)
    assert forked and model(fanned) == model(alone)
    assert alone.memory.malformed and len(alone.memory.devices) == min(devices, 32)


def test_damage_past_the_first_slabs_is_named_as_in_one_process(tmp_path, forced):
    text = json.dumps({"traceEvents": _ops(3000)}, indent=1)
    cut = text.index('"ts": 20000')
    damaged = _trace(tmp_path, [], text=text[:cut] + '"ts": 2x0000' + text[cut + 11 :])
    messages = []
    for workers in (0, 2):
        with pytest.raises(TraceError) as err:
            forced(damaged, workers)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "not valid JSON" in messages[0]
    assert no_children_left()


THREADS = """
import os, sys, threading
from tracereader.trace import fanout
os.sched_getaffinity = lambda pid: set(range(16))  # as on a machine of 16 cores
print(fanout.workers())
stop = threading.Event()
other = threading.Thread(target=stop.wait)
other.start()
print(fanout.workers())
stop.set()
other.join()
import torch  # its intra-op pool: native threads, which Python's threading does not list
torch.ones(512, 512) @ torch.ones(512, 512)
print(fanout.workers(), threading.active_count())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the workers fork on Linux only")
def test_a_process_with_threads_reads_in_one():
    """A lesson reads its trace back with torch's threads running: fork would copy one thread
    and leave the others' locks held, so it never forks there, Python's threads or native."""
    env = {k: v for k, v in os.environ.items() if k != fanout.ENV}
    env["OMP_NUM_THREADS"] = "2"
    run = subprocess.run(
        [sys.executable, "-c", THREADS], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    alone, python_thread, torch_threads = run.stdout.split("\n")[:3]
    assert alone == str(fanout.MAX_WORKERS) and python_thread == "0"
    assert torch_threads == "0 1"  # one Python thread, yet it does not fork


@pytest.mark.skipif(sys.platform != "linux", reason="the workers fork on Linux only")
@pytest.mark.parametrize("how", ["Ctrl-C to the group", "SIGKILL to the reader"])
def test_no_worker_outlives_its_reader(how, tmp_path):
    """Ctrl-C reaches every process of the group: the reader says one line and exits 130, the
    workers (which ignore it) are reaped. A reader killed outright leaves its workers a closed
    pipe: they exit by themselves."""
    path = _trace(tmp_path, _ops(60_000))
    code = (
        "import sys; from tracereader.trace import fanout; fanout.AFTER = 0; fanout.SLAB = 512;"
        "from tracereader.commands import explain; explain.cli()"
    )
    env = {**os.environ, fanout.ENV: "2"}
    reader = subprocess.Popen(
        [sys.executable, "-c", code, path], env=env, cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(_running(path)) < 3 and reader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reader.poll() is None, "read before the workers were seen"
        if how == "Ctrl-C to the group":
            os.killpg(reader.pid, signal.SIGINT)
            _, err = reader.communicate(timeout=30)
            assert reader.returncode == 130 and err.strip().count("\n") == 0
        else:
            reader.kill()
            reader.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _running(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(reader.pid, signal.SIGKILL)


def _running(marker: str) -> list[str]:
    """The processes whose command line names `marker` (zombies not counted: they are gone)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(pid)
    return found


HOLDS = """
import os, time
def held(mb):  # pages of its own, each touched
    block = bytearray(mb << 20)
    block[::4096] = bytes(1 for _ in range(0, mb << 20, 4096))
    return block
block = held({parent})
if {child} and os.fork() == 0:
    mine = held({child})
    time.sleep(0.6)
    os._exit(0)
time.sleep(0.6)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux's /proc")
def test_the_benchmark_counts_the_workers_memory():
    """trace_bench's memory of a child that forks is its whole tree's, each page once: a reader
    with workers is not measured as its loading process alone."""
    from tools.dev.reader_validation.trace_bench import _child

    _, alone, rc, _ = _child([sys.executable, "-c", HOLDS.format(parent=60, child=0)], ROOT)
    _, tree, rc2, _ = _child([sys.executable, "-c", HOLDS.format(parent=60, child=60)], ROOT)
    assert rc == rc2 == 0
    assert 60 <= alone < 90
    assert 60 + alone - 10 < tree < 60 + alone + 10  # the child's own 60 MB; shared pages once
