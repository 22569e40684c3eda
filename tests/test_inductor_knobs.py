"""tools/dev/kernel_lab/inductor_knobs.py: the GPU runs set Inductor options that have no
environment variable through it (generate_gpu.sh's INDUCTOR_KNOBS); a misspelt one must stop the
run, not be ignored and leave a run measured without it. In this process: main() reads its
argv and the environment, and runs the script by runpy, as `python -m` would."""

import sys

import pytest
import torch._inductor.config as config

from tools.dev.kernel_lab import inductor_knobs

SET = ("combo_kernels", "split_reductions", "max_autotune_gemm_backends")  # what the cases set


@pytest.fixture(autouse=True)
def inductor_untouched():
    """Inductor's settings as they were after each case: the knobs set here stay here."""
    with config.patch({name: getattr(config, name) for name in SET}):
        yield


def knobs(monkeypatch, capsys, value: str, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("INDUCTOR_KNOBS", value)
    monkeypatch.setattr(sys, "argv", ["inductor_knobs", *map(str, argv)])
    code = inductor_knobs.main()
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def show(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(
        "import sys\nimport torch._inductor.config as c\n"
        "print(c.combo_kernels, c.split_reductions, c.max_autotune_gemm_backends, sys.argv[1:])\n"
    )
    return script


def test_knobs_reach_the_script_typed_with_its_arguments(tmp_path, monkeypatch, capsys):
    value = "combo_kernels=1,split_reductions=0,max_autotune_gemm_backends=ATEN"
    code, out, err = knobs(monkeypatch, capsys, value, show(tmp_path), "--flag", "x")
    assert code == 0, err
    assert out.split() == ["True", "False", "ATEN", "['--flag',", "'x']"]


def test_an_unknown_knob_stops_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    code, out, err = knobs(monkeypatch, capsys, "combo_kernel=1", show(tmp_path))
    assert code == 2 and out == ""
    assert err.strip() == "error: torch._inductor.config has no combo_kernel"


def test_a_value_of_the_wrong_type_or_a_missing_script_stops_in_one_line(
    tmp_path, monkeypatch, capsys
):
    ran = tmp_path / "ran.py"
    ran.write_text("print('ran')\n")
    for knobs_value, script, said in (
        ("combo_kernels=yes please", ran, "'yes please' is not 0, 1, true or false"),
        ("compile_threads=many", ran, "compile_threads: invalid literal"),
        ("combo_kernels=1", tmp_path / "absent.py", "no script"),
    ):
        code, out, err = knobs(monkeypatch, capsys, knobs_value, script)
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "ran" not in out
        assert len(errors) == 1 and said in errors[0], err
