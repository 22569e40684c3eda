"""Bad input: one clear line on stderr, exit code 2, and no trace or table left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from common import check, outputs
from tests.helpers import ROOT, run_script

BAD = [
    ("02_linear", ["--batch", "0"], "--batch: must be greater than 0"),
    ("02_linear", ["--in_dim", "-4"], "--in_dim/--in-dim: must be greater than 0"),
    ("03_simple_mlp", ["--hidden", "big"], "--hidden: expected a whole number"),
    ("01_matmul_add", ["--dtype", "fp8"], "invalid choice: 'fp8'"),
    ("01_matmul_add", ["--sise", "64"], "unrecognized arguments: --sise"),
    ("01_matmul_add", ["--size", "2000000"], "choose smaller sizes"),
    ("03_simple_mlp", ["--active", "0"], "--active: must be at least 1"),
    ("02_linear", ["--active", "1000000"], "must be at most 10000, got 1000000 (every recorded"),
    ("02_linear", ["--wait", "5000"], "--wait: must be at most 1000"),
    ("02_linear", ["--seed", str(2**64)], "--seed: must be at most 18446744073709551615"),
    ("02_linear", ["--seed", str(-(2**63) - 1)], "--seed: must be at least 0"),
    ("02_linear", ["--traces-dir", ""], "--traces-dir/--traces_dir: is empty"),
    ("02_linear", ["--bucket", ""], "is not a bucket name"),
    ("02_linear", ["--bucket", "no spaces allowed"], "is not a bucket name"),
]


@pytest.mark.parametrize(("script", "argv", "message"), BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(script, argv, message, tmp_path, capsys):
    rc = run_script(script, *argv, "--traces-dir", str(tmp_path))
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_cuda_without_a_gpu_is_refused(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert run_script("02_linear", "--traces-dir", str(tmp_path), device="cuda") == 2
    assert capsys.readouterr().err.strip() == (
        "error: --device cuda was asked for, but PyTorch sees no CUDA GPU here"
    )
    assert not list(tmp_path.rglob("*"))


def test_unwritable_traces_folder_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the traces folder should be")
    assert run_script("02_linear", "--traces-dir", str(blocker)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write to") and "is not a folder" in err
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_liger_script_on_a_cpu_says_so_and_writes_nothing(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run(
        [sys.executable, "03_kernels_mlp.py", "--traces-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "needs a CUDA GPU" in proc.stderr
    assert proc.stdout == ""
    assert not list(tmp_path.rglob("*"))


@pytest.mark.slow
def test_real_process_exit_code_and_single_stderr_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "02_linear.py", "--batch", "-1"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "02_linear.py: error: argument --batch: must be greater than 0, got -1 (see --help)"
    ]


def test_failure_while_writing_leaves_no_partial_file(tmp_path, monkeypatch):
    def export_then_crash(self, path):
        with open(path, "w") as f:
            f.write('{"traceEvents": [')  # half a trace, as a crash mid-export would leave
        raise OSError("disk full")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_then_crash)
    with pytest.raises(OSError, match="disk full"):
        run_script("02_linear", "--batch", "4", "--traces-dir", str(tmp_path))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_publishing_puts_all_files_in_place_or_none(tmp_path):
    a, b = tmp_path / "new" / "t.json.gz", tmp_path / "new" / "t.txt"
    with outputs.publishing(a, b) as (ta, tb):
        assert ta.name == "t.json.gz"  # torch picks gzip by the suffix
        ta.write_text("trace")
        tb.write_text("table")
    assert a.read_text() == "trace" and b.read_text() == "table"
    assert sorted(p.name for p in a.parent.iterdir()) == ["t.json.gz", "t.txt"]


def test_wrong_output_fails_the_correctness_check():
    ref = torch.randn(64, 64)
    close = (ref.to(torch.bfloat16)).float()
    assert check.against_reference(close, ref, torch.bfloat16) < 1e-2
    with pytest.raises(check.MismatchError):
        check.against_reference(close * 1.1, ref, torch.bfloat16)  # a 10% error must not pass
    close[0, 0] = float("nan")
    with pytest.raises(check.MismatchError):
        check.against_reference(close, ref, torch.bfloat16)


@pytest.fixture(scope="module")
def bf16_gemm():
    """A real bf16 GEMM at the MLP lessons' output shape ([8192, 768], K = 768) and its float32
    reference: what a correct lesson output looks like."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 768, generator=gen).bfloat16()
    w = (torch.randn(768, 768, generator=gen) / 768**0.5).bfloat16()
    return x @ w, x.float() @ w.float()


@pytest.mark.slow  # a [8192, 768] bf16 GEMM on the CPU and its check: ~2 s on two busy cores
def test_a_correct_bf16_gemm_passes_both_checks(bf16_gemm):
    out, ref = bf16_gemm
    assert check.against_reference(out, ref, torch.bfloat16) < check.TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[100].copy_(torch.randn(t.shape[1]).bfloat16()),  # one row of garbage
        lambda t: t[:8].zero_(),  # eight rows never written
        lambda t: t[:, 5].mul_(1.5),  # one wrong column (a wrong bias entry)
    ],
    ids=["one wrong row", "eight zeroed rows", "one wrong column"],
)
@pytest.mark.slow  # each check of [8192, 768] outputs: ~1.5 s on two busy cores
def test_a_few_wrong_rows_fail_even_when_the_norm_hides_them(bf16_gemm, damage):
    out, ref = bf16_gemm
    bad = out.clone()
    damage(bad)
    with pytest.raises(check.MismatchError):
        check.against_reference(bad, ref, torch.bfloat16)


@pytest.mark.parametrize(
    "err",
    [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                                 "allocate 1099511627776 bytes. Error code 12")],
    ids=["MemoryError", "torch's CPU allocator"],
)  # fmt: skip
def test_running_out_of_memory_is_one_line_exit_2(err, capsys):
    """Whatever runs out of the machine's memory (a size too large for it), through the one
    runner: one line, exit 2, no traceback."""
    from tracereader import run

    def main():
        raise err

    assert run(main) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("error: out of memory on the CPU") and "ask for less" in out.err
