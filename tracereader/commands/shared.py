"""What both commands do alike: a file they cannot use is one line and exit code 2, a closed
pipe is no traceback, an output that cannot be written (a full disk, /dev/full) is one line
and exit code 2, Ctrl-C one line and exit code 130."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

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
    try:
        trace = load(path, memory=memory)
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
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
    """A console command's exit code: main's, or 130 for Ctrl-C and 2 for an output that cannot
    be written, each with one line on stderr instead of a traceback. stdout is flushed here,
    while an error can still be said: at exit Python would print its own message."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        _say("interrupted (Ctrl-C)")
        return 130
    except BrokenPipeError:
        return stdout_closed()
    except OSError as err:
        if err.filename is not None:
            raise  # a file the command reads: its own code says those in one line
        _say(f"cannot write the output: {err.strerror or err}")
        stdout_closed()  # what is still buffered would fail again at exit
        return 2


def _say(message: str) -> None:
    try:
        print(f"error: {message}", file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr is gone too: the exit code says it
