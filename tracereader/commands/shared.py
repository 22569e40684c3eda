"""What both commands do alike: a file they cannot use is one line and exit code 2, a closed
pipe is no traceback."""

from __future__ import annotations

import os
import sys

from tracereader.trace.load import Trace, TraceError, load


def load_or_exit(path: str, memory: bool = False) -> Trace:
    """For the commands: a file they cannot use is one line on stderr and exit code 2;
    `memory`: with the allocator's events (load's option)."""
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
