"""Command-line plumbing that needs no torch: the parser with one-line errors, the whole-number
argparse types, the error a command reports as one line, and the one runner (`run`) that every
lesson, tool and command ends through.

The trace commands use it, and so do the lessons (through common.cli) and sharing: one parser,
one error path, and explain/compare start without importing torch.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable


class UsageError(Exception):
    """Input the script cannot work with: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (argparse prints the usage block first), the
    description keeps its layout, and a mistyped flag fails instead of matching a prefix."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def one_line(err: BaseException, limit: int = 200, *, secret: str | None = None) -> str:
    """`Type: first line of the message`, cut to `limit`: an exception fit for one stderr line.

    A `secret` (a token) is scrubbed from the whole message before it is cut, so that no
    prefix of it can survive at the cut.
    """
    text = str(err)
    if secret:
        text = text.replace(secret, "***")
    first = text.splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}"[:limit]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def int_in(low: int, high: int, why: str) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; `why` explains the bound."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value} ({why})")
        return value

    return parse


def size_up_to(high: float, unit: str, low: float = 0.0) -> Callable[[str], float]:
    """An argparse type: a number of `unit`, more than 0 (or at least `low`, where given) and at
    most `high`; NaN and inf are refused by the same comparisons."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text!r}") from None
        if not ((low < value if low == 0 else low <= value) and value <= high):
            floor = "more than 0" if low == 0 else f"at least {low:g}"
            raise argparse.ArgumentTypeError(
                f"must be {floor} and at most {high:g} {unit}, got {text}"
            )
        return value

    return parse


# --- The one runner: every lesson, tool and command ends through it ------------------------

# A write the machine refused: a full disk, a quota, a read-only file system, /dev/full.
WRITE_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the run is, so that it unwinds as Ctrl-C does."""


def interrupted(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or Stopped) behind an error, also when it landed inside a library's cleanup
    (the profiler's __exit__ can raise its own error while the interrupt unwinds)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return err
        seen.add(id(err))
        err = err.__context__ or err.__cause__
    return None


CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory"  # torch's words, torch-free here


def failure(err: BaseException) -> tuple[int, str | None] | None:
    """The exit code and one line (None: say nothing) for what every command can meet; None for
    a bug, whose traceback is wanted."""
    if isinstance(err, UsageError):
        return 2, str(err)
    if isinstance(err, BrokenPipeError):
        return 2, "the output's reader went away (a pipe such as `| head`): the rest is dropped"
    if isinstance(err, OSError) and err.errno in WRITE_FAILURES:
        where = f" ({err.filename})" if err.filename else " (the output)"
        return 2, f"cannot write{where}: {err.strerror or err}"
    if isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError) and str(err).startswith(CPU_ALLOCATOR)
    ):  # the machine's memory, not a bug: the size asked for is too large here
        return 2, f"out of memory on the CPU ({one_line(err) or 'MemoryError'}): ask for less"
    stop = interrupted(err)
    if isinstance(stop, Stopped):
        return 130, f"stopped by {stop} (handled as Ctrl-C)"
    if stop:
        return 130, "interrupted (Ctrl-C)"
    return None


def run(
    main: Callable[[], int | None],
    known: Callable[[BaseException], tuple[int, str | None] | None] | None = None,
) -> int:
    """main's exit code, or one line on stderr and its code: 2 for bad input (UsageError) or an
    output that cannot be written, 130 for Ctrl-C; SIGTERM and SIGHUP (`kill`, a closed
    terminal) stop the run as Ctrl-C does, so what it was writing is removed on the way out.
    `known`: the caller's own errors it can say in one line (torch's out-of-memory, a result
    that does not match its reference), asked before these. A bug keeps its traceback."""
    before = _stop_on_signals()
    try:
        code = main() or 0
        sys.stdout.flush()  # a full disk or a closed pipe behind stdout: said here, not at exit
        return code
    except (Exception, KeyboardInterrupt) as err:
        said = (known(err) if known else None) or failure(err)
        if said is None:
            raise
        if isinstance(err, OSError):
            drop_stdout()
        if said[1] is not None:
            with contextlib.suppress(OSError):
                print(f"error: {said[1]}", file=sys.stderr, flush=True)
        return said[0]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def drop_stdout() -> None:
    """stdout failed (or may have): what is still buffered goes to /dev/null, so that Python's
    own flush at exit does not fail again with its own message."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _stop_on_signals() -> dict:
    """Handlers for SIGTERM and SIGHUP that raise Stopped; the ones replaced, to put back
    (none off the main thread, where Python allows no handler)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        raise Stopped(signal.Signals(signum).name)

    before = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            before[sig] = signal.signal(sig, stop)
    return before
