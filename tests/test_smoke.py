"""tools/dev/gpu_runs/smoke.py, the check to run before any GPU measurement reaches docs/: it must
catch what a human skimming 30 logs would miss."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tools.dev.gpu_runs import smoke


def test_a_clean_bench_passes_and_every_kind_of_untrustworthy_result_fails():
    clean = (
        "  achieved (one call): 601.3 TFLOP/s (78% of the matrix ceiling), 0.40 TB/s "
        "(13% of the copy ceiling)\n  floor: 7.2 us (compute-bound); one call / floor = 1.28\n"
        "    addmm GEMM (bias epilogue)    9.1 us   floor     7.2 us (compute, 1.0 MB)   x1.26\n"
    )
    assert smoke.problems(0, clean) == []
    assert smoke.problems(0, clean.replace("78% of the matrix", "116% of the matrix"))
    assert smoke.problems(0, clean.replace("x1.26", "x0.85"))
    assert smoke.problems(0, clean.replace("/ floor = 1.28", "/ floor = 0.93"))
    assert smoke.problems(0, clean + "  MISMATCH  3 gemm per step   seen: 4\n")
    assert smoke.problems(3, clean) == ["exit code 3"]


def test_the_plan_covers_every_lesson_and_a_cpu_plan_only_what_a_cpu_runs():
    lessons = {p.stem for p in ROOT.glob("0[0-9]_*.py")}
    on_gpu = {run.lesson for run in smoke.runs("tiny", on_gpu=True)}
    assert on_gpu == lessons
    on_cpu = {run.lesson for run in smoke.runs("tiny", on_gpu=False)}
    assert on_cpu == lessons - smoke.GPU_ONLY


@pytest.mark.slow
def test_a_cpu_smoke_run_reports_each_run_and_writes_its_logs(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tools.dev.gpu_runs.smoke", "--device", "cpu", "--only", "02_linear"]
        + ["--logs", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "smoke: 2 ok, 0 failed, 0 unavailable"
    logs = sorted(p.name for p in tmp_path.glob("*.log"))
    assert logs == ["01_02_linear.log", "02_02_linear.log"]
    assert "--compile" in (tmp_path / "02_02_linear.log").read_text().splitlines()[0]


@pytest.mark.slow
def test_unknown_lessons_are_refused_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.dev.gpu_runs.smoke"]
        + ["--device", "cpu", "--only", "02_lineer"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr == "error: --only names no lesson: 02_lineer\n"
