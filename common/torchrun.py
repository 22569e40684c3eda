"""Plumbing for a lesson that runs as one process per rank, launched by torchrun:

    uv run torchrun --nproc-per-node 2 05_tp_mlp.py [flags]

What common.cli and common.outputs give a single-process lesson, for many processes at once:
- `launched()`: the rank and world size torchrun put in the environment; run without
  torchrun, a one-line UsageError that says how to launch;
- `resolve()`: one device per rank (the GPU numbered LOCAL_RANK; more processes than GPUs is
  refused), seeded alike on every rank;
- `init_process_group()`: NCCL on GPUs, gloo on CPUs, with a timeout on every collective;
- `prepare()` and `publishing()`: each rank writes `<tag>_rank<r>.json` (rank 0 also the
  table) under temporary names; the ranks agree, and the files are renamed into place only
  if every rank wrote its own, otherwise each rank removes its own;
- `run_main()`: one line on stderr, from rank 0, for a failure on any rank (the rank that
  failed first, not the errors it caused on the others); the other ranks print nothing on
  stdout; every rank exits with the same code; every wait has a deadline.

The ranks agree through torchrun's store (a TCPStore that torchrun itself serves, so it
outlives any worker), not through a collective: a rank that failed may never reach the
collective the others wait in, and it can still post why it failed. A rank that fails posts
its reason and exits at once, which ends the collectives the others are blocked in (gloo
notices the closed connection; torchrun stops the others when one exits, and a rank blocked
on a GPU waits for NCCL's watchdog, which the process group's timeout bounds).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from common import outputs
from common.check import MismatchError
from common.cli import (
    DTYPES,
    Run,
    UsageError,
    _caused_by_interrupt,
    compile_in_process,
    int_in,
    one_line,
)
from common.outputs import Outputs

DEFAULT_TIMEOUT_S = 120  # a collective or an agreement that takes longer is a failure
# Once its work is done, rank 0 reads the traces back while the others wait for its verdict:
# a few seconds at the lessons' shapes, minutes for traces of GBs.
READING_S = 600
CAUSE_WAIT_S = 10  # how long rank 0 waits for the rank whose failure broke its collective
POLL_S = 0.02
KEYS = "profiling-pytorch"  # prefix of this module's keys in torchrun's store
FAULT_ENV = "PROFILING_PYTORCH_FAULT"  # tests only: "<rank>:<where>" makes that rank fail
FAULT_POINTS = ("init", "export")


class RankFailed(Exception):
    """Another rank failed (or never answered): this rank stops because of it."""


class Terminated(BaseException):
    """SIGTERM: torchrun stops every rank once one has exited with an error."""


class InjectedFault(RuntimeError):
    """A failure staged by a test through PROFILING_PYTORCH_FAULT."""


@dataclass(frozen=True)
class Launch:
    """Where this process sits among the ranks, as torchrun's environment says."""

    rank: int
    world: int
    local_rank: int  # the rank among this machine's processes: its GPU
    local_world: int  # processes on this machine


@dataclass
class Group:
    """The process group this rank joined, and the store the ranks agree through."""

    launch: Launch
    backend: str
    timeout_s: int
    store: dist.Store
    out_folder: Path | None = None  # where this rank's files go
    run_folders: list[Path] = field(default_factory=list)  # created by this run, deepest first

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world(self) -> int:
        return self.launch.world


_GROUP: Group | None = None  # set once the process group is up


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def env_rank() -> int:
    """This process's rank, 0 when torchrun did not start it."""
    return _env_int("RANK") or 0


def launched(script: str, argv: Sequence[str] | None = None) -> Launch:
    """The rank and world size torchrun set; without them, a one-line UsageError saying how
    to launch (with the flags this run was given)."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world is None or not 0 <= rank < world:
        flags = shlex.join(sys.argv[1:] if argv is None else list(argv))
        command = f"uv run torchrun --nproc-per-node 2 {script} {flags}".strip()
        raise UsageError(
            f"{script} runs one process per rank: launch it with torchrun, e.g. `{command}`"
        )
    local_rank = _env_int("LOCAL_RANK")
    local_world = _env_int("LOCAL_WORLD_SIZE")
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
        help="how long a rank waits for the others (a collective, the agreement to publish) "
        f"before it gives up, 5 to 3600 (default: {DEFAULT_TIMEOUT_S})",
    )


def resolve(args: argparse.Namespace, launch: Launch) -> Run:
    """common.cli.resolve, per rank: the GPU numbered LOCAL_RANK, or the CPU; same seed."""
    has_gpu = torch.cuda.is_available()
    if args.device == "cuda" and not has_gpu:
        raise UsageError("--device cuda was asked for, but PyTorch sees no CUDA GPU here")
    if args.device != "cpu" and has_gpu:
        count = torch.cuda.device_count()
        if launch.local_world > count:
            raise UsageError(
                f"{launch.local_world} processes on this machine but {count} GPU(s): one "
                f"process per GPU, so at most --nproc-per-node {count} (or --device cpu)"
            )
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
    else:
        if args.device == "auto":
            print(
                "note: no CUDA GPU found, running on the CPU with gloo: the traces show the "
                "CPU dispatch chain and the c10d ops, not GPU kernels"
            )
        device = torch.device("cpu")
    torch.manual_seed(args.seed)
    if args.compile:
        compile_in_process()
    return Run(device=device, dtype=DTYPES[args.dtype], dtype_name=args.dtype)


_prepared: dict[str, object] = {}  # what prepare saw, handed to the group when it forms


def prepare(traces_dir: str, script: str, tag: str, launch: Launch, *, gzip: bool) -> Outputs:
    """This rank's files, DIR/<script>/<tag>_rank<r>.json (and .txt, written by rank 0 only),
    checked before any work, as common.outputs.prepare does."""
    folder = Path(traces_dir) / script
    missing = outputs._missing_folders(folder.absolute())
    out = outputs.prepare(traces_dir, script, f"{tag}_rank{launch.rank}", gzip=gzip)
    _prepared.update(folder=folder.absolute(), missing=missing)
    return out


def init_process_group(run: Run, launch: Launch, *, timeout_s: int) -> Group:
    """Join the ranks: NCCL on GPUs, gloo on CPUs; `timeout_s` bounds every collective."""
    global _GROUP
    backend = "nccl" if run.on_gpu else "gloo"
    options = {"device_id": run.device} if run.on_gpu else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **options)
    # The store torchrun serves, behind the default group's key prefix (private in torch,
    # stable since 1.x): it answers even when a rank has died.
    store = dist.distributed_c10d._get_default_store()
    _GROUP = Group(
        launch,
        backend,
        timeout_s,
        store,
        out_folder=_prepared.get("folder"),
        run_folders=list(_prepared.get("missing", [])),
    )
    fault_point("init")  # tests: a rank that fails while the others enter a collective
    return _GROUP


def fault_point(where: str) -> None:
    """Tests only: fail here on the rank that PROFILING_PYTORCH_FAULT=<rank>:<where> names."""
    if os.environ.get(FAULT_ENV) == f"{env_rank()}:{where}":
        raise InjectedFault(f"failure staged at '{where}' by {FAULT_ENV}")


# --- agreeing through the store ------------------------------------------------------------


def _key(*parts: object) -> str:
    return "/".join([KEYS, *map(str, parts)])


def _read(store: dist.Store, key: str) -> str | None:
    """The key's value, None while it is not set (never blocks)."""
    if not store.check([key]):
        return None
    return store.get(key).decode("utf-8", "replace")


def agree(name: str, err: BaseException | None) -> None:
    """Every rank says whether it got to `name` well; return only if all did, else raise
    RankFailed. A rank that failed (`err`) posts why and returns at once."""
    group = _GROUP
    if group is None:
        if err is None:
            raise RankFailed(f"no process group to agree on {name}")
        return
    group.store.set(_key(name, group.rank), "" if err is None else describe(err).line or "?")
    if err is not None:
        return
    deadline = time.monotonic() + group.timeout_s
    pending = [r for r in range(group.world) if r != group.rank]
    while pending:
        for r in list(pending):
            said = _read(group.store, _key(name, r))
            if said is not None:
                if said:
                    raise RankFailed(f"rank {r} failed: {said}")
                pending.remove(r)
            elif _read(group.store, _key("outcome", r)) is not None:
                raise RankFailed(f"rank {r} stopped before {name}")
        if pending:
            if time.monotonic() > deadline:
                raise RankFailed(
                    f"rank(s) {', '.join(map(str, pending))} did not reach {name} within "
                    f"{group.timeout_s} s (--timeout)"
                )
            time.sleep(POLL_S)


@contextmanager
def publishing(out: Outputs) -> Iterator[tuple[Path, Path | None]]:
    """Temporary paths for this rank's trace (and rank 0's table, None elsewhere); renamed
    into place only once every rank has written its own (common.outputs.publishing, agreed)."""
    rank = _GROUP.rank if _GROUP else env_rank()
    finals = [out.trace, out.table] if rank == 0 else [out.trace]
    try:
        with outputs.publishing(*finals, agree=lambda err: agree("publish", err)) as temps:
            yield temps[0], (temps[1] if len(temps) > 1 else None)
            fault_point("export")  # tests: a rank whose export fails after the others wrote
    except BaseException as err:
        agree("published", err)  # a rename that failed after the agreement: the others undo
        raise
    # Once every rank has renamed its files, the set is complete (rank 0 reads it next).
    try:
        agree("published", None)
    except BaseException:
        for final in finals:
            final.unlink(missing_ok=True)
        raise


# --- ending a run: one line from rank 0, the same exit code everywhere ----------------------


@dataclass(frozen=True)
class Outcome:
    code: int
    line: str
    root: bool = True  # False: a consequence of another rank's failure
    show_traceback: bool = False  # an unexpected error (a bug): its traceback is printed

    def as_json(self) -> str:
        return json.dumps({"code": self.code, "line": self.line, "root": self.root})

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        data = json.loads(text)
        return cls(int(data["code"]), str(data["line"]), bool(data["root"]))


OK = Outcome(0, "")
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def describe(err: BaseException) -> Outcome:
    """The exit code and one line for an error, as common.cli.run_main words them."""
    if isinstance(err, UsageError):
        return Outcome(2, str(err))
    if isinstance(err, torch.OutOfMemoryError):
        return Outcome(2, "out of device memory at these sizes: choose smaller sizes")
    if isinstance(err, MismatchError):
        return Outcome(1, f"the output does not match the float32 reference: {err}")
    if isinstance(err, Terminated):
        return Outcome(143, "stopped by torchrun (SIGTERM) after another rank exited", False)
    if isinstance(err, KeyboardInterrupt) or _caused_by_interrupt(err):
        return Outcome(130, "interrupted (Ctrl-C)")
    if isinstance(err, RankFailed):
        return Outcome(1, str(err), False)
    if isinstance(err, InjectedFault):
        return Outcome(1, one_line(err))
    if isinstance(err, dist.DistError) or any(s in str(err) for s in _PEER_GONE):
        return Outcome(1, f"a collective failed: {one_line(err)}", False)
    return Outcome(1, one_line(err), show_traceback=True)


def _raise_terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the cleanup it starts must finish
    raise Terminated()


def _quiet() -> None:
    """Ranks other than 0 print nothing on stdout (fd 1 too: C++ code writes there) and keep
    their Python stderr to themselves; rank 0 speaks for them."""
    devnull = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process
    sys.stdout.flush()
    os.dup2(devnull.fileno(), 1)
    sys.stdout = devnull
    sys.stderr = devnull


def run_main(
    main: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None
) -> int:
    """Call a lesson's main on this rank; see the module's doc for what every rank then does."""
    rank = env_rank()
    real_stderr = sys.stderr
    if rank != 0:
        _quiet()
    signal.signal(signal.SIGTERM, _raise_terminated)
    outcome = OK
    try:
        try:
            code = main(argv) or 0
            outcome = Outcome(code, "") if code else OK
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the report must not be cut short
    except SystemExit as exit_:  # argparse: --help, or bad flags (already said, on rank 0)
        code = exit_.code if isinstance(exit_.code, int) else 2
        outcome = Outcome(code, "") if code else OK
        if code and _GROUP is None:
            return code
    except BaseException as err:
        outcome = describe(err)
        if outcome.show_traceback:
            traceback.print_exception(err, file=real_stderr)
    return _settle(outcome, real_stderr)


def _say(line: str, stderr) -> None:
    if line:
        print(f"error: {line}", file=stderr, flush=True)


def _post(group: Group, key: str, value: str) -> None:
    try:
        group.store.set(key, value)
    except Exception:
        pass  # the store is gone with torchrun: nobody is left to tell


def _outcomes(group: Group, deadline: float, *, until_root: bool) -> dict[int, Outcome]:
    """The other ranks' outcomes as they arrive, until all are in (or, `until_root`, a root
    cause is) or the deadline passes."""
    seen: dict[int, Outcome] = {}
    while True:
        for r in range(group.world):
            if r != group.rank and r not in seen:
                try:
                    text = _read(group.store, _key("outcome", r))
                except Exception:
                    return seen  # the store is gone
                if text is not None:
                    seen[r] = Outcome.from_json(text)
        if len(seen) == group.world - 1:
            return seen
        if until_root and any(o.code and o.root for o in seen.values()):
            return seen
        if time.monotonic() > deadline:
            return seen
        time.sleep(POLL_S)


def _root_cause(group: Group, mine: Outcome, others: dict[int, Outcome]) -> tuple[int, Outcome]:
    """The failure to report: the lowest rank whose failure was its own, else rank 0's."""
    failed = {r: o for r, o in {**others, group.rank: mine}.items() if o.code}
    roots = sorted(r for r, o in failed.items() if o.root and o.line)
    rank = roots[0] if roots else (group.rank if mine.code else min(failed))
    return rank, failed[rank]


def _settle(outcome: Outcome, stderr) -> int:
    group = _GROUP
    if group is None:  # before the ranks met: bad input, the same on every rank
        if env_rank() == 0:
            _say(outcome.line, stderr)
        return outcome.code
    _post(group, _key("outcome", group.rank), outcome.as_json())
    if outcome.code and group.rank != 0:
        _clean_up(group)
        _exit(outcome.code)  # at once: that ends the collectives rank 0 may be blocked in
    if group.rank == 0:
        if outcome.code and outcome.root:
            others = {}  # its own failure: said now, as the others may be blocked until it exits
        else:
            wait = CAUSE_WAIT_S if outcome.code else group.timeout_s
            others = _outcomes(group, time.monotonic() + wait, until_root=bool(outcome.code))
        missing = [r for r in range(1, group.world) if r not in others]
        code, line = outcome.code, outcome.line
        if outcome.code or any(o.code for o in others.values()):
            rank, cause = _root_cause(group, outcome, others)
            code = cause.code
            line = cause.line if rank == 0 else f"rank {rank} of {group.world}: {cause.line}"
        elif missing:
            code = 1
            line = (
                f"rank(s) {', '.join(map(str, missing))} did not finish within "
                f"{group.timeout_s} s (--timeout)"
            )
        _say(line, stderr)
        _post(group, _key("verdict"), str(code))
        if code:
            _clean_up(group)
            _exit(code)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nothing of this rank is left to clean
        code = _verdict(group)
    try:
        dist.destroy_process_group()
    except Exception:
        pass  # the run is over either way; its outcome is what the exit code says
    if code:
        _exit(code)
    return 0


def _verdict(group: Group) -> int:
    deadline = time.monotonic() + group.timeout_s + READING_S
    while time.monotonic() < deadline:
        try:
            said = _read(group.store, _key("verdict"))
        except Exception:
            return 1
        if said is not None:
            return int(said)
        time.sleep(POLL_S * 5)
    return 1


def _clean_up(group: Group) -> None:
    """After a failure: this process's temporary folder, should a SIGTERM have cut its
    removal short, and the folders this run created if no rank has a file left in them
    (every failing rank tries once its own files are gone: the last one succeeds)."""
    folder = group.out_folder
    if folder is not None and folder.is_dir():
        for partial in folder.glob(f"{outputs.PARTIAL_PREFIX}{os.getpid()}-*"):
            shutil.rmtree(partial, ignore_errors=True)
    for created in group.run_folders:  # deepest first
        try:
            created.rmdir()
        except OSError:
            break


def _exit(code: int) -> None:
    """Leave now: a process group whose peer is gone can block Python's own shutdown."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
