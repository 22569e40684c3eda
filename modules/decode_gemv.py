"""A decode token's projections at batch 1, each one Triton GEMV with the work around it
inside: what 08_generate.py's `--gemv` runs (and the prompt's head, one row too). Read it beside
that lesson.

At one row a projection is a matrix-vector product: every weight read once, two FLOPs each, so
the whole job is streaming the weight at the memory's speed. Inductor's `--autotune` writes
these GEMVs as its own reductions and picks their tiles by timing candidates on the machine, one
launch at a time from Python: two kernels of one shape came out 18.8 and 46.8 us on one H100,
and the same command ran at 77-88% of the floor across six machines
(docs/lessons/08_generate.md, "Fourth pass"). Here the tiles are fixed per shape (measured once,
TILES below), and each projection carries what sits around it in the layer, so no small kernel
runs between them:

    qkv      RMSNorm(x) @ Wqkv^T         the norm's statistic computed by every program (x is
                                        one row: 8 KB from L2), applied as it is read
    o        heads @ Wo^T + x            the residual added before the store
    gate_up  RMSNorm(x) @ Wgu^T
    down     (SiLU(gate) * up) @ Wd^T + x
    head     RMSNorm(x) @ Wlm^T

Each program reads BLOCK_N rows of W along K (coalesced, evicted first: read once), keeps a
[BLOCK_N, BLOCK_K] float32 accumulator and sums it at the end. Registered as a custom op that
torch.compile keeps in its graph and a CUDA graph captures; on a CPU, TRITON_INTERPRET=1 runs
it in NumPy (the tests).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from modules.triton_support import INTERPRETING, traceable

OP = "profiling_pytorch::decode_gemv"
NONE, NORM, GATE = 0, 1, 2  # the prologue: x as it is, RMSNorm(x) * g, SiLU(gate) * up (x
# holds gate and up: its halves, or blocks of UNITS of each as --fused-gate packs them)
PROLOGUES = {"none": NONE, "norm": NORM, "gate": GATE}
# (BLOCK_N, BLOCK_K, num_warps) per (N, K): the fastest of 24 for the 8b preset's shapes on an
# H200 (tools/dev/kernel_lab/gemv_tiles.py, 2026-11-26; docs/lessons/08_generate.md, "Fourth
# pass"); any other shape takes DEFAULT_TILE, the fastest there for qkv and down.
DEFAULT_TILE = (8, 512, 4)
# Under Triton's interpreter each program runs in turn in NumPy, at a cost per program: taller
# tiles, so that the CPU's tests run a few programs per launch instead of dozens.
INTERPRETER_TILE = (64, 128, 4)
TILES = {(6144, 4096): (8, 512, 4), (4096, 4096): (2, 1024, 4), (28672, 4096): (16, 256, 4),
         (4096, 14336): (8, 512, 4), (128256, 4096): (16, 256, 4)}  # fmt: skip


@triton.jit
def decode_gemv_kernel(
    x_ptr, w_ptr, out_ptr, res_ptr, g_ptr, N, K, EPS,
    PROLOGUE: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, UNITS: tl.constexpr,
):  # fmt: skip
    """out[n] = sum_k x'[k] w[n, k] (+ res[n]) for this program's BLOCK_N rows n of w."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    scale = 1.0
    if PROLOGUE == 1:  # RMSNorm: the row's mean square first (x is small and stays in cache)
        squares = tl.zeros((BLOCK_K,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            xs = tl.load(x_ptr + k0 + cols, mask=k0 + cols < K, other=0.0).to(tl.float32)
            squares += xs * xs
        mean = tl.sum(squares, axis=0) / K + EPS  # torch.compile passes EPS as a float64:
        scale = 1.0 / tl.sqrt(mean.to(tl.float32))  # back to float32 before it spreads
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + cols
        inside = k < K
        if PROLOGUE == 2:  # x holds gate and up: SiLU(gate) * up
            if UNITS > 0:  # in blocks of UNITS gate values, then the same units' up values
                at = (k // UNITS) * (2 * UNITS) + k % UNITS
                up_at = at + UNITS
            else:  # every gate value, then every up value
                at = k
                up_at = K + k
            x = tl.load(x_ptr + at, mask=inside, other=0.0).to(tl.float32)
            up = tl.load(x_ptr + up_at, mask=inside, other=0.0).to(tl.float32)
            x = x / (1.0 + tl.exp(-x)) * up
        else:
            x = tl.load(x_ptr + k, mask=inside, other=0.0, eviction_policy="evict_last")
            x = x.to(tl.float32)
        if PROLOGUE == 1:
            x = x * scale * tl.load(g_ptr + k, mask=inside, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + rows[:, None] * K + k[None, :], mask=(rows[:, None] < N)
                    & inside[None, :], other=0.0, eviction_policy="evict_first")  # fmt: skip
        acc += w.to(tl.float32) * x[None, :]
    y = tl.sum(acc, axis=1)
    if RESIDUAL:
        y += tl.load(res_ptr + rows, mask=rows < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=rows < N)


def launch(x, w, prologue: str, g, eps: float, residual, units=0, tile=None, wrap=lambda k: k):
    """x [..., K] (or [..., 2K] for the gate: halves, or blocks of `units`) holding one row;
    w [N, K]; returns [..., N]."""
    n, k = w.shape
    width = 2 * k if prologue == "gate" else k
    if units and k % units:
        raise ValueError(f"decode_gemv: gate and up in blocks of {units} need K = {k} to be a "
                         "multiple of it")  # fmt: skip
    if x.numel() != width or not w.is_contiguous():
        raise ValueError(f"decode_gemv: one row of {width} values against a contiguous [N, {k}] "
                         f"weight, got x {tuple(x.shape)}, w {tuple(w.shape)} strides "
                         f"{w.stride()}")  # fmt: skip
    out = x.new_empty((*x.shape[:-1], n))
    block_n, block_k, warps = tile or TILES.get(
        (n, k), INTERPRETER_TILE if INTERPRETING else DEFAULT_TILE
    )
    wrap(decode_gemv_kernel)[(triton.cdiv(n, block_n),)](
        x, w, out, residual if residual is not None else out, g if g is not None else x, n, k,
        eps, PROLOGUE=PROLOGUES[prologue], RESIDUAL=residual is not None, BLOCK_N=block_n,
        BLOCK_K=block_k, UNITS=units, num_warps=warps,
    )  # fmt: skip
    return out


@triton_op(OP, mutates_args=())
def decode_gemv(
    x: torch.Tensor, w: torch.Tensor, prologue: str, g: torch.Tensor | None, eps: float,
    residual: torch.Tensor | None, units: int = 0,
) -> torch.Tensor:  # fmt: skip
    return launch(x.contiguous(), w, prologue, g, eps, residual, units, wrap=traceable)


@decode_gemv.register_fake
def _(x, w, prologue, g, eps, residual, units=0):
    return x.new_empty((*x.shape[:-1], w.shape[0]))


def gemv(x, w, norm=None, gate: bool = False, residual=None, units: int = 0) -> torch.Tensor:
    """One projection of one row: norm an nn.RMSNorm applied to x first, or gate: x is gate
    and up side by side (units 0), or in blocks of `units` of each (llama.MLP.units), SiLU(gate)
    * up; residual added to the result."""
    prologue = "norm" if norm is not None else "gate" if gate else "none"
    # nn.RMSNorm's eps=None: torch's rms_norm takes float32's (it computes in float32)
    eps = (norm.eps or torch.finfo(torch.float32).eps) if norm is not None else 0.0
    g = norm.weight if norm is not None else None
    return torch.ops.profiling_pytorch.decode_gemv(x, w, prologue, g, eps, residual, units)


def decode(model, x, positions, cache, mask) -> torch.Tensor:
    """llama.Llama's forward for one token of one sequence (x: its embedding, [1, 1, dim]),
    its projections fused (--fuse) and each a GEMV above; the attention between them as the
    model's own (rotary embedding, cache write, the model's attention)."""
    for i, layer in enumerate(model.model.layers):
        a, m = layer.self_attn, layer.mlp
        qkv = gemv(x, a.qkv_proj.weight, norm=layer.input_layernorm)
        heads = a.mix(*qkv.split(a.sizes, dim=-1), positions, model.rope, cache, i, mask,
                      model.attend)  # fmt: skip
        x = gemv(heads, a.o_proj.weight, residual=x)
        gate_up = gemv(x, m.gate_up_proj.weight, norm=layer.post_attention_layernorm)
        x = gemv(gate_up, m.down_proj.weight, gate=True, residual=x, units=m.units)
    return head(model, x[:, -1])


def head(model, x) -> torch.Tensor:
    """The logits of one position of one sequence (x [1, dim]): RMSNorm and the head in one
    GEMV (prefill's too, llama.Llama.head: cuBLAS's M = 1 GEMM takes longer on it)."""
    return gemv(x, model.lm_head.weight, norm=model.model.norm)
