"""What both commands do alike: a file they cannot use is one line and exit code 2, a closed
pipe is no traceback, an output that cannot be written (a full disk, /dev/full) is one line
and exit code 2, Ctrl-C one line and exit code 130 (the one runner's, commandline.run)."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable

from tracereader.commandline import run
from tracereader.trace.load import Trace, TraceError, load


def load_or_exit(path: str, memory: bool = False) -> Trace:
    """For the commands: a file they cannot use is one line on stderr and exit code 2;
    `memory`: with the allocator's events (load's option)."""
    if os.path.isdir(path):
        print(
            f"error: {path} is a folder without rank traces (<stem>_rank<r>.json[.gz], in it "
            "or in its sub-folders one level down): name a trace file",
            file=sys.stderr,
        )
        raise SystemExit(2)
    # Loading makes about a hundred objects per KB of trace, all kept, none in a garbage cycle:
    # the collector's passes over them cost time and free nothing (a third of the reading of
    # hta/df_index_resolver on this project's machine, docs/reader_vs_hta.md). Paused while
    # loading, then the trace is frozen out of its sight: the command ends with it.
    gc.disable()
    try:
        trace = load(path, memory=memory)
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        gc.enable()
    gc.freeze()
    if not trace.steps:
        print(
            f"error: {path} holds no event this reader uses (no CPU op, runtime call or GPU work)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return trace


def stdout_closed() -> int:
    """`explain BIG | head` closed the pipe early: no traceback for that, and none at exit
    when Python flushes stdout (pointed at /dev/null)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def run_cli(main: Callable[[], int]) -> int:
    """A console command's exit code through the one runner (tracereader.commandline.run): a
    closed pipe (`explain BIG | head`) ends quietly with 1, an output that cannot be written is
    one line and 2, Ctrl-C (SIGTERM, SIGHUP) one line and 130."""
    return run(main, known=_reader_known)


def _reader_known(err: BaseException) -> tuple[int, str | None] | None:
    if isinstance(err, BrokenPipeError):
        return stdout_closed(), None
    if isinstance(err, OSError) and err.filename is None and not isinstance(err, KeyboardInterrupt):
        stdout_closed()  # what is still buffered would fail again at exit
        return 2, f"cannot write the output: {err.strerror or err}"
    return None
