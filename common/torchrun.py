"""Plumbing for a lesson that runs one process per rank, launched by torchrun:

    uv run torchrun --nproc-per-node 2 05_tp_mlp.py [flags]

or started alone (`uv run 05_tp_mlp.py [flags]`), when it starts torchrun itself: see
`plan_self_launch()`.

What common.cli and common.outputs give a single-process lesson, for many processes at once:
- `launched()`: the rank and world size torchrun put in the environment; run without
  torchrun, NoLauncher: a one-line UsageError that says how to launch, or, for a lesson whose
  run_main was given `self_launch=True`, the cue to start torchrun as a child;
- `resolve()`: common.cli.resolve with one GPU per rank (LOCAL_RANK; more processes than GPUs
  is refused);
- `init_process_group()`: NCCL on GPUs, gloo on CPUs; its timeout bounds every collective;
- `prepare()` and `publishing()`: each rank writes `<tag>_rank<r>.json` (rank 0 also the
  table) under temporary names; all_gather_object decides, and the files are renamed into
  place only if every rank wrote its own, otherwise each rank removes its own;
- `run_main()`: one line on stderr, from rank 0, for a failure on any rank; the other ranks
  print nothing; every rank exits, none waits past --timeout.

A failing rank exits at once, which breaks the collective the others are in (gloo sees the
closed connection, and torchrun stops every rank with SIGTERM once one exits with an error).
What rank 0 catches then is the effect, not the cause. So a rank whose failure is its own first
posts its line in torchrun's store, which outlives the workers (the first to post wins), and
rank 0 reports that line. The failing rank's traceback (bad input aside) goes where elastic's
`record` would put it: into torchrun's closing report, which then names that rank.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

from common import cli, outputs, startup
from common.cli import Run, UsageError, int_in, one_line
from common.outputs import Outputs
from tracereader import Stopped

DEFAULT_TIMEOUT_S = 120  # a collective that takes longer is a failure
CAUSE_WAIT_S = 10  # how long rank 0 waits for the cause of a failure it saw only the effect of
EXIT_LAG_S = 1  # torchrun looks at its workers every 0.1 s (--monitor-interval's default)
CAUSE_KEY = "profiling-pytorch/cause"  # in torchrun's store: "<exit code> <line>"
FAULT_ENV = "PROFILING_PYTORCH_FAULT"  # tests only: "<rank>:<where>[:hang]", see fault_point
# What gloo raises (a RuntimeError) in a collective whose peer exited, or did not answer in time
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
_TIMED_OUT = ("Timed out", "Application timeout")


class RankFailed(Exception):
    """Another rank failed: this rank stops because of it."""


class Terminated(BaseException):
    """SIGTERM: torchrun stops every rank once one has exited with an error (the effect: rank 0
    reports that rank's line, from the store), or when it was stopped itself (`kill`: no rank
    posted a line, and every rank exits 130, as for Ctrl-C)."""


class NoLauncher(UsageError):
    """Neither RANK nor WORLD_SIZE is set: no torchrun started this process."""

    def __init__(self, line: str, script: str, device: str):
        super().__init__(line)
        self.script, self.device = script, device


class InjectedFault(RuntimeError):
    """A failure staged by a test through PROFILING_PYTORCH_FAULT."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """Where this process sits among the ranks, as torchrun's environment says."""

    rank: int
    world: int
    local_rank: int  # the rank among this machine's processes: its GPU
    local_world: int  # processes on this machine


@dataclasses.dataclass(frozen=True)
class Group:
    """The process group this rank joined."""

    rank: int
    world: int
    backend: str


_folder: Path | None = None  # where this rank's files go
_agreeing: dist.ProcessGroup | None = None  # the group the ranks decide in (None: the default)
_created: list[Path] = []  # the folders this run creates there, deepest first


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def env_rank() -> int:
    """This process's rank, 0 when torchrun did not start it."""
    return _env_int("RANK") or 0


def launched(script: str, argv: Sequence[str] | None = None, *, device: str = "auto") -> Launch:
    """The rank and world size torchrun set; without them, a one-line UsageError saying how
    to launch (with the flags this run was given): NoLauncher when neither is set (`device`,
    the --device asked for, goes with it to plan_self_launch)."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world is None or not 0 <= rank < world:
        flags = shlex.join(sys.argv[1:] if argv is None else list(argv))
        command = f"uv run torchrun --nproc-per-node 2 {script} {flags}".strip()
        line = f"{script} runs one process per rank: launch it with torchrun, e.g. `{command}`"
        if "RANK" not in os.environ and "WORLD_SIZE" not in os.environ:
            raise NoLauncher(line, script, device)
        raise UsageError(line)
    unset = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if unset:  # RANK and WORLD_SIZE set by hand: joining the others would fail in torch
        raise UsageError(
            f"RANK and WORLD_SIZE are set but {' and '.join(unset)} not: these are torchrun's "
            f"variables, it sets them all; launch it with `uv run torchrun --nproc-per-node "
            f"{world} {script} ...`, or unset RANK and WORLD_SIZE"
        )
    local_rank, local_world = _env_int("LOCAL_RANK"), _env_int("LOCAL_WORLD_SIZE")
    return Launch(
        rank=rank,
        world=world,
        local_rank=rank if local_rank is None else local_rank,
        local_world=world if local_world is None else local_world,
    )


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=int_in(5, 3600, "a hung rank would hold every other rank that long"),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long a rank waits for the others in a collective before it gives up, "
        f"5 to 3600 (default: {DEFAULT_TIMEOUT_S})",
    )


def resolve(args: argparse.Namespace, launch: Launch) -> Run:
    """common.cli.resolve, per rank: the GPU numbered LOCAL_RANK, or the CPU; same seed."""
    run = cli.resolve(args)
    if not run.on_gpu:
        return run
    count = torch.cuda.device_count()
    if launch.local_world > count:
        raise UsageError(
            f"{launch.local_world} processes on this machine but {count} GPU(s): one "
            f"process per GPU, so at most --nproc-per-node {count} (or --device cpu)"
        )
    device = torch.device("cuda", launch.local_rank)
    torch.cuda.set_device(device)
    return dataclasses.replace(run, device=device)


def prepare(traces_dir: str, script: str, tag: str, launch: Launch, *, gzip: bool) -> Outputs:
    """This rank's files, DIR/<script>/<tag>_rank<r>.json (and .txt, written by rank 0 only),
    checked before any work, as common.outputs.prepare does."""
    global _folder, _created
    out = outputs.prepare(traces_dir, script, f"{tag}_rank{launch.rank}", gzip=gzip)
    _folder = out.trace.parent.absolute()
    _created = outputs._missing_folders(_folder)  # before any rank can have created them
    return out


def rank_files(out: outputs.Outputs, tag: str, launch: Launch) -> dict[int, Path]:
    """Every rank's trace of this run, named as prepare() named this rank's, format included
    (.json or .json.gz): never an older run's file of the other format beside it."""
    suffix = out.trace.name.removeprefix(f"{tag}_rank{launch.rank}")
    return {r: out.trace.with_name(f"{tag}_rank{r}{suffix}") for r in range(launch.world)}


def init_process_group(run: Run, launch: Launch, *, timeout_s: int) -> Group:
    """Join the ranks: NCCL on GPUs, gloo on CPUs; `timeout_s` bounds every collective."""
    global _agreeing
    backend = "nccl" if run.on_gpu else "gloo"
    options = {"device_id": run.device} if run.on_gpu else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **options)
    # The ranks decide over gloo on GPUs too: a timed-out NCCL collective ends its process
    # (NCCL's watchdog) before it can remove its files; a timed-out gloo one raises.
    if run.on_gpu:
        _agreeing = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
    fault_point("init")  # tests: a rank that fails while the others enter a collective
    return Group(launch.rank, launch.world, backend)


def fault_point(where: str) -> None:
    """Tests only: fail here on the rank that PROFILING_PYTORCH_FAULT=<rank>:<where> names
    (with `:hang`, stop answering instead, as a stuck rank would)."""
    fault = os.environ.get(FAULT_ENV, "")
    if fault == f"{env_rank()}:{where}:hang":
        while True:
            time.sleep(1)
    if fault == f"{env_rank()}:{where}":
        raise InjectedFault(f"failure staged at '{where}' by {FAULT_ENV}")


# --- all or none ---------------------------------------------------------------------------


def _all_did(ok: bool, what: str) -> None:
    """Every rank says whether it did `what`; raise RankFailed on a rank that did, unless all
    did (a rank that did not raises its own error)."""
    said = [None] * dist.get_world_size()
    dist.all_gather_object(said, ok, group=_agreeing)
    failed = [str(r) for r, good in enumerate(said) if not good]
    if ok and failed:
        raise RankFailed(f"rank(s) {', '.join(failed)} could not {what}")


@contextmanager
def publishing(out: Outputs) -> Iterator[tuple[Path, Path | None]]:
    """Temporary paths for this rank's trace (and rank 0's table, None elsewhere); renamed
    into place only once every rank has written its own (common.outputs.publishing, agreed)."""
    finals = [out.trace, out.table] if dist.get_rank() == 0 else [out.trace]
    write = lambda err: _all_did(err is None, "write their files")  # noqa: E731
    try:
        with outputs.publishing(*finals, agree=write) as temps:
            yield temps[0], (temps[1] if len(temps) > 1 else None)
            fault_point("export")  # tests: a rank whose export fails after the others wrote
    except BaseException:
        with suppress(Exception):
            _all_did(False, "publish")  # the others wait for this rank's word on its renames
        raise
    # Once every rank has renamed its files the set is complete: rank 0 reads it next.
    try:
        _all_did(True, "publish")
    except BaseException:
        for final in finals:
            final.unlink(missing_ok=True)
        raise


# --- ending a run: one line from rank 0 ----------------------------------------------------


def _stop(signum, frame):
    for sig in startup.STOP_SIGNALS:  # once: the cleanup it starts must finish
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signal.Signals(signum).name)


def _stop_on_signals() -> list[int]:
    """SIGINT (Ctrl-C: torchrun passes on what it gets), SIGTERM (torchrun stopping the ranks)
    and SIGHUP (a closed terminal) unwind the run; SIGHUP only where it has its default action
    (under nohup it stays ignored). Returns the signals handled."""
    startup.hand_over()  # the lesson's imports are done (common/startup.py stopped them at once)
    handled = [signal.SIGINT, signal.SIGTERM]
    hangup = getattr(signal, "SIGHUP", None)
    if hangup is not None and signal.getsignal(hangup) is signal.SIG_DFL:
        handled.append(hangup)
    for sig in handled:
        signal.signal(sig, _stop)
    return handled


def _failure(err: BaseException) -> tuple[int, str, str]:
    """The exit code, one line, and whose failure it is: "own" (this rank's), "effect" (of
    another rank's) or "bug" (this rank's, unforeseen: its traceback is wanted)."""
    if isinstance(err, Terminated):  # rank 0 says another rank's line instead, where one came
        why = "torchrun was stopped, or another rank exited"
        return 130, f"stopped by SIGTERM from torchrun (handled as Ctrl-C): {why}", "effect"
    known = cli.failure(err)
    if known is not None:
        return *known, "own"
    if any(s in str(err) for s in _TIMED_OUT):  # no rank failed: one is stuck or far behind
        return 1, f"a rank did not answer within --timeout: {one_line(err)}", "own"
    if isinstance(err, RankFailed):
        return 1, str(err), "effect"
    if isinstance(err, dist.DistError) or any(s in str(err) for s in _PEER_GONE):
        return 1, f"a collective failed: {one_line(err)}", "effect"
    return 1, one_line(err), "own" if isinstance(err, InjectedFault) else "bug"


# torchrun sets this for every process it starts: RANK without it was set by hand.
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"


def _quiet() -> None:
    """Ranks other than 0 print nothing (fd 1 too: C++ code writes there); rank 0 speaks for
    them, and torchrun's closing report shows their bugs' tracebacks."""
    devnull = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    sys.stdout.flush()
    os.dup2(devnull.fileno(), 1)
    sys.stdout = sys.stderr = devnull


def _store() -> dist.Store:
    # The store torchrun serves, behind the default group's key prefix (private in torch,
    # stable since 1.x): it answers even when a rank has died.
    return dist.distributed_c10d._get_default_store()


def _cause(code: int, line: str) -> tuple[int, str]:
    """The failure another rank posted, or (code, line) if none comes within CAUSE_WAIT_S."""
    deadline = time.monotonic() + CAUSE_WAIT_S
    with suppress(Exception):  # the store is gone with torchrun
        while time.monotonic() < deadline:  # polled: a timed-out store.wait logs on stderr
            if _store().check([CAUSE_KEY]):
                posted, _, said = _store().get(CAUSE_KEY).decode("utf-8", "replace").partition(" ")
                return int(posted), said
            time.sleep(0.05)
    return code, line


def _clean_up() -> None:
    """After a failure: this process's temporary folder, should a signal have cut its removal
    short, and the folders this run created if no rank has a file left in them (every failing
    rank tries once its own files are gone: the last one succeeds)."""
    if _folder is not None and _folder.is_dir():
        for partial in _folder.glob(f"{outputs.PARTIAL_PREFIX}{os.getpid()}-*"):
            shutil.rmtree(partial, ignore_errors=True)
    for created in _created:
        try:
            created.rmdir()
        except OSError:
            break


def run_main(
    main: Callable[[Sequence[str] | None], int | None],
    argv: Sequence[str] | None = None,
    *,
    self_launch: bool = False,
) -> int:
    """Call a lesson's main on this rank; see the module's doc for what every rank then does.
    With `self_launch`, a run that no torchrun started starts one (see `plan_self_launch()`)."""
    rank, stderr = env_rank(), sys.stderr
    if rank != 0:
        _quiet()
    handled = _stop_on_signals()
    try:
        try:
            code = main(argv) or 0
        finally:
            for sig in handled:  # the report must not be cut short
                signal.signal(sig, signal.SIG_IGN)
    except (Exception, KeyboardInterrupt, Terminated) as err:
        if self_launch and isinstance(err, NoLauncher):
            return _launch_and_wait(err, argv, handled)
        code, line, whose = _failure(err)
        if whose != "effect" and code != 2:  # bad input stays one line
            ErrorHandler().record_exception(err)  # its traceback in torchrun's closing report
        if whose == "bug" and rank == 0:
            traceback.print_exception(err, file=stderr)
        if not dist.is_initialized():  # before the ranks met: bad input, alike on every rank
            if rank == 0 or not os.environ.get(TORCHRUN_ENV):  # no torchrun: no rank 0 either
                print(f"error: {line}", file=stderr)
            return code
        _clean_up()
        if whose != "effect":  # the cause: posted for rank 0 (the first to post wins)
            said = line if rank == 0 else f"rank {rank} of {dist.get_world_size()}: {line}"
            with suppress(Exception):  # the store is gone with torchrun: nobody is left to tell
                _store().compare_set(CAUSE_KEY, "", f"{code} {said}")
        elif rank == 0:
            code, line = _cause(code, line)
        if rank == 0:
            print(f"error: {line}", file=stderr)
        if whose == "effect":  # torchrun sees the failing rank exit first: its report names it
            time.sleep(EXIT_LAG_S)
        _exit(code)  # at once: that ends the collectives the others may be blocked in
    if dist.is_initialized():
        with suppress(Exception):  # the run is over; its outcome is what the exit code says
            dist.destroy_process_group()
        # Python's own exit handlers, then out: past them, the interpreter's teardown can
        # destroy a gloo thread still joinable and abort a rank that succeeded (seen under load)
        atexit._run_exitfuncs()
        _exit(code)
    return code


def _exit(code: int) -> None:
    """Leave now: a process group whose peer is gone can block Python's own shutdown."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with suppress(Exception):
            stream.flush()
    os._exit(code)


# --- no launcher: torchrun started as a child ----------------------------------------------

GPU_RANKS = 2  # started alone on a machine with GPUs: this many ranks, one per GPU, at most
CPU_RANKS = 2  # ... on a CPU: gloo ranks


@dataclasses.dataclass(frozen=True)
class SelfLaunch:
    """What a lesson started without a launcher runs instead: torchrun, as a child."""

    what: str  # "2 CPU ranks (gloo)"
    shown: str  # the command a user would type for the same run
    command: list[str]  # the child's
    env: dict[str, str]  # the child's


def plan_self_launch(
    script: str, argv: Sequence[str], *, device: str, gpus: int, cores: int, env: dict[str, str]
) -> SelfLaunch:
    """The run a lesson started alone starts: `torchrun --standalone --nproc-per-node N` on
    the same script and flags, N one rank per GPU (at most GPU_RANKS), or CPU_RANKS gloo ranks
    on a CPU (no GPU, or --device cpu); OMP_NUM_THREADS the cores shared among them, unless set
    (torchrun would otherwise set it to 1 and print a banner saying so)."""
    if device == "cuda" and gpus == 0:
        raise UsageError("--device cuda was asked for, but PyTorch sees no CUDA GPU here")
    on_gpu = device != "cpu" and gpus > 0
    nproc = min(gpus, GPU_RANKS) if on_gpu else CPU_RANKS
    kind = "GPU" if on_gpu else "CPU"
    what = f"{nproc} {kind} rank{'s' * (nproc > 1)} ({'NCCL' if on_gpu else 'gloo'})"
    path = startup.ROOT / script
    shown_path = os.path.relpath(path)
    shown_path = str(path) if shown_path.startswith("..") else shown_path
    flags = ["--standalone", "--nproc-per-node", str(nproc)]
    child_env = dict(env)
    child_env.setdefault("OMP_NUM_THREADS", str(max(1, cores // nproc)))
    return SelfLaunch(
        what=what,
        shown=shlex.join(["uv", "run", "torchrun", *flags, shown_path, *argv]),
        command=[sys.executable, "-c", _boot(), *flags, str(path), *argv],
        env=child_env,
    )


def _boot() -> str:
    """The child's program: until torchrun takes over the signals (as it starts the ranks), a
    signal ends it in one line, 130; then torch's launcher, through `launcher_main`."""
    lines = {int(sig): f"error: {startup.line(sig)}\n".encode() for sig in startup.STOP_SIGNALS}
    return (
        "import os, signal, sys\n"
        f"LINES = {lines!r}\n"
        "for sig in LINES:\n"
        "    signal.signal(sig, lambda s, f: (os.write(2, LINES[s]), os._exit(130)))\n"
        f"sys.path.insert(0, {str(startup.ROOT)!r})\n"
        "from common.torchrun import launcher_main\n"
        "sys.exit(launcher_main(sys.argv[1:]))\n"
    )


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _launch_and_wait(missing: NoLauncher, argv: Sequence[str] | None, handled: list[int]) -> int:
    """Start the run `plan_self_launch` decides on and pass its exit code through. The child leads
    its own session: Ctrl-C at the terminal reaches this process alone, which passes each
    signal on once (torchrun then passes it to every rank once: rank 0 says the one line)."""
    flags = sys.argv[1:] if argv is None else list(argv)
    gpus = 0 if missing.device == "cpu" else torch.cuda.device_count()
    try:
        plan = plan_self_launch(
            missing.script, flags, device=missing.device, gpus=gpus, cores=_cores(),
            env=dict(os.environ),
        )  # fmt: skip
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"no launcher: starting {plan.what}: {plan.shown}", flush=True)
    child: subprocess.Popen | None = None
    pending: list[int] = []

    def forward(signum, frame):
        if child is None:
            pending.append(signum)
        elif not pending:  # once: a second signal would cut torchrun's own shutdown short
            pending.append(signum)
            with suppress(ProcessLookupError):
                child.send_signal(signum)

    for sig in handled:  # a handler, not SIG_IGN: the child starts with the defaults
        signal.signal(sig, forward)
    child = subprocess.Popen(plan.command, env=plan.env, start_new_session=True)
    if pending:
        child.send_signal(pending[0])
    code = child.wait()
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's number


def launcher_main(args: Sequence[str]) -> int:
    """In the child: torchrun (torch.distributed.run), with the exit code of the rank that
    speaks (rank 0 where it failed; torchrun's own is 1 for any failure), 130 for a signal,
    and torchrun's own logging off; its closing report printed for a failure other than bad
    input or an interrupt (it holds a failing rank's traceback)."""
    import logging

    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    logging.disable(logging.ERROR)  # this process only: its notes, the failures' too
    try:
        torch_run.run(torch_run.parse_args(list(args)))
    except ChildFailedError as err:
        # The lowest rank's code, 0's where it failed; but a rank torchrun stopped because
        # another failed first exits 130 (its SIGTERM), and the failure is that other rank's
        codes = [f.exitcode if f.exitcode >= 0 else 128 - f.exitcode
                 for _, f in sorted(err.failures.items())]  # fmt: skip
        code = next((c for c in codes if c != 130), 130)
        if code not in (2, 130):
            print(err.format_msg(), file=sys.stderr)
        return code or 1
    except SignalException:
        return 130
    return 0
