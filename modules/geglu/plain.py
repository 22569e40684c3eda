"""The plain path: pointer loads with masks, one program per tile. It runs on any CUDA GPU
(Ampere's tensor cores) and in Triton's interpreter on a CPU."""

import triton
import triton.language as tl

from modules.geglu.shared import geglu, tile_coordinates
from modules.triton_support import UPCAST_FOR_INTERPRETER


@triton.jit
def fused_gate_up_geglu_kernel(
    x_ptr,  # [M, K] activations
    w_ptr,  # [2 * padded hidden, K] gate and up, packed (pack_gate_up)
    out_ptr,  # [M, HIDDEN] m = gelu_tanh(x @ gate^T) * (x @ up^T)
    M,
    K,
    HIDDEN,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # packed rows per tile: BLOCK_N // 2 gate, BLOCK_N // 2 up
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,  # "ieee" for float32 inputs (see CONFIGS), else unused
):
    HALF: tl.constexpr = BLOCK_N // 2
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(HIDDEN, HALF)
    pid_m, pid_n = tile_coordinates(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)

    # x's rows past M wrap around (as in Triton's tutorial 03). The loads stay in bounds without
    # a mask, and the store's mask drops those rows' results. The packed weight is padded to
    # whole tiles, so its BLOCK_N rows always exist; only K needs a mask.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # W^T, [K, N]

    # Main loop: one pass over x's row block serves gate and up at once.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST_FOR_INTERPRETER:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    # Epilogue: g and u exist only here, in registers; only their product is written.
    m = geglu(acc, HALF)
    offs_om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_on = pid_n * HALF + tl.arange(0, HALF)
    out_ptrs = out_ptr + offs_om[:, None] * stride_om + offs_on[None, :] * stride_on
    in_bounds = (offs_om[:, None] < M) & (offs_on[None, :] < HIDDEN)
    tl.store(out_ptrs, m.to(out_ptr.dtype.element_ty), mask=in_bounds)
