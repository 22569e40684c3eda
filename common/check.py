"""Correct before fast: compare a variant's output with a float32 plain-PyTorch reference."""

from __future__ import annotations

import math

import torch

# Relative-error budgets by dtype. bf16 keeps 8 mantissa bits (eps 7.8e-3): a GEMM's output
# rounded to bf16 lands around 3e-3 from float32, so 2e-2 leaves room without hiding a real bug
# (a wrong activation or a missing bias is off by 1e-1 or more). fp16 has 11 bits (eps 9.8e-4).
# float32 on a GPU may use TF32-free cuBLAS kernels whose sums reorder: 1e-4 is generous.
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3, torch.float32: 1e-4}


class MismatchError(Exception):
    """The variant does not compute the reference function: profiling it would teach nothing."""


# Elements per slice of the comparison: its float64 temporaries stay at a few 10s of MB
# whatever the output's size (whole float64 copies once cost a large run 6x its own memory).
CHUNK = 1 << 22
WORKSPACE_BYTES = 3 * CHUNK * 8  # the comparison's float64 slices: out, ref, difference


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖, summed in float64 slice by slice on the tensors' own device;
    NaN or Inf anywhere in the output counts as infinite."""
    if out.shape != ref.shape:
        raise MismatchError(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    diff_sq = ref_sq = 0.0
    for start in range(0, flat_out.numel(), CHUNK):
        o = flat_out[start : start + CHUNK].double()
        r = flat_ref[start : start + CHUNK].to(o.device).double()
        if not torch.isfinite(o).all():
            return float("inf")
        diff_sq += float((o - r).square().sum())
        ref_sq += float(r.square().sum())
    return math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-30)


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
