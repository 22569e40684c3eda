"""Helpers the tests share: load a numbered script, run it in-process, read its trace."""

from __future__ import annotations

import gzip
import importlib
import importlib.util
import json
import sys
from functools import cache
from pathlib import Path

from common import cli

ROOT = Path(__file__).resolve().parent.parent
# Other projects' real traces, never committed (../shared/external-traces/README.md): beside
# the checkout, or beside the folder of worktrees it sits in. Tests reading them skip without.
EXTERNAL_TRACES = next(
    (p / "shared/external-traces" for p in ROOT.parents[:2] if (p / "shared").is_dir()),
    ROOT.parent / "shared/external-traces",
)


# The torch.profiler calls the posts teach: every lesson shows them in its own source.
@cache
def load_script(name: str):
    """Import `01_matmul_add.py` and friends (their names are not valid module names); a tool
    by its module name (`tools.shape_sweep`)."""
    if name.startswith("tools."):
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *argv: str, device: str = "cpu") -> int:
    """Run a script's main as `python NAME.py ARGV` would, minus the interpreter start.

    Returns the exit code, including argparse's (which leaves through SystemExit). The CPU is
    the default device so that the tests read the same traces on a machine with a GPU."""
    try:
        return cli.run_main(load_script(name).main, [*argv, "--device", device])
    except SystemExit as exit_:
        return exit_.code


def read_trace(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def complete_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X"]


def steps(events: list[dict]) -> list[dict]:
    return sorted(
        (e for e in complete_events(events) if e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )


def inside(outer: dict, events: list[dict]) -> list[dict]:
    """Events on outer's thread that lie within its time span, in start order."""
    start, end = outer["ts"], outer["ts"] + outer["dur"]
    return sorted(
        (
            e
            for e in complete_events(events)
            if e is not outer
            and e.get("tid") == outer.get("tid")
            and start <= e["ts"]
            and e["ts"] + e["dur"] <= end
        ),
        key=lambda e: e["ts"],
    )


def run_kernel_loader(module: str, *args: str, env_extra: dict, tmp_path: Path) -> dict[str, str]:
    """Run `python -m tests.<module>` (a kernels-library loader) as a user would: offline, an
    empty Hub cache unless the test sets one, the caller's PYTHONPATH kept (wheels installed
    with --target live there). Returns its `KEY value` lines as a dict."""
    import os
    import subprocess

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LOCAL_KERNELS", "HF_HUB_OFFLINE", "HF_HUB_CACHE")
    }
    env.update(
        {
            "HF_HUB_CACHE": str(tmp_path / "empty-cache"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        },
        **env_extra,
    )
    proc = subprocess.run(
        [sys.executable, "-m", f"tests.{module}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def torchrun_in_process(monkeypatch, main, *argv: str, rank: int | None, world: int = 2):
    """torchrun.run_main(main) in this process as rank `rank` would run it (None: no
    torchrun): (exit code, what a quiet rank printed, captured instead of sent to /dev/null).
    The signal handlers it installs are put back."""
    import io
    import signal

    from common import torchrun

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    if rank is not None:  # what torchrun sets (the address is not used before the ranks meet)
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", "29500")
        monkeypatch.setenv(torchrun.TORCHRUN_ENV, "in-process")
    hidden, streams = io.StringIO(), (sys.stdout, sys.stderr)

    def quiet():
        sys.stdout = sys.stderr = hidden

    monkeypatch.setattr(torchrun, "_quiet", quiet)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return torchrun.run_main(main, list(argv)), hidden.getvalue()
    finally:
        sys.stdout, sys.stderr = streams
        for sig, handler in before.items():
            signal.signal(sig, handler)
