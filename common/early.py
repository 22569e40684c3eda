"""A lesson's --help, and its refusal on a machine with no GPU, answered before torch loads.

A lesson imports torch (and some Triton, Inductor) before argparse can see its flags: 6 to 20 s
on two busy cores, only to print its help, or to say that it needs a GPU. Both answers are
known in advance: common/lesson_help.json holds them, written by the lessons' own code
(`uv run python -m tools.dev.lesson_help --write`, which imports every lesson and records what
its parser prints and what its refusal says), and common/startup.py, which every lesson imports
first, asks `serve()` here before the lesson goes on to import torch.

An entry is served only while it is current: its digest, the SHA-256 of the bytes of the
lesson, every .py file under common/, tracereader/commandline.py (the parser) and
tracereader/trace/model.py (--dtype's names), must match the files on
disk. (The text is the Python of the snapshot's: 3.11, CI's. Another Python's argparse may lay
out a flag with two spellings differently, 3.13 does; the words are the same, so it is served
there too rather than costing that user torch's import.) A
lesson or a flag edited since the snapshot falls through, silently, to the lesson's own
(slow, always right) path; tests/test_lesson_help.py holds the committed snapshot current.

--help: served where it is the only argument (`-h` or `--help`), the way it is asked. With
other arguments argparse may answer otherwise (`--batch -h` is a missing value, not a request
for help), so the lesson's own parser answers those.

The refusal: served where the lesson refuses on a machine without a GPU, it was run without
arguments (with some, a flag argparse refuses must be named first, and 03_fused_mlp's
--kernel gluon and --proton have their own lines), no CUDA or ROCm GPU may be here (read from
what the drivers put in /dev and /proc and whether a CUDA driver library is installed, no
torch), and its `unless_env` variable is not set (TRITON_INTERPRET runs 03_fused_mlp's kernel
on the CPU).

Never under torchrun (its ranks have their own rules for who speaks), nor with
PROFILING_PYTORCH_NO_EARLY=1 (the writer and the tests use it to reach the lesson's own path).
Nothing here imports torch, or anything of the project: it runs before everything else.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: the lessons are at its root
SNAPSHOT = "common/lesson_help.json"  # under ROOT
OFF = "PROFILING_PYTORCH_NO_EARLY"  # set (not "0"): always the lesson's own path
HELP_FLAGS = ("-h", "--help")
PARSER = "tracereader/commandline.py"  # the Parser every lesson's is, under ROOT
DTYPES = "tracereader/trace/model.py"  # --dtype's choices (cli.DTYPES), under ROOT
OTHER_NODES = ("kfd", "dxg", "nvhost-ctrl", "nvmap")  # ROCm, WSL, Jetson (nvgpu)
DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
               "/usr/lib/wsl/lib", "/usr/local/nvidia/lib64")  # fmt: skip


def sources(lesson: Path) -> list[Path]:
    """The files a lesson's flags and help come from, in the digest's order."""
    return [lesson, *sorted((ROOT / "common").rglob("*.py")), ROOT / PARSER, ROOT / DTYPES]


def digest(lesson: Path) -> str:
    """What the snapshot's entry for `lesson` was written from (OSError where a file is gone)."""
    sha = hashlib.sha256()
    for path in sources(lesson):
        # CRLF as LF: a Windows checkout's line endings change no flag
        data = path.read_bytes().replace(b"\r\n", b"\n")
        sha.update(f"{path.relative_to(ROOT).as_posix()} {len(data)}\n".encode())
        sha.update(data)
    return sha.hexdigest()


def asks_for_help(argv: list[str]) -> bool:
    return len(argv) == 1 and argv[0] in HELP_FLAGS


def gpu_visible() -> bool:
    """Whether a CUDA or ROCm device may be here, without torch; True where unsure, which sends
    the lesson down its own path (where torch decides)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False  # the user hid every device from CUDA
    if sys.platform == "darwin":
        return False  # PyTorch has no CUDA build for macOS
    if not sys.platform.startswith("linux"):
        return True  # Windows: the driver leaves nothing to read without torch
    dev = Path("/dev")
    if any(dev.glob("nvidia[0-9]*")) or any((dev / n).exists() for n in OTHER_NODES):
        return True  # NVIDIA's device nodes, ROCm's, WSL's GPU bridge, a Jetson's
    with suppress(OSError):
        if any(Path("/proc/driver/nvidia/gpus").iterdir()):
            return True
    # A CUDA driver installed whose nodes are not there yet (nvidia-modprobe makes them on
    # first use): unsure, so the lesson's own path decides
    return any(Path(d, "libcuda.so.1").exists() for d in DRIVER_DIRS)


def snapshot_entry(name: str) -> dict | None:
    """The snapshot's entry for the lesson `name` as written, None where there is none."""
    with suppress(OSError, ValueError, KeyError, TypeError):
        entry = json.loads((ROOT / SNAPSHOT).read_text(encoding="utf-8"))["lessons"][name]
        if isinstance(entry, dict) and isinstance(entry.get("help"), list):
            return entry
    return None


def current(entry: dict, name: str) -> bool:
    """Whether the entry was written from the files on disk (its digest)."""
    with suppress(OSError, KeyError, TypeError):
        return entry["digest"] == digest(ROOT / name)
    return False


def refusal(entry: dict, argv: list[str]) -> tuple[int, str] | None:
    """The lesson's exit code and stderr line where it refuses on a machine without a GPU, for
    this argv and environment."""
    needs = entry.get("needs_gpu")
    if not needs or argv:
        return None
    if needs.get("unless_env") and os.environ.get(needs["unless_env"], ""):
        return None  # set to anything: the lesson's own path reads the value
    return needs["code"], needs["stderr"]


def answer(name: str, argv: list[str]) -> tuple[int, str, str] | None:
    """(exit code, "stdout" or "stderr", text) the lesson would give for argv; None: run it.
    A run that goes on costs a few stat calls at most: the files are hashed only where there
    is an answer to give."""
    if os.environ.get(OFF, "") not in ("", "0"):
        return None
    helping = asks_for_help(argv)
    if not helping and (argv or gpu_visible()):
        return None  # with arguments, or a GPU that may be here: the lesson's own path
    entry = snapshot_entry(name)
    if entry is None:
        return None
    if helping:
        said = 0, "stdout", "\n".join(entry["help"])  # stored a line per item, for its diffs
    else:
        refused = refusal(entry, argv)
        said = None if refused is None else (refused[0], "stderr", refused[1] + "\n")
    return said if said is not None and current(entry, name) else None


def serve(name: str, argv: list[str]) -> None:
    """Answer for the lesson `name` and end the process, where the snapshot can; else return."""
    said = answer(name, argv)
    if said is None:
        return
    code, where, text = said
    stream = getattr(sys, where)
    try:
        stream.write(text)
        stream.flush()
    except OSError:  # a closed pipe (`--help | head -1`): the rest goes nowhere, silently
        with suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    raise SystemExit(code)
