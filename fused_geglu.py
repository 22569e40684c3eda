"""Gate, up and the GeGLU in one Triton GEMM: the kernel that 03_fused_mlp.py profiles.

Read it beside that lesson, top to bottom: the epilogue (gelu_tanh, geglu: what happens to the
accumulator before anything is written), the plain kernel (pointer loads, one program per
tile: Ampere and Triton's interpreter), the Hopper kernel (TMA descriptors, a persistent
grid), their fixed configurations, the launch, the custom op that torch.compile sees through,
the packing of gate and up, and the module, FusedGeGLUMLP. Tools and tests import it by name.

    x [M, dim] @ packed [dim, 2 * hidden] -> (g, u) pairs in registers -> m = gelu_tanh(g) * u
"""

import warnings
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn
from torch.library import triton_op, wrap_triton

import gluon_proton
from common import cli
from models import GeGLUMLP

try:  # Proton's in-kernel scopes (03_fused_mlp.py --proton); None: Triton built without Proton
    from triton.profiler import language as pl
except ImportError:
    pl = None
# The hopper kernel's Proton scopes, named where gluon_proton.py reads them
PROTON_MAIN_LOOP = tl.constexpr(gluon_proton.MAIN_LOOP)
PROTON_EPILOGUE = tl.constexpr(gluon_proton.PLAIN_EPILOGUE)

OP = "profiling_pytorch::fused_gate_up_geglu"
GLUON_OP = "profiling_pytorch::gluon_gate_up"  # gluon's kernel, opaque to Inductor
# Triton reads TRITON_INTERPRET=1 when it is imported. Its kernels then run on the CPU in NumPy.
INTERPRETING = triton.knobs.runtime.interpret
# The interpreter keeps bf16 as raw 16-bit integers, and its tl.dot multiplies those bits
# (triton-lang/triton#11584). Interpreted kernels convert the operands to float32 first; on a
# GPU this constant is False and the compiler drops the branch.
UPCAST_FOR_INTERPRETER = tl.constexpr(INTERPRETING)
HARDWARE_TANH = tl.constexpr(not INTERPRETING)  # see tanh_hardware
if INTERPRETING:  # gelu_tanh lets exp2 overflow to inf on purpose; NumPy would warn every time
    warnings.filterwarnings("ignore", "overflow encountered in exp2", RuntimeWarning)
# What the first call's time is made of.
FIRST_CALL = (
    "Triton's interpreter compiles nothing"
    if INTERPRETING
    else "the kernel is compiled for this configuration and dtype, then cached in ~/.triton/cache"
)


# --- The epilogue: what happens to the accumulator before anything is written -----------------


@triton.jit
def gelu_tanh(g):
    """0.5 * g * (1 + tanh(z)), z = sqrt(2/pi) * (g + 0.044715 * g^3), in float32.

    1 + tanh(z) = 2 * sigmoid(2z) = 2 / (1 + exp(-2z)), so this is g / (1 + exp(-2z)): one
    exp2 (the hardware's own exponential: exp(y) = exp2(y * log2(e))) and one fast division
    instead of tanh's longer sequence. Large |g| is safe: exp2 goes to 0 or inf, and g / inf = 0.
    """
    minus_2z_log2e = g * (-2.0 * 0.7978845608028654 * 1.4426950408889634) * (1.0 + 0.044715 * g * g)
    return tl.fdiv(g, 1.0 + tl.exp2(minus_2z_log2e))  # ieee_rounding=False: the fast division


@triton.jit
def gate_up_halves(acc, HALF: tl.constexpr):
    """[BLOCK_M, 2 * HALF] -> its first HALF columns and its last HALF, as two tensors."""
    return tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, HALF)), (0, 2, 1)))


@triton.jit
def geglu(acc, HALF: tl.constexpr):
    """[BLOCK_M, 2 * HALF] accumulator -> gelu_tanh(gate) * up, [BLOCK_M, HALF], in float32.

    The packed weight puts HALF gate rows, then the HALF matching up rows, in every 2 * HALF
    rows (pack_gate_up), so columns j and HALF + j of the tile are the same hidden unit's g and
    u. The reshape and split only relabel registers: the pairs already sit in one thread.
    """
    gate, up = gate_up_halves(acc, HALF)
    return gelu_tanh(gate) * up


@triton.jit
def tanh_hardware(z):
    """tanh in one instruction (tanh.approx.f32, one special-function op, ~2^-11 relative error,
    far under bf16's 2^-8), where gelu_tanh spends two (exp2, then the division's reciprocal).
    Triton's interpreter cannot run inline assembly: there, the same tanh through exp2."""
    if HARDWARE_TANH:
        return tl.inline_asm_elementwise(
            "tanh.approx.f32 $0, $1;", "=f,f", [z], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return 2.0 / (1.0 + tl.exp2(z * (-2.0 * 1.4426950408889634))) - 1.0


@triton.jit
def geglu_hardware_tanh(acc, HALF: tl.constexpr):
    """geglu with gelu_tanh as QuACK's epilogue computes it: 0.5 * (g * tanh(z) + g), tanh by
    the hardware. [BLOCK_M, 2 * HALF] accumulator -> [BLOCK_M, HALF], in float32."""
    gate, up = gate_up_halves(acc, HALF)
    z = gate * (0.7978845608028654 + 0.7978845608028654 * 0.044715 * gate * gate)
    return 0.5 * (gate * tanh_hardware(z) + gate) * up


@triton.jit
def tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Tile number -> (row block, column block), GROUP_M row blocks at a time (Triton's tutorial
    03): consecutive tiles share x's rows and the weight's columns while they are in L2."""
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile_id // tiles_per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_group) % group_rows
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def tile_coordinates_along(
    tile_id, num_pid_m, num_pid_n, GROUP: tl.constexpr, ALONG_N: tl.constexpr
):
    """tile_coordinates, or with rows and columns swapped (ALONG_N): GROUP column blocks at a
    time, walking down the rows. QuACK's scheduler picks the latter unless N has more groups
    of tiles than M (it also reverses every other group, which this does not)."""
    if ALONG_N:
        pid_n, pid_m = tile_coordinates(tile_id, num_pid_n, num_pid_m, GROUP)
    else:
        pid_m, pid_n = tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP)
    return pid_m, pid_n


# --- The plain path: pointer loads with masks, one program per tile (Ampere, the interpreter) ----


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


# --- The Hopper path: TMA descriptors, a persistent grid (compute capability 9.x) -------------


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


# --- The Hopper path with what fits from QuACK's gated GEMM (opt-in: "hopper-epi") ----------
# docs/measurements.md, "QuACK's gated GEMM against ours, read from the source", says what each
# change is for. Same main loop as above; what differs is after it: the tile order, the tanh
# and how the result leaves (in column slices from a smaller shared-memory buffer).


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


# --- Configurations and the launch -----------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One kernel configuration. block_n counts packed rows: block_n // 2 gate, block_n // 2 up."""

    path: str  # "plain", "hopper", "hopper-epi" (HOPPER_PATHS) or "gluon" (gluon_geglu.py)
    block_m: int
    block_n: int
    block_k: int
    stages: int  # software pipelining depth: K tiles loading while one is multiplied
    warps: int
    group_m: int = 8
    persistent: bool = True  # hopper: one program per SM, else one per tile
    flatten: bool = True  # hopper: one flat loop over (tile, k): next loads overlap the epilogue
    warp_specialize: bool = False  # hopper: separate warps load, others multiply (Triton's own)
    per_sm: int = 1  # hopper, persistent: programs per SM (2: one's epilogue beside the other's
    # main loop, where both fit in shared memory and registers)
    along_n: bool = False  # hopper-epi: groups of group_m column blocks (QuACK's raster)
    epi_split: int = 1  # hopper-epi, gluon: stores per tile (2: half the epilogue's shared memory)
    fast_tanh: bool = False  # hopper-epi, gluon: tanh.approx.f32 in the GeGLU (QuACK's tanh)
    consumers: int = 1  # gluon: consumer partitions of `warps` warps (2: they take turns)
    activation: str = "gelu_tanh"  # gluon: "silu" gates as Llama's MLP does (SwiGLU)

    def describe(self) -> str:
        tile = f"{self.block_m}x{self.block_n}x{self.block_k}"
        text = f"{self.path} {tile} s{self.stages} w{self.warps} g{self.group_m}"
        if self.path in HOPPER_PATHS:
            text += "".join(
                f" {name}" if on else ""
                for name, on in (
                    ("persistent", self.persistent),
                    ("flatten", self.flatten),
                    ("ws", self.warp_specialize),
                    (f"{self.per_sm}/SM", self.per_sm != 1),
                    ("along-n", self.along_n),
                    (f"split{self.epi_split}", self.epi_split != 1),
                    ("tanh.approx", self.fast_tanh),
                )
            )
        if self.path == GLUON:
            text += f" {'pingpong' if self.consumers == 2 else 'cooperative'}"
            text += " along-n" * self.along_n + " tanh.approx" * self.fast_tanh
            text += f" split{self.epi_split}" * (self.epi_split != 1)
            text += f" {self.activation}" * (self.activation != "gelu_tanh")
        return text


HOPPER_PATHS = ("hopper", "hopper-epi")  # TMA descriptors and a persistent grid: SM90
GLUON = "gluon"  # gluon_geglu.py: warp-specialized, SM90 only, no interpreter
PATHS = (*HOPPER_PATHS, GLUON, "plain")


# One fixed configuration per path, no autotuning: the kernel compiles once per dtype (about a
# second, then cached on disk), and the packed weight's layout depends on block_n. Measured by
# tools/tune_fused_mlp.py on an H100 (torch 2.11, Triton 3.6, bf16, M=8192, dim 768, hidden
# 3072; do_bench medians, 2026-11-22; docs/measurements.md), against cuBLAS's 115-121 us for
# gate and up as one GEMM over the concatenated weight and 122-124 us as two:
CONFIGS = {
    # 121-124 us. One 128 x 256 accumulator (128 gate + 128 up columns) per tile, two
    # warpgroups, 176 KB of shared memory. 4 stages and warp specialization measured the same
    # within 2 us; 4 stages fill the shared memory to its last few KB, and Triton 3.6's Hopper
    # warp specialization failed to compile 128 x 128 tiles, so both stay off.
    "hopper": Config("hopper", 128, 256, 64, stages=3, warps=8),
    # 152-156 us on the H100 (no TMA, no persistent grid): Triton's tutorial 03's first CUDA
    # configuration, which fits the A100's shared memory (3 x 48 KB); not measured on an A100.
    "plain": Config("plain", 128, 256, 64, stages=3, warps=8),
    # Opt-in (SM90 only, never chosen by "auto"): the Hopper tile above with QuACK's tanh and
    # a split epilogue store, whose smaller buffer lets a 4th K stage fit (4 x 48 KB + 16 KB).
    # Measured 2026-11-24/25: its forward 2% faster than "hopper"'s at the post's shape on an
    # H100 and an H200, its kernel alone 1-3% slower at the Llama shape; both leave the tensor
    # pipe idle during the epilogue (docs/measurements.md, QuACK's gated GEMM, measured).
    "hopper-epi": Config(
        "hopper-epi", 128, 256, 64, stages=4, warps=8, epi_split=2, fast_tanh=True
    ),
    # SM90 only; --kernel gluon runs it ("auto" runs gluon-coop below on the GPUs of
    # GLUON_MEASURED_FASTER): gluon_geglu.py's kernel, two consumer warpgroups taking turns over
    # 128 x 128 tiles (64 gate + 64 up columns each, 128 accumulator registers a thread) fed by
    # a producer warp through 6 stages of 32 KB. H100 run 2: 124.1 us at the post's shape
    # ("hopper" 127.1), 3614.7 at the Llama shape (2777.5): the L2 bytes of 128-wide tiles.
    GLUON: Config(GLUON, 128, 128, 64, stages=6, warps=4, consumers=2),
    # The gluon configuration "auto" runs on an H100 and an H200 (GLUON_MEASURED_FASTER): one
    # consumer of 8 warps on 128 x 256 tiles, 4 stages, QuACK's tanh.approx. Faster than
    # "hopper" at both shapes on both GPUs, kernel and forward (2026-11-27; the post's shape
    # from CUDA graphs, the Llama one eager. H100 "AP": 115.9 against 126.3 us, 2676.4 against
    # 2795.1; H200 "AQ": 118.9 against 131.2, 2849.9 against 2868.8; docs/measurements.md).
    "gluon-coop": Config(GLUON, 128, 256, 64, stages=4, warps=8, fast_tanh=True),
    # Named for the tools (tools/dev/ncu_fused_mlp --configs gluon-fast); nothing chooses it:
    # the 128 x 128 pingpong with tanh.approx, its output stored a 128 x 32 box at a time, among
    # the fastest at the post's shape (H100 "AN": 110.6 us eager, 113.0 from CUDA graphs,
    # against QuACK's 110.4 and 110.6; 2026-11-27) and 5% behind QuACK at the Llama one.
    "gluon-fast": Config(
        GLUON, 128, 128, 64, stages=6, warps=4, consumers=2, fast_tanh=True, epi_split=2
    ),
    # 08_generate.py --fused-gate: a prompt's gate/up with Llama's SiLU gate (M = 512, K = 4096,
    # N = 2 x 14336). The fastest of 14 gluon configurations there with the GeGLU (H100,
    # 2026-11-26, CUDA graphs, L2 flushed): 181.4 us against cuBLAS's GEMM alone 179.3 and
    # the GEMM + Inductor's gate kernel 194.0; 128 x 256 tiles leave 448 tiles for 132 SMs.
    "gluon-silu": Config(
        GLUON, 128, 128, 64, stages=6, warps=4, consumers=2, fast_tanh=True, activation="silu"
    ),
    # float32: the dot runs in IEEE float32 on the CUDA cores, not as tf32 on the tensor cores.
    # tf32 keeps 10 mantissa bits and lands near 3e-4, over common/check.py's 1e-4 for float32.
    "plain-fp32": Config("plain", 64, 64, 32, stages=3, warps=4),
}


@cache
def sm_count(device: torch.device) -> int:
    """Programs of a persistent grid; on the interpreter, a few, so the tile loop still loops."""
    if device.type != "cuda":
        return 3
    return torch.cuda.get_device_properties(device).multi_processor_count


# GPUs (torch.cuda.get_device_name) on which a gluon configuration measured faster than
# "hopper", kernel and forward, at the post's and the Llama shape (tools/dev/gluon_gpu.sh), and
# that configuration (a key of CONFIGS): "auto" takes it there, nowhere else.
GLUON_MEASURED_FASTER: dict[str, str] = {
    # 2026-11-27, the kernel whose tiles no longer zero their accumulators (docs/measurements.md,
    # "Issue 29, 2026-11-27"): gluon-coop against "hopper", forwards (gate/up + GeGLU, cuBLAS's
    # down) from CUDA graphs at the post's shape and eager at the Llama shape. H100 "AP":
    # 176.6 against 189.1 us, 4112.0 against 4157.6 ("AN", the same H100 earlier: 4126.0
    # against 4175.0). H200 "AQ": 181.3 against 190.1, 4234.9 against 4279.8. The lesson's own
    # eager bench, a second run on each GPU (AS, AT): one call 5-6% faster at the post's shape,
    # queued level (H100) or 9% faster (H200); at that shape eager forwards wait on the host where
    # a gluon launch costs 125-170 us of dispatch (AP, AQ, the lesson's first runs).
    "NVIDIA H100 80GB HBM3": "gluon-coop",
    "NVIDIA H200": "gluon-coop",
}


@cache
def gluon(flag: str = "--kernel gluon"):
    """gluon_geglu, imported on first use: its import builds Gluon kernels, and a Triton
    without Gluon's Hopper API says so in one line (cli.UsageError, naming the flag that asked
    for it)."""
    try:
        import gluon_geglu
    except ImportError as err:
        raise cli.UsageError(f"{flag}: {err}") from None
    return gluon_geglu


@cache
def refuse_off_sm90(device: torch.device, path: str) -> None:
    """hopper-epi was written and checked for SM90 only (its configurations fill Hopper's
    shared memory); elsewhere it fails by name before any launch. Cached: once per device."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] != 9:
        major, minor = torch.cuda.get_device_capability(device)
        raise RuntimeError(
            f"the {path} path runs on SM90 (Hopper) only; this GPU is {major}.{minor}"
        )


def _descriptor_scratch(size: int, alignment: int, stream):
    """Device-side descriptors are written to a small global buffer per program: Triton asks
    for it through this allocator (Inductor installs its own for compiled code)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def traceable(kernel):
    """wrap_triton lets torch.compile see the launch and keep it in its graph (inside the custom
    op, when torch is not tracing, it hands back the kernel itself). Under Triton's interpreter
    the kernel is a plain Python function that cannot be traced: launch it as is."""
    return kernel if INTERPRETING else wrap_triton(kernel)


def as_is(kernel):
    return kernel


def constexprs(config: Config) -> dict:
    """The kernel's compile-time arguments for a configuration (launch() and
    tools/dev/fused_geglu_sass.py pass the same)."""
    values = dict(
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        GROUP_M=config.group_m,
    )
    if config.path in HOPPER_PATHS:
        values.update(FLATTEN=config.flatten, WARP_SPECIALIZE=config.warp_specialize)
    if config.path == "hopper-epi":
        values.update(
            ALONG_N=config.along_n, EPI_SPLIT=config.epi_split, FAST_TANH=config.fast_tanh
        )
    return values


def launch(
    x: torch.Tensor, gate_up: torch.Tensor, hidden: int, config: Config, wrap=as_is,
    proton: bool = False,
) -> torch.Tensor:  # fmt: skip
    """m [M, hidden] = gelu_tanh(x @ gate^T) * (x @ up^T), from x [M, dim] and the packed weight.
    `wrap` is applied to the kernel before its launch (the custom op passes `traceable`);
    `proton`: the hopper kernel with its Proton scopes (03_fused_mlp.py --proton)."""
    if config.path == GLUON:  # launched as it is: wrap_triton knows Triton's kernels, not Gluon's
        refuse_off_sm90(x.device, config.path)  # (gluon's launch allocates the output)
        return gluon().launch(x, gate_up, hidden, config, config.per_sm * sm_count(x.device))
    M, K = x.shape
    out = torch.empty((M, hidden), device=x.device, dtype=x.dtype)
    if M == 0:
        return out
    if config.activation != "gelu_tanh":
        raise ValueError(f"the {config.path} path computes the GeGLU only, not {config.activation}")
    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(hidden, config.block_n // 2)
    meta = dict(constexprs(config), num_stages=config.stages, num_warps=config.warps)
    if config.path in HOPPER_PATHS:
        if not INTERPRETING:
            triton.set_allocator(_descriptor_scratch)
        slots = config.per_sm * sm_count(x.device)
        programs = min(tiles, slots) if config.persistent else tiles
        if config.path == "hopper":
            wrap(fused_gate_up_geglu_tma_kernel)[(programs,)](
                x, gate_up, out, M, K, hidden, gate_up.shape[0], PROTON=proton, **meta
            )  # fmt: skip
        else:
            refuse_off_sm90(x.device, config.path)
            wrap(fused_gate_up_geglu_tma_epi_kernel)[(programs,)](
                x, gate_up, out, M, K, hidden, gate_up.shape[0], **meta
            )  # fmt: skip
    else:
        wrap(fused_gate_up_geglu_kernel)[(tiles,)](
            x, gate_up, out, M, K, hidden,
            x.stride(0), x.stride(1), gate_up.stride(0), gate_up.stride(1),
            out.stride(0), out.stride(1),
            DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32", **meta,
        )  # fmt: skip
    return out


# The custom op: torch.compile sees a call to it (Dynamo records the op, no graph break), and
# Inductor looks inside triton_op to call the kernel directly from its generated code.
@triton_op(OP, mutates_args=())
def fused_gate_up_geglu(
    x: torch.Tensor, gate_up: torch.Tensor, hidden: int, config: str
) -> torch.Tensor:
    return launch(x.contiguous(), gate_up, hidden, CONFIGS[config], wrap=traceable)


@fused_gate_up_geglu.register_fake
def _(x, gate_up, hidden, config):
    """What the op returns, for tracing without running it (Dynamo, and Triton's interpreter
    cannot run on the fake tensors that tracing uses)."""
    return x.new_empty((x.shape[0], hidden))


# The gluon kernel for torch.compile: an opaque custom op, which Inductor calls as it is (it
# cannot trace a Gluon kernel, as it does Triton's through triton_op) and a CUDA graph captures.
@torch.library.custom_op(GLUON_OP, mutates_args=())
def gluon_gate_up(x: torch.Tensor, gate_up: torch.Tensor, hidden: int, config: str) -> torch.Tensor:
    return launch(x.contiguous(), gate_up, hidden, CONFIGS[config])


@gluon_gate_up.register_fake
def _(x, gate_up, hidden, config):
    return x.new_empty((x.shape[0], hidden))


def gate_up_geglu(x: torch.Tensor, gate_up: torch.Tensor, hidden: int, config: str):
    """What the module calls. Eagerly, on a plain tensor that needs no gradient: the launch
    itself, because going through the dispatcher into a Python custom op costs host time on
    every call (about twice what launch() costs on the H100 of docs/measurements.md,
    "Dispatch"), and at small shapes the GPU waits for the host. Everything else goes through
    the custom op: torch.compile (Dynamo records it, Inductor launches the kernel from its own
    code), other tracers (fake tensors), and a forward that autograd would record, so that a
    backward fails loudly (the op has no backward) instead of leaving x without a gradient."""
    direct = (
        not torch.compiler.is_compiling()
        and type(x) is torch.Tensor
        and not (x.requires_grad and torch.is_grad_enabled())
    )
    if direct:
        return launch(x.contiguous(), gate_up, hidden, CONFIGS[config])
    return torch.ops.profiling_pytorch.fused_gate_up_geglu(x, gate_up, hidden, config)


# --- The module --------------------------------------------------------------------------------


def pack_gate_up(gate: torch.Tensor, up: torch.Tensor, half: int) -> torch.Tensor:
    """[hidden, dim] gate and up -> [2 * padded, dim]: `half` gate rows, then the same hidden
    units' `half` up rows, and again. A tile of 2 * half packed rows then holds matching gate and
    up columns of the product. Zero rows pad hidden to a multiple of `half` (never stored)."""
    hidden, dim = gate.shape
    rows = (0, 0, 0, triton.cdiv(hidden, half) * half - hidden)
    blocks = [F.pad(w, rows).view(-1, half, dim) for w in (gate, up)]
    return torch.stack(blocks, dim=1).reshape(-1, dim).contiguous()


def pack(config: Config, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The packed weight a configuration reads: gluon's blocks of 8 units, else pack_gate_up's
    blocks of block_n // 2."""
    if config.path == GLUON:
        return gluon().pack(gate, up)
    return pack_gate_up(gate, up, config.block_n // 2)


class FusedGeGLUMLP(nn.Module):
    """GeGLUMLP's weights; gate and up packed once, here, for the fused kernel."""

    def __init__(self, mlp: GeGLUMLP, config: str):
        super().__init__()
        self.config = config
        self.hidden = mlp.gate_proj.out_features
        weights = (mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach())
        packed = pack(CONFIGS[config], *weights)
        self.register_buffer("gate_up", packed)  # inference only: the op has no backward
        self.down_proj = mlp.down_proj

    def describe(self) -> str:
        return CONFIGS[self.config].describe() + (" (interpreted)" if INTERPRETING else "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        m = gate_up_geglu(flat, self.gate_up, self.hidden, self.config)
        return self.down_proj(m).view(*x.shape[:-1], -1)


def choose_kernel(
    requested: str, run: cli.Run, dim: int, hidden: int, compiling: bool = False
) -> str:
    """The path to run: "hopper", "gluon" or "plain". auto: on compute capability 9.x for bf16
    and fp16 when TMA can address the tensors, Hopper's, or gluon's on a GPU where it measured
    faster (GLUON_MEASURED_FASTER; eager only); else the plain one."""
    elt = cli.element_size(run)
    tma_rows = all(n * elt % 16 == 0 for n in (dim, hidden))  # TMA strides: 16-byte multiples
    major, minor = torch.cuda.get_device_capability(run.device) if run.on_gpu else (None, None)
    if requested == "plain":
        return "plain"
    if requested in ("hopper", GLUON):
        if run.dtype == torch.float32:
            raise cli.UsageError(
                f"--kernel {requested} runs bf16 and fp16 on the tensor cores; fp32 takes the "
                "plain path"
            )
        if not tma_rows:
            raise cli.UsageError(
                f"--kernel {requested} needs --dim and --hidden whose rows are multiples of 16 "
                f"bytes for TMA (multiples of {16 // elt} in {run.dtype_name}); got {dim} and "
                f"{hidden}"
            )
        if requested == GLUON and run.on_gpu and major != 9:
            raise cli.UsageError(
                f"--kernel gluon runs on SM90 (Hopper) only: its wgmma and register "
                f"reallocation are Hopper's; this GPU is {major}.{minor}"
            )
        if run.on_gpu and major < 9:
            raise cli.UsageError(
                f"--kernel hopper needs compute capability 9.0 or newer (TMA); this GPU is "
                f"{major}.{minor}: use --kernel plain"
            )
        if requested == GLUON:
            gluon()  # a Triton without Gluon's Hopper API: one line, before any work
        return requested
    if major != 9 or run.dtype == torch.float32 or not tma_rows:
        return "plain"
    measured = torch.cuda.get_device_name(run.device) in GLUON_MEASURED_FASTER
    return GLUON if measured and not compiling else "hopper"


def require_gluon(run: cli.Run, flag: str) -> None:
    """One line before any work where `flag`'s gluon kernel cannot run: a GPU other than SM90,
    float32 (wgmma takes bf16 and fp16 here), or a Triton without Gluon's Hopper API."""
    name = torch.cuda.get_device_name(run.device) if run.on_gpu else "a CPU"
    if not run.on_gpu or torch.cuda.get_device_capability(run.device)[0] != 9:
        raise cli.UsageError(f"{flag} runs Gluon's wgmma kernel on SM90 (H100, H200); this is "
                             f"{name}")  # fmt: skip
    if run.dtype == torch.float32:
        raise cli.UsageError(f"{flag} runs bf16 and fp16 on the tensor cores, not float32")
    gluon(flag)


def config_name(kernel: str, run: cli.Run, auto: bool = False) -> str:
    """The CONFIGS key a path runs: under auto, gluon's is the one measured on this GPU."""
    if kernel == "plain" and run.dtype == torch.float32:
        return "plain-fp32"
    if kernel == GLUON and auto and run.on_gpu:
        return GLUON_MEASURED_FASTER.get(torch.cuda.get_device_name(run.device), kernel)
    return kernel


def refuse_unrunnable(device: str, compile: bool, kernel: str = "auto") -> None:
    """One line, before any work, where the kernel cannot run: no GPU and no interpreter, or
    torch.compile on a CPU (Inductor cannot compile a kernel that the interpreter runs); the
    gluon kernel without a GPU (Gluon has no interpreter) or under torch.compile."""
    on_cpu = device == "cpu" or not torch.cuda.is_available()
    if kernel == GLUON and on_cpu:
        raise cli.UsageError(
            "--kernel gluon needs an SM90 GPU (H100, H200): Gluon kernels have neither a CPU "
            "backend nor an interpreter (tools/dev/fused_geglu_sass.py compiles it on a CPU)"
        )
    if kernel == GLUON and compile:
        raise cli.UsageError(
            "--kernel gluon runs eagerly only: Inductor traces Triton kernels, not Gluon's"
        )
    if on_cpu and not INTERPRETING:
        raise cli.UsageError(
            "03_fused_mlp.py needs a CUDA GPU: its kernel is Triton, which has no CPU backend "
            "here (TRITON_INTERPRET=1 runs it through Triton's interpreter, tiny shapes only)"
        )
    if on_cpu and compile:
        raise cli.UsageError(
            "--compile needs a GPU here: Inductor cannot compile a kernel that Triton's "
            "interpreter runs (tests/test_fused_mlp.py checks the graph on a CPU with Dynamo)"
        )
