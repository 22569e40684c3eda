"""A lesson's --help, and its refusal without a GPU, before torch loads (common/early.py): the
committed snapshot is what the lessons' own code says, a lesson run as a script answers from it
without importing torch, and an edited lesson falls back to its own (slow, right) path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from common import early
from tests.helpers import ROOT
from tools.dev import lesson_help

LESSONS = [path.name for path in lesson_help.lesson_paths()]
REGENERATE = (
    "run `uv run python -m tools.dev.lesson_help --write` and commit common/lesson_help.json"
)


def committed() -> dict:
    return json.loads((ROOT / early.SNAPSHOT).read_text(encoding="utf-8"))["lessons"]


@pytest.mark.parametrize("name", LESSONS)
def test_the_committed_snapshot_is_what_the_lesson_says(name):
    """Its help and refusal, made here by the lesson's own code, and its digest: all current."""
    fresh = lesson_help.entry(ROOT / name)
    entry = committed().get(name)
    assert entry is not None, f"{name} has no entry: {REGENERATE}"
    assert entry["help"] == fresh["help"], f"{name}'s help changed: {REGENERATE}"
    assert entry.get("needs_gpu") == fresh.get("needs_gpu"), f"{name}'s refusal: {REGENERATE}"
    assert entry["digest"] == fresh["digest"], f"{name} or common/ changed: {REGENERATE}"


def lesson_process(name: str, *argv: str, **env: str) -> subprocess.CompletedProcess:
    """`python -X importtime NAME ARGV` from the root; stderr without importtime's lines, and
    the modules imported (`imported`)."""
    environ = {k: v for k, v in os.environ.items() if k not in (early.OFF, "TRITON_INTERPRET")}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", name, *argv], cwd=ROOT, capture_output=True,
        text=True, env={**environ, **env}, timeout=300,
    )  # fmt: skip
    lines = proc.stderr.splitlines(keepends=True)
    proc.imported = [
        line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")
    ]
    proc.stderr = "".join(line for line in lines if not line.startswith("import time:"))
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("name", ["02_linear.py", "08_generate.py"])
def test_help_is_the_live_help_and_imports_no_torch(name):
    """At a terminal 40 columns wide too: the help is laid out at cli.HELP_WIDTH everywhere."""
    proc = lesson_process(name, "--help", COLUMNS="40")
    live = lesson_help.help_text(lesson_help.load(ROOT / name), name)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, live, "")
    assert [m for m in proc.imported if "torch" in m] == []
    assert "common.early" in proc.imported  # the answer came from the snapshot


@pytest.mark.slow
def test_a_gpu_lesson_without_a_gpu_refuses_as_its_own_path_does_without_torch():
    name = "03_kernels_mlp.py"
    early_ = lesson_process(name, CUDA_VISIBLE_DEVICES="")
    assert [m for m in early_.imported if "torch" in m] == []
    own = lesson_process(name, CUDA_VISIBLE_DEVICES="", **{early.OFF: "1"})
    assert "torch" in own.imported  # the lesson's own path: the reference for the line
    assert early_.returncode == own.returncode == 2
    assert early_.stderr == own.stderr == committed()[name]["needs_gpu"]["stderr"] + "\n"
    assert early_.stdout == own.stdout == ""
    # with a flag argparse refuses, the lesson's own parser names it (not the GPU refusal)
    bad_flag = lesson_process(name, "--bogus", CUDA_VISIBLE_DEVICES="-1")
    assert bad_flag.returncode == 2 and "--bogus" in bad_flag.stderr


def test_an_edited_lesson_or_common_file_falls_back_to_the_lessons_own_path(tmp_path, monkeypatch):
    """A copy of what the digest covers: served as committed, then not once a byte changes."""
    name = "02_linear.py"
    common = [str(p.relative_to(ROOT)) for p in (ROOT / "common").rglob("*.py")]
    for rel in [name, early.SNAPSHOT, early.PARSER, early.DTYPES, *common]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, tmp_path / rel)
    monkeypatch.setattr(early, "ROOT", tmp_path)
    monkeypatch.delenv(early.OFF, raising=False)
    code, where, text = early.answer(name, ["--help"])
    assert (code, where, text) == (0, "stdout", "\n".join(committed()[name]["help"]))
    for rel in (name, "common/shapes.py", early.PARSER):
        before = (tmp_path / rel).read_bytes()
        (tmp_path / rel).write_bytes(before + b"# edited\n")
        assert early.answer(name, ["--help"]) is None, f"an edit to {rel} was not noticed"
        (tmp_path / rel).write_bytes(before)
    assert early.answer(name, ["--help"]) is not None
    (tmp_path / early.SNAPSHOT).write_text("{not json")
    assert early.answer(name, ["--help"]) is None


def test_what_is_answered_early_and_what_is_left_to_the_lesson(monkeypatch):
    monkeypatch.delenv(early.OFF, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(early, "gpu_visible", lambda: False)
    assert early.answer("02_linear.py", ["--", "--help"]) is None  # an argument, not a flag
    assert early.answer("02_linear.py", ["--batch", "-h"]) is None  # a missing value: argparse's
    assert early.answer("02_linear.py", []) is None  # runs on a CPU: nothing to say early
    assert early.answer("03_fused_mlp.py", [])[0] == 2
    # with flags, the lesson's own path: 03_fused's line depends on them (--kernel gluon,
    # --proton), and a flag argparse refuses must be named before any GPU refusal
    assert early.answer("03_fused_mlp.py", ["--kernel", "gluon"]) is None
    assert early.answer("03_kernels_mlp.py", ["--kernel", "nonsense"]) is None
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs 03_fused on a CPU
    assert early.answer("03_fused_mlp.py", []) is None
    monkeypatch.setattr(early, "gpu_visible", lambda: True)
    assert early.answer("03_kernels_mlp.py", []) is None  # torch decides where a GPU may be
    assert early.answer("03_kernels_mlp.py", ["-h"])[0] == 0
    monkeypatch.setenv(early.OFF, "1")
    assert early.answer("03_kernels_mlp.py", ["-h"]) is None


@pytest.mark.parametrize("value", ["", "-1", " -1 "])
def test_cuda_visible_devices_that_hide_every_gpu_mean_none(value, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert not early.gpu_visible()


def test_an_installed_cuda_driver_leaves_the_answer_to_the_lesson(tmp_path, monkeypatch):
    """No device node yet (nvidia-modprobe makes them on first use) but libcuda there: unsure,
    so no early refusal; without it, none may be here."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(early.sys, "platform", "linux")
    monkeypatch.setattr(
        early, "Path", lambda *parts: tmp_path.joinpath(*(p.lstrip("/") for p in parts))
    )
    assert not early.gpu_visible()
    driver = tmp_path / "usr/lib64/libcuda.so.1"
    driver.parent.mkdir(parents=True)
    driver.touch()
    assert early.gpu_visible()
