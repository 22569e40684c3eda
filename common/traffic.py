"""A simple HBM traffic and FLOP model: what each kernel of a variant must at least move and do.

The primitives live here; each lesson writes its own model from them, beside its EXPECT,
because the model is part of the guess.

Rules (the minimum, assuming nothing stays in cache between kernels):
- a GEMM reads A [M, K] and B [K, N] once and writes C [M, N] once, plus a bias [N] if it adds
  one, plus C read back if it accumulates onto it (beta = 1, the `badd` epilogue);
- an elementwise kernel reads each input once and writes its output once;
- a copy reads and writes its tensor once.
The floor of a kernel is the larger of FLOPs / matrix rate and bytes / memory bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    label: str
    cls: str  # "gemm", "elementwise" or "memcpy": matched to the trace's kernel classes
    flops: int
    bytes: int

    def floor_s(self, *, flops_per_s: float, bytes_per_s: float) -> tuple[float, str]:
        """(seconds, what bounds it): the time no implementation can beat."""
        compute = self.flops / flops_per_s
        memory = self.bytes / bytes_per_s
        return (compute, "matrix") if compute >= memory else (memory, "memory")


def gemm(
    label: str, m: int, k: int, n: int, elt: int, *, bias: bool = False, accumulate: bool = False
) -> Kernel:
    moved = m * k + k * n + m * n + (n if bias else 0) + (m * n if accumulate else 0)
    return Kernel(label, "gemm", 2 * m * k * n, moved * elt)


def elementwise(label: str, numel: int, elt: int, *, reads: int) -> Kernel:
    return Kernel(label, "elementwise", 0, numel * elt * (reads + 1))


def copy(label: str, numel: int, elt: int) -> Kernel:
    return Kernel(label, "memcpy", 0, 2 * numel * elt)


def geglu_projections(tokens: int, dim: int, hidden: int, elt: int) -> list[Kernel]:
    """The three GEMMs every GeGLU MLP lesson runs: gate and up [tokens, dim] x [dim, hidden],
    down [tokens, hidden] x [hidden, dim]. Each lesson places its GeGLU work between them."""
    return [
        gemm("gate_proj GEMM", tokens, dim, hidden, elt),
        gemm("up_proj GEMM", tokens, dim, hidden, elt),
        gemm("down_proj GEMM", tokens, hidden, dim, elt),
    ]


def total(kernels: list[Kernel]) -> tuple[int, int]:
    return sum(k.flops for k in kernels), sum(k.bytes for k in kernels)
