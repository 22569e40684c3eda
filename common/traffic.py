"""A simple HBM traffic and FLOP model: what each kernel of a variant must at least move and do.

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


def matmul_add(n: int, elt: int, *, compiled: bool) -> list[Kernel]:
    """Part 1: eager is a GEMM then an add; compiled is addmm = copy b into out, GEMM onto it."""
    if compiled:
        return [
            copy("b -> out (DtoD)", n * n, elt),
            gemm("addmm GEMM (beta*C)", n, n, n, elt, accumulate=True),
        ]
    return [gemm("matmul GEMM", n, n, n, elt), elementwise("add", n * n, elt, reads=2)]


def linear(batch: int, in_dim: int, out_dim: int, elt: int) -> list[Kernel]:
    return [gemm("addmm GEMM (bias epilogue)", batch, in_dim, out_dim, elt, bias=True)]


def geglu_mlp(tokens: int, dim: int, hidden: int, elt: int, *, fused: bool) -> list[Kernel]:
    """Eager writes gelu(g) = h to HBM and the mul reads it back; a fused kernel does not."""
    gate = gemm("gate_proj GEMM", tokens, dim, hidden, elt)
    up = gemm("up_proj GEMM", tokens, dim, hidden, elt)
    down = gemm("down_proj GEMM", tokens, hidden, dim, elt)
    if fused:
        middle = [elementwise("fused gelu(g) * u", tokens * hidden, elt, reads=2)]
    else:
        middle = [
            elementwise("gelu(g)", tokens * hidden, elt, reads=1),
            elementwise("h * u", tokens * hidden, elt, reads=2),
        ]
    return [gate, up, *middle, down]


def total(kernels: list[Kernel]) -> tuple[int, int]:
    return sum(k.flops for k in kernels), sum(k.bytes for k in kernels)
