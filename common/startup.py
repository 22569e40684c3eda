"""Ctrl-C (or SIGTERM, SIGHUP) while a lesson is still importing: one line and exit 130.

A lesson imports torch first (seconds on a busy CPU), and some import Inductor and sympy with
it (08_generate: ~10 s on two shared cores, through its Triton kernels' registration). A signal
then lands inside an import, before the lesson's main and its runner (common.cli.run_main,
common.torchrun.run_main) are there to catch it, and Python prints the import chain as a
traceback of tens of lines. So every lesson imports this module first, above torch
(`import common.startup`, marked `# isort: skip`: ruff would sort it below the third-party
imports).

Importing it, in a lesson run as a script (never in a process that imports a lesson, such as
the tests), makes SIGINT, SIGTERM and SIGHUP end the process at once with the runner's line:
nothing has been written yet, so there is nothing to clean up. A signal the process started
with ignored (nohup, a background job) stays ignored. The runners call `hand_over()` before the
lesson's main, which puts back what was replaced: from then on a signal unwinds the run, and
what it was writing is removed on the way out.

Under torchrun every rank gets the signal; rank 0 alone says so (the runner's rule).

Before that, it answers what needs no torch at all: the lesson's --help, and its refusal on a
machine without a GPU, from the committed snapshot where it is current (common/early.py).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from contextlib import suppress
from pathlib import Path

from common import early
from tracereader import Stopped, failure

ROOT = Path(__file__).resolve().parent.parent  # the repository: the lessons are at its root
LESSON = re.compile(r"\d\d_\w+\.py")  # 01_matmul_add.py ... 08_generate.py
STOP_SIGNALS = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"  # set by torchrun for every process it starts

_replaced: dict[int, object] = {}  # signal -> the handler guard() replaced, for hand_over()


def running_a_lesson() -> bool:
    """True in a process started as `python NN_name.py` (directly, or by torchrun)."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not LESSON.fullmatch(Path(path).name):
        return False
    return Path(path).resolve().parent == ROOT


def line(signum: int) -> str:
    """What the runner says for this signal (tracereader's failure, one source for the words)."""
    name = signal.Signals(signum).name
    stop = KeyboardInterrupt() if signum == signal.SIGINT else Stopped(name)
    return failure(stop)[1]


def _speaks() -> bool:
    """Rank 0, or no torchrun: the other ranks print nothing (common.torchrun's rule)."""
    return os.environ.get("RANK", "0").strip() in ("", "0") or not os.environ.get(TORCHRUN_ENV)


def _stop_now(signum, frame) -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    if _speaks():
        with suppress(OSError):
            os.write(2, f"error: {line(signum)}\n".encode())
    os._exit(130)


def guard() -> None:
    """In a lesson run as a script, stop the process at once on SIGINT, SIGTERM or SIGHUP, each
    where it has its default action (SIGINT: Python's KeyboardInterrupt); the main thread only,
    where Python allows a handler."""
    if not running_a_lesson() or threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        if sig not in _replaced and signal.getsignal(sig) is default:
            _replaced[sig] = signal.signal(sig, _stop_now)


def hand_over() -> None:
    """Put back the handlers guard() replaced (the runner installs its own next); nothing
    where guard() did not run."""
    if threading.current_thread() is not threading.main_thread():
        return
    while _replaced:
        sig, before = _replaced.popitem()
        signal.signal(sig, before)


def answer_early() -> None:
    """In a lesson run as a script (not under torchrun), end the process here with its --help
    or its refusal, where the snapshot holds them (common/early.py); else return."""
    if running_a_lesson() and not os.environ.get(TORCHRUN_ENV):
        early.serve(Path(sys.modules["__main__"].__file__).name, sys.argv[1:])


guard()  # first: a Ctrl-C while the snapshot is read is one line too
answer_early()
