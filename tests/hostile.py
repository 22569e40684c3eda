"""Hostile input against every entry point (issue 27): each case gets one line on stderr (or
none where the entry point says nothing), exit code 2 (130 for an interrupt), no traceback, no
file left behind, and an answer within a time bound. The cases are in tests/test_hostile_*.py,
by what they attack: the reader's commands (traces), the lessons, the tools; here is what
they share.

In-process calls of main() wherever the behaviour allows (the suite must stay fast on two
cores); a subprocess only where the exit path itself is the case (a signal, a closed stdout,
the interpreter's own exit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import ROOT

BOUND_S = 20  # every in-process case answers within this; a hang fails, never blocks CI


@pytest.fixture(autouse=True)
def time_bound():
    """A case that runs past BOUND_S fails (SIGALRM raises in the main thread)."""

    def late(signum, frame):
        raise TimeoutError(f"no answer within {BOUND_S} s: a hang")

    before = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, BOUND_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


# What stops a run: Ctrl-C, `kill`, a closed terminal. A test run may inherit some of them
# ignored (nohup ignores SIGHUP; a background job or a CI runner, SIGINT), and Python installs
# its KeyboardInterrupt only over SIGINT's default: a test that sends one sets them itself.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals() -> None:
    """A child's preexec_fn: the stop signals at their default actions, as in a terminal."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


@contextmanager
def signals_at_default() -> Iterator[None]:
    """The same in this process (SIGINT: Python's KeyboardInterrupt), put back after."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def outcome(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) as the command would run it: (exit code, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def said_once(code: int, err: str, *, want: int = 2, words: str = "") -> str:
    """The refusal's shape: exit code `want`, one line starting `error:`, no traceback."""
    assert "Traceback" not in err, err
    assert code == want, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert words in lines[0], lines[0]
    return lines[0]


def run_process(argv: list[str], *, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **kwargs.pop("env", {})}
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, *argv],
        cwd=kwargs.pop("cwd", ROOT),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        **kwargs,
    )


# --- traces made to order -------------------------------------------------------------------


def events(start: float = 0.0, collective: bool = False) -> list[dict]:
    """One profiler step on the CPU with an op in it (and an all-reduce, where asked)."""
    found = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": start, "dur": 100,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": start + 1, "dur": 20, "pid": 1,
         "tid": 1},
    ]  # fmt: skip
    if collective:
        found.append(
            {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": start + 30, "dur": 20,
             "pid": 1, "tid": 1}
        )  # fmt: skip
    return found


def trace_file(path: Path, info: dict | None = None, **kwargs) -> Path:
    doc = {"traceEvents": events(**kwargs)}
    if info is not None:
        doc["distributedInfo"] = info
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def rank_files(folder: Path, stem: str = "run", world: int = 2, **kwargs) -> Path:
    for rank in range(world):
        info = {"rank": rank, "world_size": world, "backend": "gloo"}
        trace_file(folder / f"{stem}_rank{rank}.json", info, collective=True, **kwargs)
    return folder / stem


def lesson(name: str, *argv: str, capsys) -> tuple[int, str]:
    from tests.helpers import run_script

    code = run_script(name, *argv)
    return code, capsys.readouterr().err
