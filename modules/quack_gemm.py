"""QuACK's gated GEMM beside our fused MLP: gate/up + GeGLU in one CuTe-DSL GEMM (quack-kernels
0.6.4, `uv sync --extra hopper`), the same fusion as modules/geglu/fused.py's Triton kernel, with
cuBLAS
for down. Used wherever the fused MLP is compared: 03_fused_mlp.py --bench,
tools/tune_fused_mlp.py and 03_shape_sweep.py (named quack_gemm: `quack` is QuACK's package).

`gemm_gated(x, B, activation="geglu", concat_layout=("B",), store_preact=False)` takes the
weights as nn.Linear keeps them: B = torch.cat([w_gate, w_up]).T, [dim, 2*hidden], gate and up
concatenated along B's non-contiguous dim (concat_layout says so). `.contiguous()` on that
transpose computes the wrong thing (seen on an H100: max error 16 against the reference).
tuned=False runs its default configuration (first call: a JIT compile of seconds); tuned=True
autotunes on the first call of each shape (tens of seconds on an H100), then caches the winner.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tracereader.commandline import one_line

# Compute capabilities (major) whose gated GEMM ran for us: SM90 (H100, H200).
MAJORS = (9,)
TUNED = {"QuACK gemm_gated, tuned=False": False, "QuACK gemm_gated, tuned=True": True}


def unavailable(major: int | None, dtype: str = "bf16") -> str | None:
    """Why QuACK's gated GEMM cannot run (major: the GPU's compute capability, None: no GPU;
    dtype: the run's, by its short name), or None."""
    if major is None:
        return "QuACK's kernels are CUDA code (CuTe DSL) with no CPU build"
    if dtype not in ("bf16", "fp16"):
        return f"QuACK's gated GEMM takes bf16 or fp16, not {dtype}"
    if major not in MAJORS:
        return f"QuACK's gated GEMM was run here on SM90 only; this GPU is SM{major}x"
    try:
        from quack.gemm_interface import gemm_gated  # noqa: F401
    except Exception as err:  # ImportError, or the CuTe DSL's CUDA library missing
        return (
            f"quack.gemm_interface does not import ({one_line(err, 160)}); install "
            "quack-kernels: uv sync --extra hopper"
        )
    return None


def variants(major: int | None, dtype: str = "bf16") -> dict[str, bool]:
    """The QuACK variants to measure on this GPU ({what: tuned}); none where it cannot run."""
    return {} if unavailable(major, dtype) else dict(TUNED)


def gate_up_weight(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """B for gemm_gated: [dim, 2*hidden], a transposed view (keep it one: see above)."""
    return torch.cat([gate, up]).T


def gated(x: torch.Tensor, b: torch.Tensor, *, tuned: bool) -> torch.Tensor:
    """gelu_tanh(x @ gate.T) * (x @ up.T) in one GEMM; x is [tokens, dim]."""
    from quack.gemm_interface import gemm_gated

    _, postact = gemm_gated(
        x, b, activation="geglu", concat_layout=("B",), store_preact=False, tuned=tuned
    )
    return postact


class QuackGeGLUMLP(nn.Module):
    """GeGLUMLP's forward (modules/models.py) with gate/up + GeGLU in QuACK's gated GEMM, down by
    cuBLAS (F.linear), sharing the MLP's weights."""

    def __init__(self, mlp: nn.Module, *, tuned: bool):
        super().__init__()
        self.tuned = tuned
        self.hidden = mlp.gate_proj.weight.shape[0]
        self.gate_up = gate_up_weight(mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach())
        self.down = mlp.down_proj.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = gated(x.reshape(-1, x.shape[-1]), self.gate_up, tuned=self.tuned)
        return F.linear(m.view(*x.shape[:-1], self.hidden), self.down)
