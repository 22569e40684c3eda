"""A simple HBM traffic and FLOP model: what each kernel of a variant must at least move and do.

The primitives live here; each lesson writes its own model from them, beside its EXPECT,
because the model is part of the guess.

Rules (the minimum, assuming nothing stays in cache between kernels):
- a GEMM reads A [M, K] and B [K, N] once and writes C [M, N] once, plus a bias [N] if it adds
  one, plus C read back if it accumulates onto it (beta = 1, the `badd` epilogue);
- an elementwise kernel reads each input once and writes its output once;
- a copy reads and writes its tensor once;
- a batched GEMM is `batch` independent GEMMs in one launch;
- a fused attention kernel reads q, k, v once and writes its output once: the [seq, seq] scores
  live in on-chip memory and never reach HBM.
The floor of a kernel is the larger of FLOPs / matrix rate and bytes / memory bandwidth, the
matrix rate being the ceiling of the precision its FLOPs run in (`--bench` resolves it from `elt`,
torch's TF32 setting and the kernel's name in the trace). A GEMM keeps its shape, so that the
ceiling is also measured at the lesson's own shapes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    label: str
    cls: str  # "gemm", "elementwise", "aten", "memcpy" or "attention": the trace's kernel classes
    flops: int
    bytes: int
    elt: int = 0  # bytes per element of the operands its FLOPs read (0: no FLOPs)
    shape: tuple[int, int, int, int] | None = None  # a GEMM's (batch, m, k, n)

    def floor_s(self, *, flops_per_s: float, bytes_per_s: float) -> tuple[float, str]:
        """(seconds, what bounds it): the time no implementation can beat."""
        compute = self.flops / flops_per_s
        memory = self.bytes / bytes_per_s
        return (compute, "matrix") if compute >= memory else (memory, "memory")


def gemm(
    label: str, m: int, k: int, n: int, elt: int, *, bias: bool = False, accumulate: bool = False
) -> Kernel:
    moved = m * k + k * n + m * n + (n if bias else 0) + (m * n if accumulate else 0)
    return Kernel(label, "gemm", 2 * m * k * n, moved * elt, elt, (1, m, k, n))


def batched_gemm(label: str, batch: int, m: int, k: int, n: int, elt: int) -> Kernel:
    """`batch` products [m, k] x [k, n] in one launch (torch.bmm, or matmul on 3-D and up)."""
    one = gemm(label, m, k, n, elt)
    return Kernel(label, "gemm", batch * one.flops, batch * one.bytes, elt, (batch, m, k, n))


def elementwise(
    label: str, numel: int, elt: int, *, reads: int, broadcast_bytes: int = 0
) -> Kernel:
    """`reads` inputs of `numel` elements and one output; `broadcast_bytes`: a small operand
    broadcast over the others (a [seq, seq] mask over [batch, heads, seq, seq] scores), read
    from HBM once because it stays in cache."""
    return Kernel(label, "elementwise", 0, numel * elt * (reads + 1) + broadcast_bytes)


def convert(label: str, numel: int, src_elt: int, dst_elt: int) -> Kernel:
    """A dtype cast (bf16 -> float32 and back): reads one width, writes the other."""
    return Kernel(label, "elementwise", 0, numel * (src_elt + dst_elt))


def rowwise(label: str, numel: int, elt: int, *, cls: str = "aten") -> Kernel:
    """A row-wise reduction that writes a full-size output, e.g. softmax: reads its input once,
    writes its output once (one row fits on chip). ATen's softmax kernel is class "aten"."""
    return Kernel(label, cls, 0, 2 * numel * elt)


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


def fused_attention(
    label: str, batch_heads: int, seq: int, head_dim: int, elt: int, *, causal: bool
) -> Kernel:
    """One fused attention kernel (FlashAttention, memory-efficient, cuDNN): q, k, v read once,
    the output written once. FLOPs: q @ k^T and attn @ v are 2 * seq * seq * head_dim each per
    head; a causal kernel skips the key blocks above the diagonal, so it does about half."""
    flops = 2 * 2 * batch_heads * seq * seq * head_dim
    return Kernel(
        label,
        "attention",
        flops // 2 if causal else flops,
        4 * batch_heads * seq * head_dim * elt,
        elt,
    )


def total(kernels: list[Kernel]) -> tuple[int, int]:
    return sum(k.flops for k in kernels), sum(k.bytes for k in kernels)
