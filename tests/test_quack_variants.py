"""Where QuACK's gated GEMM is measured beside the fused MLP (tools/tune_fused_mlp.py,
tools/shape_sweep.py): listed only where quack.gemm_interface imports on an SM90 GPU. A stand-in
`quack.gemm_interface` in sys.modules plays the installed package (no GPU here to run it)."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from common import cli
from modules import quack_gemm
from tests.helpers import load_script

tuner = load_script("tools.tune_fused_mlp")
sweep = load_script("tools.shape_sweep")


@pytest.fixture
def quack_installed(monkeypatch):
    interface = ModuleType("quack.gemm_interface")
    interface.gemm_gated = lambda *args, **kwargs: None  # imported, never called here
    package = ModuleType("quack")
    package.__path__ = []
    package.gemm_interface = interface
    monkeypatch.setitem(sys.modules, "quack", package)
    monkeypatch.setitem(sys.modules, "quack.gemm_interface", interface)


def test_the_tuner_times_quack_untuned_and_tuned_on_an_sm90_gpu(quack_installed):
    variants = tuner.quack_variants(9)
    assert [tuned for *_, tuned in variants] == [False, True]
    kernels = [kernel for kernel, _, _ in variants]
    forwards = [forward for _, forward, _ in variants]
    assert len(set(kernels + forwards)) == 4  # four rows of their own in the round-robin
    assert all("tuned=False" in r for r in (kernels[0], forwards[0]))
    assert all("cuBLAS down" in f for f in forwards)


@pytest.mark.parametrize("major", [None, 8, 10])
def test_the_tuner_lists_no_quack_where_it_did_not_run(quack_installed, major):
    assert tuner.quack_variants(major) == []
    assert quack_gemm.unavailable(major)


def test_no_quack_without_the_package():
    if "quack" in sys.modules or _importable("quack"):
        pytest.skip("quack-kernels is installed here")
    assert tuner.quack_variants(9) == []
    assert "uv sync --extra hopper" in quack_gemm.unavailable(9)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_the_sweep_runs_quack_by_default_only_where_it_can(quack_installed, capsys):
    assert "quack" in sweep.choose_variants(None, on_gpu=True, major=9)
    assert "quack" not in sweep.choose_variants(None, on_gpu=True, major=8)
    assert "the quack variant is skipped: " in capsys.readouterr().out
    assert sweep.choose_variants(["quack"], on_gpu=True, major=9) == ["quack"]
    with pytest.raises(cli.UsageError, match="the quack variant cannot run here: .*SM8"):
        sweep.choose_variants(["quack"], on_gpu=True, major=8)


def test_the_sweep_counts_quacks_gated_gemm_as_the_fused_gate_up():
    name = "kernel_cutlass_kernel_quackepiloguefrontendGemmMod_linear_act_epi_object_at__sm90_0"
    assert sweep.role(name) == "fused"
    assert sweep.role("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopB_TNT") == "gemm"


def test_quack_is_left_out_of_an_fp32_run_with_its_reason(quack_installed):
    """Its gated GEMM takes bf16/fp16: an fp32 sweep skips it, and asking for it is refused."""
    sweep = load_script("tools.shape_sweep")
    assert "fp32" in quack_gemm.unavailable(9, "fp32")
    assert "quack" not in sweep.choose_variants(None, on_gpu=True, major=9, dtype="fp32")
    with pytest.raises(cli.UsageError, match="takes bf16 or fp16, not fp32"):
        sweep.choose_variants(["quack"], on_gpu=True, major=9, dtype="fp32")
