"""The Hopper path with what fits from QuACK's gated GEMM (opt-in: "hopper-epi").

docs/kernel_lab.md, "QuACK's gated GEMM against ours, read from its source", says what each
change is for. Same main loop as hopper.py's; what differs is after it: the tile order, the
tanh and how the result leaves (in column slices from a smaller shared-memory buffer).
"""

import triton
import triton.language as tl

from modules.geglu.hopper import gate_up_tile
from modules.geglu.shared import (
    gate_up_halves,
    geglu,
    geglu_hardware_tanh,
    tile_coordinates_along,
)


@triton.jit
def fused_gate_up_geglu_tma_epi_kernel(
    x_ptr,  # [M, K], rows 16-byte aligned
    w_ptr,  # [N_PACKED, K] gate and up, packed
    out_ptr,  # [M, HIDDEN]
    M,
    K,
    HIDDEN,
    N_PACKED,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    FLATTEN: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    ALONG_N: tl.constexpr,  # groups of GROUP_M column blocks instead of row blocks
    EPI_SPLIT: tl.constexpr,  # 1 or 2 stores per tile, HALF // EPI_SPLIT columns each
    FAST_TANH: tl.constexpr,  # tanh.approx.f32 in the epilogue (geglu_hardware_tanh)
):
    HALF: tl.constexpr = BLOCK_N // 2
    SLICE: tl.constexpr = HALF // EPI_SPLIT
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N_PACKED, K], [K, 1], [BLOCK_N, BLOCK_K])
    # The store stages through shared memory one box at a time: a box of SLICE columns needs
    # 1 / EPI_SPLIT of the buffer, which is what can make room for one more K stage.
    out_desc = tl.make_tensor_descriptor(out_ptr, [M, HIDDEN], [HIDDEN, 1], [BLOCK_M, SLICE])

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(HIDDEN, HALF)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_id_c = tl.program_id(0) - tl.num_programs(0)
    for tile_id in tl.range(
        tl.program_id(0),
        num_tiles,
        tl.num_programs(0),
        flatten=FLATTEN,
        warp_specialize=WARP_SPECIALIZE,
    ):
        pid_m, pid_n = tile_coordinates_along(tile_id, num_pid_m, num_pid_n, GROUP_M, ALONG_N)
        acc = gate_up_tile(x_desc, w_desc, pid_m, pid_n, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K)

        tile_id_c += tl.num_programs(0)
        pid_m, pid_n = tile_coordinates_along(tile_id_c, num_pid_m, num_pid_n, GROUP_M, ALONG_N)
        if FAST_TANH:
            m = geglu_hardware_tanh(acc, HALF).to(out_ptr.dtype.element_ty)
        else:
            m = geglu(acc, HALF).to(out_ptr.dtype.element_ty)
        if EPI_SPLIT == 2:
            left, right = gate_up_halves(m, SLICE)
            out_desc.store([pid_m * BLOCK_M, pid_n * HALF], left)
            out_desc.store([pid_m * BLOCK_M, pid_n * HALF + SLICE], right)
        else:
            out_desc.store([pid_m * BLOCK_M, pid_n * HALF], m)
