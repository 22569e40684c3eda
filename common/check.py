"""Correct before fast: compare a variant's output with a float32 plain-PyTorch reference.

Two checks, both must pass. The norm check (‖out − ref‖ / ‖ref‖) is the overall error; it
averages over the whole output, so a few wrong rows hide in it (one wrong row of an
[8192, 768] output moves it by about 1/sqrt(8192)). The elementwise check holds every element
to |out − ref| <= atol + rtol * |ref|, like torch.testing.assert_close, with atol taken relative
to the root-mean-square of the element's row, so that it means the same at any scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Budget:
    norm: float  # the largest ‖out − ref‖ / ‖ref‖ that passes
    rtol: float  # per element, relative to |ref| there
    atol: float  # per element, relative to the root-mean-square of the reference's row
    why: str


# bf16 keeps 8 significant bits (eps 7.8e-3): an output rounded to bf16 is off by up to 3.9e-3
# of itself, and a module that rounds its intermediates too (g, u, gelu(g) * u in the MLP; the
# scores and probabilities in naive attention) adds a few such roundings: single elements then
# drift by up to 3e-2 of their row's root-mean-square (naive attention at [2, 8, 512, 64] on a
# CPU). A real bug (a wrong activation or bias, a wrong or unwritten row) is off by 1e-1 or
# more of it. fp16 has 11 bits (eps 9.8e-4). float32 on a GPU runs TF32-free kernels whose sums
# reorder: 1e-4 is generous.
BUDGETS = {
    torch.bfloat16: Budget(2e-2, 1.6e-2, 1e-1, "bf16 keeps 8 significant bits"),
    torch.float16: Budget(5e-3, 4e-3, 1.5e-2, "fp16 keeps 11 significant bits"),
    torch.float32: Budget(1e-4, 1e-4, 2e-4, "fp32: only the order of the sums differs"),
}
TOLERANCE = {dtype: budget.norm for dtype, budget in BUDGETS.items()}  # the norm budgets


class MismatchError(Exception):
    """The variant does not compute the reference function: profiling it would teach nothing."""


# Elements per slice of the comparison: its float64 temporaries stay at a few 10s of MB
# whatever the output's size (whole float64 copies once cost a large run 6x its own memory).
CHUNK = 1 << 22
WORKSPACE_BYTES = 3 * CHUNK * 8  # the comparison's float64 slices: out, ref, difference


def _slices(out: torch.Tensor, ref: torch.Tensor):
    if out.shape != ref.shape:
        raise MismatchError(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    for start in range(0, flat_out.numel(), CHUNK):
        o = flat_out[start : start + CHUNK].double()
        yield start, o, flat_ref[start : start + CHUNK].to(o.device).double()


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖, summed in float64 slice by slice on the tensors' own device;
    NaN or Inf anywhere in the output counts as infinite."""
    diff_sq = ref_sq = 0.0
    for _, o, r in _slices(out, ref):
        if not torch.isfinite(o).all():
            return float("inf")
        diff_sq += float((o - r).square().sum())
        ref_sq += float(r.square().sum())
    return math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-30)


@dataclass(frozen=True)
class Worst:
    share: float  # the worst element's |out − ref| over its allowance; <= 1 passes
    index: tuple[int, ...]  # where it is
    out: float
    ref: float


def worst_element(out: torch.Tensor, ref: torch.Tensor, budget: Budget) -> Worst:
    """The element furthest over (or least under) |out − ref| <= atol * rms + rtol * |ref|,
    where rms is the root-mean-square of the reference's row (its last dimension) that holds the
    element. Per row, because rows can live at different scales: an attention output's early
    rows average a few values and its late rows many, so they differ by an order of magnitude.
    A NaN or Inf in the output is infinitely over."""
    if out.shape != ref.shape:
        raise MismatchError(f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    width = out.shape[-1] if out.dim() else 1
    rows_out = out.detach().reshape(-1, width)
    rows_ref = ref.detach().reshape(-1, width)
    step = max(1, CHUNK // width)
    worst = Worst(-1.0, (), 0.0, 0.0)
    for start in range(0, rows_out.shape[0], step):
        o = rows_out[start : start + step].double()
        r = rows_ref[start : start + step].to(o.device).double()
        rms = r.square().mean(dim=1, keepdim=True).sqrt()
        share = (o - r).abs() / (budget.atol * rms + budget.rtol * r.abs() + 1e-30)
        share = torch.where(torch.isfinite(o), share, torch.full_like(share, math.inf)).reshape(-1)
        at = int(share.argmax())
        if float(share[at]) > worst.share:
            flat = start * width + at
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), out.shape))
            worst = Worst(
                float(share[at]), index, float(o.reshape(-1)[at]), float(r.reshape(-1)[at])
            )
    return worst


def against_reference(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Print both checks against the float32 reference; raise if either is over the dtype's
    budget. Returns the norm's relative error."""
    budget = BUDGETS[dtype]
    err = relative_error(out, ref)
    worst = worst_element(out, ref, budget)
    ok = err <= budget.norm and worst.share <= 1
    name = str(dtype).removeprefix("torch.")
    print(
        f"correctness: relative error vs float32 reference {err:.2e} (budget {budget.norm:.0e}), "
        f"worst element {worst.share:.0%} of its allowance: {'ok' if ok else 'MISMATCH'}"
    )
    print(
        f"  (elementwise |out - ref| <= {budget.atol:.0e} x rms(ref row) + "
        f"{budget.rtol:.1e} x |ref|,"
        f" worst at {list(worst.index)}; {name}: {budget.why})"
    )
    if err > budget.norm:
        raise MismatchError(f"relative error {err:.2e} is over {budget.norm:.0e}")
    if worst.share > 1:
        raise MismatchError(
            f"element {list(worst.index)} is {worst.out:.4g} where the reference has "
            f"{worst.ref:.4g} ({worst.share:.1f}x its allowance)"
        )
    return err
