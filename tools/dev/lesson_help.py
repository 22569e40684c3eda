"""Write common/lesson_help.json: what common/early.py answers before a lesson imports torch.

For every lesson (NN_*.py at the root), imported here in this process: its --help, as its own
`parse(["--help"])` prints it (at cli.HELP_WIDTH columns, whatever the terminal), and for the
lessons in NEEDS_GPU the one stderr line and exit code of their run without a GPU, as their
own `main([])` says it through the lessons' runner (cli.run_main) with torch told there is no
GPU; each with the digest of the files it came from (common/early.py's `digest`: the lesson,
every .py file under common/, the parser and the model's dtype names). The help is stored a
line per list item, so that a change to a flag reads as a change to its lines in a diff.

Run it after changing a lesson's flags, its docstring or common/: tests/test_lesson_help.py
fails until the snapshot is current, and until then the lessons take the slow path (right, in
6-20 s). A flag's help that comes from elsewhere (08's presets from modules/llama.py) is outside
the digest; the test compares the help itself, so it catches that too.

    uv run python -m tools.dev.lesson_help            # the stale lessons, one a line (exit 1)
    uv run python -m tools.dev.lesson_help --write    # write the snapshot
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType
from unittest import mock

import torch

from common import cli, early, fused_kernel
from common.startup import LESSON
from tracereader import Parser, UsageError, run

ROOT = early.ROOT
# The lessons that refuse, run without arguments, where there is no GPU (common/early.py's
# `refusal`): unless_env, a variable whose being set lets the lesson run.
NEEDS_GPU = {
    "03_fused_mlp.py": {"unless_env": "TRITON_INTERPRET"},
    "03_kernels_mlp.py": {"unless_env": None},
    "04_d_kernels_attention.py": {"unless_env": None},
}
ABOUT = (
    "Written by `uv run python -m tools.dev.lesson_help --write`; served by common/early.py "
    "before a lesson imports torch. Do not edit by hand."
)


class NotRefused(Exception):
    """A lesson of NEEDS_GPU reached cli.resolve without a GPU: it would have run."""


def lesson_paths() -> list[Path]:
    return sorted(p for p in ROOT.glob("[0-9][0-9]_*.py") if LESSON.fullmatch(p.name))


def load(path: Path) -> ModuleType:
    """Import a lesson by its path (its name is not a valid module name), as the tests do."""
    spec = importlib.util.spec_from_file_location(f"lesson_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def help_text(module: ModuleType, name: str) -> str:
    """What `python NAME --help` prints on stdout: the lesson's parser, exiting 0."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            module.parse(["--help"])
    except SystemExit as done:
        if done.code not in (0, None):
            raise UsageError(f"{name}: --help exited with {done.code}") from None
    else:
        raise UsageError(f"{name}: parse(['--help']) returned instead of printing its help")
    text = out.getvalue()
    if str(ROOT) in text:  # a snapshot is committed: nothing of this checkout may be in it
        raise UsageError(f"{name}: its help names this checkout's path ({ROOT})")
    return text


def refused(module: ModuleType, name: str) -> dict:
    """The exit code and stderr line of `python NAME` where torch sees no GPU (and Triton's
    interpreter is off), through the lesson's own main and runner; nothing runs past them."""
    err = io.StringIO()
    with (
        mock.patch.object(torch.cuda, "is_available", return_value=False),
        mock.patch.object(fused_kernel, "INTERPRETING", False),
        mock.patch.object(cli, "resolve", side_effect=NotRefused(name)),
        contextlib.redirect_stderr(err),
    ):
        code = cli.run_main(module.main, [])
    lines = err.getvalue().splitlines()
    if code == 0 or len(lines) != 1:
        raise UsageError(f"{name}: without a GPU it said {lines!r} and exited {code}, not one line")
    return {"code": code, "stderr": lines[0]}


def entry(path: Path) -> dict:
    module = load(path)
    said = {"digest": early.digest(path), "help": help_text(module, path.name).split("\n")}
    if path.name in NEEDS_GPU:
        said["needs_gpu"] = {**refused(module, path.name), **NEEDS_GPU[path.name]}
    return said


def snapshot() -> dict:
    """The snapshot as this checkout's lessons give it, in the file's form."""
    return {"about": ABOUT, "lessons": {path.name: entry(path) for path in lesson_paths()}}


def stale(fresh: dict) -> list[str]:
    """The lessons whose committed entry differs from `fresh` (or is missing), and extra ones."""
    try:
        committed = json.loads((ROOT / early.SNAPSHOT).read_text(encoding="utf-8"))["lessons"]
    except (OSError, ValueError, KeyError):
        committed = {}
    names = sorted(set(committed) | set(fresh["lessons"]))
    return [n for n in names if committed.get(n) != fresh["lessons"].get(n)]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m tools.dev.lesson_help", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write {early.SNAPSHOT}")
    args = parser.parse_args(argv)
    fresh = snapshot()
    if args.write:
        text = json.dumps(fresh, indent=1, ensure_ascii=False) + "\n"
        (ROOT / early.SNAPSHOT).write_text(text, encoding="utf-8")
        print(f"wrote {early.SNAPSHOT}: {len(fresh['lessons'])} lessons")
        return 0
    behind = stale(fresh)
    for name in behind:
        print(f"stale: {name}")
    if behind:
        print("run `uv run python -m tools.dev.lesson_help --write`")
    return 1 if behind else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
