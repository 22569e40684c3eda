"""Correct before fast: compare a variant's output with a float32 plain-PyTorch reference."""

from __future__ import annotations

import torch

# Relative-error budgets by dtype. bf16 keeps 8 mantissa bits (eps 7.8e-3): a GEMM's output
# rounded to bf16 lands around 3e-3 from float32, so 2e-2 leaves room without hiding a real bug
# (a wrong activation or a missing bias is off by 1e-1 or more). fp16 has 11 bits (eps 9.8e-4).
# float32 on a GPU may use TF32-free cuBLAS kernels whose sums reorder: 1e-4 is generous.
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}


class MismatchError(Exception):
    """The variant does not compute the reference function: profiling it would teach nothing."""


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 on the CPU; NaN or Inf anywhere counts as infinite."""
    out64, ref64 = out.detach().double().cpu(), ref.detach().double().cpu()
    if out64.shape != ref64.shape:
        raise MismatchError(f"output shape {tuple(out64.shape)} != reference {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all():
        return float("inf")
    return float((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30))


def against_reference(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Print the relative error against the float32 reference; raise if over the dtype's budget."""
    err = relative_error(out, ref)
    tol = TOLERANCE[dtype]
    verdict = "ok" if err <= tol else "MISMATCH"
    print(
        f"correctness: relative error vs float32 reference {err:.2e} "
        f"(tolerance {tol:.0e} for {str(dtype).removeprefix('torch.')}): {verdict}"
    )
    if err > tol:
        raise MismatchError(f"relative error {err:.2e} is over {tol:.0e}")
    return err
