"""The Hopper path: TMA descriptors, a persistent grid (compute capability 9.x)."""

import triton
import triton.language as tl

from modules.geglu.shared import PROTON_EPILOGUE, PROTON_MAIN_LOOP, geglu, pl, tile_coordinates
from modules.triton_support import UPCAST_FOR_INTERPRETER


@triton.jit
def gate_up_tile(
    x_desc,
    w_desc,
    pid_m,
    pid_n,
    k_tiles,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One output tile's main loop through TMA: x's rows against the packed gate/up rows,
    accumulated in fp32 (both Hopper kernels; inlined into each)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_tiles):
        a = x_desc.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = w_desc.load([pid_n * BLOCK_N, k * BLOCK_K])
        if UPCAST_FOR_INTERPRETER:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b.T, acc)
    return acc


@triton.jit
def fused_gate_up_geglu_tma_kernel(
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
    PROTON: tl.constexpr = False,  # 03_fused_mlp.py --proton --kernel hopper: Proton's scopes
):
    HALF: tl.constexpr = BLOCK_N // 2
    # A descriptor tells the copy engine (TMA) a tensor's shape and strides: it moves whole
    # [rows, cols] boxes between HBM and shared memory without the threads computing addresses.
    # Box parts past the tensor's edge read as zeros and are not written, so there are no masks.
    x_desc = tl.make_tensor_descriptor(x_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, [N_PACKED, K], [K, 1], [BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, [M, HIDDEN], [HIDDEN, 1], [BLOCK_M, HALF])

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(HIDDEN, HALF)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # Persistent: the grid has one program per SM (or fewer), and each walks the tiles with a
    # stride of the grid's size. The epilogue recomputes its tile from a second counter, as
    # Triton's tutorial 09 does, so that the flattened loop (FLATTEN) can start the next tile's
    # loads during this tile's epilogue without the two sharing a value.
    tile_id_c = tl.program_id(0) - tl.num_programs(0)
    for tile_id in tl.range(
        tl.program_id(0),
        num_tiles,
        tl.num_programs(0),
        flatten=FLATTEN,
        warp_specialize=WARP_SPECIALIZE,
    ):
        pid_m, pid_n = tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M)
        if PROTON:
            pl.enter_scope(PROTON_MAIN_LOOP)
        acc = gate_up_tile(x_desc, w_desc, pid_m, pid_n, k_tiles, BLOCK_M, BLOCK_N, BLOCK_K)
        if PROTON:
            pl.exit_scope(PROTON_MAIN_LOOP)
            pl.enter_scope(PROTON_EPILOGUE)

        tile_id_c += tl.num_programs(0)
        pid_m, pid_n = tile_coordinates(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        m = geglu(acc, HALF)
        out_desc.store([pid_m * BLOCK_M, pid_n * HALF], m.to(out_ptr.dtype.element_ty))
        if PROTON:
            pl.exit_scope(PROTON_EPILOGUE)
