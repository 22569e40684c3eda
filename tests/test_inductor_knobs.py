"""tools/dev/kernel_lab/inductor_knobs.py: the GPU runs set Inductor options that have no
environment variable through it (generate_gpu.sh's INDUCTOR_KNOBS); a misspelt one must stop the
run, not be ignored and leave a run measured without it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def knobs(tmp_path, value: str):
    script = tmp_path / "show.py"
    script.write_text(
        "import sys\nimport torch._inductor.config as c\n"
        "print(c.combo_kernels, c.split_reductions, c.max_autotune_gemm_backends, sys.argv[1:])\n"
    )
    env = {**os.environ, "INDUCTOR_KNOBS": value}
    return subprocess.run(
        [sys.executable, "-m", "tools.dev.kernel_lab.inductor_knobs", str(script), "--flag", "x"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_knobs_reach_the_script_typed_with_its_arguments(tmp_path):
    proc = knobs(tmp_path, "combo_kernels=1,split_reductions=0,max_autotune_gemm_backends=ATEN")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False", "ATEN", "['--flag',", "'x']"]


def test_an_unknown_knob_stops_the_run_in_one_line(tmp_path):
    proc = knobs(tmp_path, "combo_kernel=1")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "error: torch._inductor.config has no combo_kernel"


def test_a_value_of_the_wrong_type_or_a_missing_script_stops_in_one_line(tmp_path):
    for knobs_value, script, said in (
        ("combo_kernels=yes please", None, "'yes please' is not 0, 1, true or false"),
        ("compile_threads=many", None, "compile_threads: invalid literal"),
        ("combo_kernels=1", tmp_path / "absent.py", "no script"),
    ):
        env = {**os.environ, "INDUCTOR_KNOBS": knobs_value}
        target = script or (tmp_path / "show.py")
        target.parent.mkdir(exist_ok=True)
        if script is None:
            target.write_text("print('ran')\n")
        proc = subprocess.run(
            [sys.executable, "-m", "tools.dev.kernel_lab.inductor_knobs", str(target)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and "ran" not in proc.stdout
        assert len(errors) == 1 and said in errors[0], proc.stderr
