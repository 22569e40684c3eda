"""Gate, up and the GeGLU in one Gluon kernel for Hopper (SM90): what `triton.language` cannot say.

hopper.py's kernel leaves the schedule to the compiler: all 8 warps load, multiply
and run the epilogue in turn, so the tensor pipe idles while a tile's GeGLU and store run
(docs/kernel_lab.md: 75% tensor-pipe active against QuACK's 94%). Gluon
(`triton.experimental.gluon`) is Triton's lower level: layouts, shared memory, mbarriers, TMA
and wgmma are written out, and `gl.warp_specialize` splits a kernel into partitions of warps with
their own code and register budgets. This kernel, read top to bottom:

    producer (1 warp, 40 registers)    TMA loads of x and the weight into a ring of STAGES slots
    consumer 0 (the default partition) wgmma over its tiles; GeGLU; TMA store
    consumer 1 (CONSUMERS == 2)        the same over the other tiles, in turn with consumer 0

With two consumers each owns whole tiles and they take turns: while one runs its epilogue the
other's wgmma keep the tensor pipe busy ("pingpong", as QuACK and CUTLASS do). With one consumer
of 8 warps both warpgroups share a tile ("cooperative"); the producer still loads ahead.

The weight is packed in blocks of 8 units (pack): 8 gate rows, then the same units' 8 up rows,
so a wgmma accumulator holds gate and up of the same two adjacent units in one thread, for any
tile width (shared.py's packing depends on its block_n), and the GeGLU's product leaves in
the accumulator layout of a half-wide tile, which stmatrix stores (geglu). The GeGLU is
shared.py's: gelu_tanh by exp2 and a fast division, or QuACK's tanh.approx (FAST_TANH);
Config(activation="silu") swaps its gate for SiLU, Llama's (08_generate.py --fused-gate).

Gluon's shapes, shared-memory buffers and TMA boxes must be powers of two (Triton 3.6 and 3.9
refuse a [128, 192] accumulator and a [192, 64] buffer or box), so a tile of QuACK's width, 192
packed rows (96 gate + 96 up units), is cut in two (split_n): a box and an accumulator of 128
rows, another of 64 (TAIL_N), each with its GeGLU and its TMA store; block_n 192 in Config.

Config(epi_split=2) stores a tile's output through one box a quarter of the head's width (128 x 32
for 128- and 192-wide tiles), three or two TMA stores a tile in turn, instead of boxes of the
whole output: 8 KB of shared memory less a consumer for 128-wide tiles, 16 KB for 192-wide ones
(room for their fifth stage); at the same stages 0.4-2.6% faster at the post's shape on two
H100s, level within the passes' spread on an H200 (docs/kernel_lab.md, "Kept").

Gluon has no interpreter: the kernel runs on an SM90 GPU, and compiles for sm_90 on any machine
(compile_sm90: tests/test_gluon_geglu.py, tools/dev/kernel_lab/fused_geglu_sass.py --paths gluon).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import triton

try:  # Gluon's Hopper API as Triton 3.6 to 3.9 spell it; older Triton refuses by name
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError as err:
    raise ImportError(
        f"the gluon kernel needs Triton's Gluon Hopper API (Triton 3.6 or newer); Triton "
        f"{triton.__version__} lacks it ({err})"
    ) from None
from modules.geglu.shared import (
    pack_gate_up,
    pl,  # Proton's in-kernel scopes (03_fused_mlp.py --proton), or None
)

# TMA's copies under their two names: Triton 3.6's, and 3.7's on (3.9 refuses the old ones).
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

UNITS = gl.constexpr(8)  # hidden units per block of the packed weight (pack): wgmma's 8 columns
PRODUCER_REGS = 40  # per thread: the producer only computes addresses (QuACK gives it 40)
REGISTERS_PER_SM = 65536
GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


# --- The epilogue: shared.py's GeGLU, in Gluon ------------------------------------------


@gluon.jit
def gelu_tanh(g):
    """0.5 * g * (1 + tanh(z)) = g / (1 + exp(-2z)): one exp2 and one fast division
    (shared.gelu_tanh, which says why)."""
    minus_2z_log2e = g * (-2.0 * 0.7978845608028654 * 1.4426950408889634) * (1.0 + 0.044715 * g * g)
    return gl.fdiv(g, 1.0 + gl.exp2(minus_2z_log2e))


@gluon.jit
def gelu_tanh_approx(g):
    """0.5 * (g * tanh(z) + g), tanh by tanh.approx.f32: one special-function op (QuACK's)."""
    z = g * (0.7978845608028654 + 0.7978845608028654 * 0.044715 * g * g)
    tanh = gl.inline_asm_elementwise(
        "tanh.approx.f32 $0, $1;", "=f,f", [z], dtype=gl.float32, is_pure=True, pack=1
    )
    return 0.5 * (g * tanh + g)


@gluon.jit
def silu(g):
    """g * sigmoid(g) = g / (1 + exp(-g)): one exp2 and one fast division (Llama's gate)."""
    return gl.fdiv(g, 1.0 + gl.exp2(g * -1.4426950408889634))


@gluon.jit
def silu_tanh_approx(g):
    """g * sigmoid(g) = 0.5 * (g * tanh(g / 2) + g), tanh by tanh.approx.f32: one op."""
    tanh = gl.inline_asm_elementwise(
        "tanh.approx.f32 $0, $1;", "=f,f", [0.5 * g], dtype=gl.float32, is_pure=True, pack=1
    )
    return 0.5 * (g * tanh + g)


@gluon.jit
def geglu(acc, FAST_TANH: gl.constexpr, SILU: gl.constexpr):
    """[BLOCK_M, BLOCK_N] accumulator, packed in blocks of UNITS gate and UNITS up columns ->
    [BLOCK_M, BLOCK_N // 2]. wgmma's accumulator gives a thread columns 2t, 2t + 1 (t: its lane
    mod 4) of every 8, so a thread holds gate and up of the same two adjacent units: the
    reshapes, the permute and the split only relabel registers, and the product comes out in
    the layout of a BLOCK_N // 2 wide accumulator, pairs of adjacent columns per thread: what
    stmatrix stores (one unit per pair, as rows 2j and 2j + 1 packed it, left each thread
    single columns and the store to 16-bit scalar STS)."""
    BLOCK_M: gl.constexpr = acc.shape[0]
    BLOCK_N: gl.constexpr = acc.shape[1]
    blocks = gl.reshape(acc, [BLOCK_M, BLOCK_N // (2 * UNITS), 2, UNITS])
    gate, up = gl.split(gl.permute(blocks, (0, 1, 3, 2)))
    gate = gl.reshape(gate, [BLOCK_M, BLOCK_N // 2])
    up = gl.reshape(up, [BLOCK_M, BLOCK_N // 2])
    if SILU:  # SwiGLU, Llama's MLP: the same kernel, another gate
        if FAST_TANH:
            return silu_tanh_approx(gate) * up
        else:
            return silu(gate) * up
    elif FAST_TANH:
        return gelu_tanh_approx(gate) * up
    else:
        return gelu_tanh(gate) * up


@gluon.jit
def tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP: gl.constexpr, ALONG_N: gl.constexpr):
    """Tile number -> (row block, column block), GROUP row blocks at a time, or GROUP column
    blocks (ALONG_N), as shared.tile_coordinates_along walks them."""
    if ALONG_N:
        major = num_pid_n
        minor = num_pid_m
    else:
        major = num_pid_m
        minor = num_pid_n
    per_group = GROUP * minor
    first = (tile_id // per_group) * GROUP
    rows = gl.minimum(major - first, GROUP)
    along = first + (tile_id % per_group) % rows
    across = (tile_id % per_group) // rows
    if ALONG_N:
        return across, along
    else:
        return along, across


# --- The partitions ---------------------------------------------------------------------------


@gluon.constexpr_function
def accumulator_layout(block_m, block_n, warps):
    """wgmma's accumulator: 16-row instructions, warpgroups stacked along M while rows last,
    the widest instruction N that the tile allows (fewer, larger wgmma)."""
    warps_m = max(1, min(warps, block_m // 16))
    warps_n = warps // warps_m
    n = min(256, block_n // warps_n)
    return gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps_m, warps_n], instr_shape=[16, n, 16]
    )


@gluon.jit
def producer(x_desc, w_desc, w_tail_desc, bufs, bars, sizes, opts, TAIL_N: gl.constexpr):
    """Every tile of this program in order, every K step: wait for a free slot, load x's rows and
    the weight's packed rows into it (TAIL_N: the head's box and the tail's); the slot's `ready`
    barrier counts the bytes in."""
    x_bufs, w_bufs, w_tail_bufs, _, _ = bufs
    ready, empty, _ = bars
    M, HIDDEN, K = sizes
    GROUP_M, ALONG_N, _, _, PROTON = opts  # compile-time, each (folded: MLIR's constants)
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = w_desc.block_type.shape[0] + TAIL_N  # packed rows per tile
    STAGES: gl.constexpr = x_bufs.shape[0]
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(HIDDEN, BLOCK_N // 2)
    k_tiles = gl.cdiv(K, BLOCK_K)
    step = 0  # position in the ring, shared in count with the consumers
    for tile_id in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):
        pid_m, pid_n = tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M, ALONG_N)
        for k in range(k_tiles):
            slot = step % STAGES
            # Barriers start as if phase 1 had completed: the first lap finds every slot free.
            if PROTON:
                pl.enter_scope("producer waits for a free slot")
            mbarrier.wait(empty.index(slot), ((step // STAGES) & 1) ^ 1)
            if PROTON:
                pl.exit_scope("producer waits for a free slot")
            bar = ready.index(slot)
            # Bytes of whole boxes: TMA fills the part past M, K or 2 * HIDDEN with zeros.
            if TAIL_N > 0:
                mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes
                                + w_tail_desc.block_type.nbytes)  # fmt: skip
            else:
                mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes)
            tma_load(x_desc, [pid_m * BLOCK_M, k * BLOCK_K], bar,
                                            x_bufs.index(slot))  # fmt: skip
            tma_load(w_desc, [pid_n * BLOCK_N, k * BLOCK_K], bar,
                                            w_bufs.index(slot))  # fmt: skip
            if TAIL_N > 0:  # the tile's last TAIL_N packed rows, after the head's box
                tma_load(w_tail_desc, [pid_n * BLOCK_N + BLOCK_N - TAIL_N, k * BLOCK_K], bar,
                         w_tail_bufs.index(slot))  # fmt: skip
            step += 1


@gluon.jit
def store_through(box, value, desc, row, col):
    """value to global memory at (row, col) through the shared-memory box, once the box's
    previous TMA store has read it (epi_split=2: the box is reused within a tile)."""
    tma.store_wait(pendings=0)
    box.store(value)
    fence_async_shared()  # the generic-proxy writes before TMA (async proxy) reads them
    tma_store(desc, [row, col], box)


# long: one warp-specialized partition, read top to bottom as the kernel runs it (wait, wgmma,
# release, epilogue); the PTX of this shape is what tests/test_gluon_geglu.py checks
@gluon.jit
def consumer(outs, bufs, bars, sizes, opts, WHICH: gl.constexpr, CONSUMERS: gl.constexpr,
             WARPS: gl.constexpr, TAIL_N: gl.constexpr, SPLIT: gl.constexpr):  # fmt: skip
    """Tiles WHICH, WHICH + CONSUMERS, ... of this program: wgmma from the ring's slots (one K
    step in flight while the next is issued), then the GeGLU, a store to shared memory and a TMA
    store that runs on while the next tile's wgmma do. TAIL_N > 0: a second accumulator over
    the tile's last TAIL_N packed rows, its GeGLU and store beside the head's. SPLIT == 2: the
    tile's output leaves through one smaller box, a quarter of the head's columns at a time."""
    out_desc, out_tail_desc = outs
    x_bufs, w_bufs, w_tail_bufs, out_bufs, out_tail_bufs = bufs
    ready, empty, turns = bars
    M, HIDDEN, K = sizes
    GROUP_M, ALONG_N, FAST_TANH, SILU, PROTON = opts
    BLOCK_M: gl.constexpr = x_bufs.shape[1]
    BLOCK_K: gl.constexpr = x_bufs.shape[2]
    HEAD_N: gl.constexpr = w_bufs.shape[1]  # the first accumulator's packed rows
    BLOCK_N: gl.constexpr = HEAD_N + TAIL_N  # packed rows per tile
    STAGES: gl.constexpr = x_bufs.shape[0]
    layout: gl.constexpr = accumulator_layout(BLOCK_M, HEAD_N, WARPS)
    out_buf = out_bufs.index(WHICH)
    if TAIL_N > 0:
        tail_layout: gl.constexpr = accumulator_layout(BLOCK_M, TAIL_N, WARPS)
        if SPLIT == 1:
            out_tail_buf = out_tail_bufs.index(WHICH)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(HIDDEN, BLOCK_N // 2)
    k_tiles = gl.cdiv(K, BLOCK_K)
    programs = gl.num_programs(0)
    step = WHICH * k_tiles  # the producer filled the other consumers' earlier tiles first
    turn = 0
    # The accumulators are zeroed once and carried from tile to tile: each tile's first wgmma
    # ignores them (use_acc False, QuACK's first K step too), so no tile waits on zeroing its
    # registers (H100: 2-3% at the post's shape, 1% at the Llama one; docs/kernel_lab.md).
    acc = gl.zeros([BLOCK_M, HEAD_N], gl.float32, layout)
    if TAIL_N > 0:
        tail = gl.zeros([BLOCK_M, TAIL_N], gl.float32, tail_layout)
    for tile_id in range(gl.program_id(0) + WHICH * programs, num_pid_m * num_pid_n,
                         CONSUMERS * programs):  # fmt: skip
        pid_m, pid_n = tile_coordinates(tile_id, num_pid_m, num_pid_n, GROUP_M, ALONG_N)
        if CONSUMERS == 2:
            # Main loops in tile order: a barrier's parity tells apart only two laps of the
            # ring, so this consumer must not wait on a slot before the other has taken the
            # slot's previous lap. Consumer 0's first turn is free (the initial phase).
            mbarrier.wait(turns.index(WHICH), (turn & 1) ^ (1 - WHICH))
        for k in range(k_tiles):
            slot = step % STAGES
            if PROTON:
                pl.enter_scope("consumer waits for data")
            mbarrier.wait(ready.index(slot), (step // STAGES) & 1)
            if PROTON:
                pl.exit_scope("consumer waits for data")
            # B is the packed weight's [HEAD_N, BLOCK_K] box, read as K-major through a view.
            acc = warpgroup_mma(x_bufs.index(slot), w_bufs.index(slot).permute((1, 0)), acc,
                                use_acc=k > 0, is_async=True)  # fmt: skip
            if TAIL_N > 0:
                tail = warpgroup_mma(x_bufs.index(slot), w_tail_bufs.index(slot).permute((1, 0)),
                                     tail, use_acc=k > 0, is_async=True)  # fmt: skip
                # One K step (two wgmma groups) in flight: the previous step's are done.
                acc, tail = warpgroup_mma_wait(num_outstanding=2, deps=(acc, tail))
            else:
                # One wgmma in flight: the previous one is done, so its slot goes back.
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES), pred=k > 0)
            step += 1
        if CONSUMERS == 2:
            mbarrier.arrive(turns.index(1 - WHICH))  # the other's main loop may start
        turn += 1
        if TAIL_N > 0:
            acc, tail = warpgroup_mma_wait(num_outstanding=0, deps=(acc, tail))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((step + STAGES - 1) % STAGES))
        step += (CONSUMERS - 1) * k_tiles  # the other consumer's tile comes next in the ring

        if PROTON:
            pl.enter_scope("consumer epilogue")
        if SPLIT == 2:  # the output in boxes of HEAD_N // 4 columns, one box a consumer
            PIECE: gl.constexpr = HEAD_N // 4
            row = pid_m * BLOCK_M
            col = pid_n * (BLOCK_N // 2)
            m = geglu(acc, FAST_TANH, SILU).to(out_desc.dtype)
            # the two halves of the head's columns: registers relabelled, as in geglu
            lo, hi = gl.split(gl.permute(gl.reshape(m, [BLOCK_M, 2, PIECE]), (0, 2, 1)))
            store_through(out_buf, lo, out_desc, row, col)
            store_through(out_buf, hi, out_desc, row, col + PIECE)
            if TAIL_N > 0:  # TAIL_N // 2 == PIECE (descriptors): the same box
                t = geglu(tail, FAST_TANH, SILU).to(out_desc.dtype)
                store_through(out_buf, t, out_desc, row, col + 2 * PIECE)
        else:
            m = geglu(acc, FAST_TANH, SILU).to(out_desc.dtype)
            tma.store_wait(pendings=0)  # the previous tile's store has left out_buf
            out_buf.store(m)
            if TAIL_N > 0:  # the tail's units: the output's columns after the head's
                out_tail_buf.store(geglu(tail, FAST_TANH, SILU).to(out_desc.dtype))
            fence_async_shared()  # the generic-proxy writes before TMA (async proxy) reads them
            tma_store(out_desc, [pid_m * BLOCK_M, pid_n * (BLOCK_N // 2)], out_buf)
            if TAIL_N > 0:
                tma_store(out_tail_desc, [pid_m * BLOCK_M, pid_n * (BLOCK_N // 2) + HEAD_N // 2],
                          out_tail_buf)  # fmt: skip
        if PROTON:
            pl.exit_scope("consumer epilogue")
    tma.store_wait(pendings=0)


@gluon.jit
def fused_gate_up_geglu_gluon_kernel(x_desc, w_desc, out_desc, w_tail_desc, out_tail_desc,
                       M, HIDDEN, K,
                       STAGES: gl.constexpr, GROUP_M: gl.constexpr, ALONG_N: gl.constexpr,
                       FAST_TANH: gl.constexpr, SILU: gl.constexpr, CONSUMERS: gl.constexpr,
                       TAIL_N: gl.constexpr, SPLIT: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                       PRODUCER_REGS: gl.constexpr,
                       PROTON: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """m [M, HIDDEN] = gelu_tanh(x @ gate^T) * (x @ up^T), or silu(...) (SILU); x_desc [M, K],
    w_desc [2 * padded HIDDEN, K] in blocks of UNITS (pack), out_desc [M, HIDDEN]. A persistent
    grid: a program per SM. TAIL_N > 0 (a tile width that is no power of two, which Gluon's
    shapes must be): each tile is w_desc's box of packed rows then w_tail_desc's TAIL_N more,
    two accumulators, stored through out_desc's and out_tail_desc's boxes; TAIL_N == 0: both
    tail descriptors are None and unused."""
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES] + x_desc.block_type.shape,
                                       x_desc.layout)  # fmt: skip
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES] + w_desc.block_type.shape,
                                       w_desc.layout)  # fmt: skip
    out_bufs = gl.allocate_shared_memory(out_desc.dtype, [CONSUMERS] + out_desc.block_type.shape,
                                         out_desc.layout)  # fmt: skip
    if TAIL_N > 0:
        w_tail_bufs = gl.allocate_shared_memory(w_tail_desc.dtype,
                                                [STAGES] + w_tail_desc.block_type.shape,
                                                w_tail_desc.layout)  # fmt: skip
    if TAIL_N > 0 and SPLIT == 1:
        out_tail_bufs = gl.allocate_shared_memory(out_tail_desc.dtype,
                                                  [CONSUMERS] + out_tail_desc.block_type.shape,
                                                  out_tail_desc.layout)  # fmt: skip
    else:  # never read: the partitions' arguments keep one shape
        out_tail_bufs = out_bufs
        out_tail_desc = out_desc
    if TAIL_N == 0:
        w_tail_bufs = w_bufs
        w_tail_desc = w_desc
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)  # the producer's expect; TMA's bytes complete it
        mbarrier.init(empty.index(i), count=1)  # one arrive by the consumer that read the slot
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)  # consumer i may start its next main loop

    bufs = (x_bufs, w_bufs, w_tail_bufs, out_bufs, out_tail_bufs)
    bars = (ready, empty, turns)
    sizes = (M, HIDDEN, K)
    opts = (GROUP_M, ALONG_N, FAST_TANH, SILU, PROTON)
    outs = (out_desc, out_tail_desc)
    # TAIL_N is written into each call's tuple: a tuple assigned to a name turns its
    # constants into tensors (Triton 3.6), and TAIL_N sizes the partitions' buffers.
    if CONSUMERS == 2:
        gl.warp_specialize(
            [
                (consumer, (outs, bufs, bars, sizes, opts, 0, 2, num_warps, TAIL_N, SPLIT)),
                (consumer, (outs, bufs, bars, sizes, opts, 1, 2, num_warps, TAIL_N, SPLIT)),
                (producer, (x_desc, w_desc, w_tail_desc, bufs, bars, sizes, opts, TAIL_N)),
            ],
            [num_warps, 1],
            [CONSUMER_REGS, PRODUCER_REGS],
        )
    else:
        gl.warp_specialize(
            [
                (consumer, (outs, bufs, bars, sizes, opts, 0, 1, num_warps, TAIL_N, SPLIT)),
                (producer, (x_desc, w_desc, w_tail_desc, bufs, bars, sizes, opts, TAIL_N)),
            ],
            [1],
            [PRODUCER_REGS],
        )


# --- Configuration, registers and the launch --------------------------------------------------


def split_n(block_n: int) -> tuple[int, int]:
    """A tile's packed rows as (head, tail): Gluon's shapes, shared-memory buffers and TMA boxes
    must be powers of two, so a tile of 192 (96 gate + 96 up units, QuACK's width) is a box and
    an accumulator of 128 and another of 64; a power of two is all head (tail 0). Both parts
    whole blocks of UNITS gate and UNITS up rows, so that geglu pairs each unit with its own."""
    head = 1 << (block_n.bit_length() - 1)
    tail = block_n - head
    block = 2 * UNITS.value
    if block_n < block or tail & (tail - 1) or tail % block:
        raise ValueError(
            f"gluon: block_n {block_n} must be a power of two or one plus a smaller power of "
            f"two, each a multiple of {block} (96, 160, 192 do; 112, 224 do not)"
        )
    return head, tail


@dataclass(frozen=True)
class Plan:
    """What a configuration asks of the SM: warps, the launch's register cap and the budgets
    that setmaxnreg moves registers to (multiples of 8, 24 to 256 per thread)."""

    warps: int  # the whole CTA: consumers, and the producer's warp padded to a warpgroup
    maxnreg: int  # per thread at launch: the register file shared by every warp
    consumer_regs: int  # per consumer thread after reallocation


@cache  # per configuration: launch's share of the host's dispatch stays small
def plan(config) -> Plan:
    """The producer keeps PRODUCER_REGS; the consumers share what the register file has left."""
    warps = config.consumers * config.warps + 4
    maxnreg = min(248, REGISTERS_PER_SM // (32 * warps) // 8 * 8)
    consumer_warpgroups = config.consumers * config.warps // 4
    spare = maxnreg * (consumer_warpgroups + 1) - PRODUCER_REGS
    return Plan(warps, maxnreg, min(256, spare // consumer_warpgroups // 8 * 8))


def constexprs(config, proton: bool = False) -> dict:
    """The kernel's compile-time arguments (launch and compile_sm90 pass the same); proton:
    with Proton's scopes (its own compile, beside the plain one)."""
    return dict(_constexprs(config, proton))


@cache
def _constexprs(config, proton: bool) -> dict:
    return dict(
        PROTON=proton,
        STAGES=config.stages,
        GROUP_M=config.group_m,
        ALONG_N=config.along_n,
        FAST_TANH=config.fast_tanh,
        SILU=config.activation == "silu",
        CONSUMERS=config.consumers,
        TAIL_N=split_n(config.block_n)[1],
        SPLIT=config.epi_split,
        CONSUMER_REGS=plan(config).consumer_regs,
        PRODUCER_REGS=PRODUCER_REGS,
    )


@cache
def smem_layout(box: tuple[int, int], dtype: torch.dtype):
    """Hopper's 128-byte swizzle (NVMMA's default for these boxes), built once per box."""
    return gl.NVMMASharedLayout.get_default_for(list(box), GL_DTYPES[dtype])


def descriptors(x, packed, out, config):
    """TMA descriptors of x's, the weight's and the output's boxes, then the weight's and the
    output's tail boxes (split_n), None where the tile is a power of two wide. Under epi_split=2
    the tail's output leaves through the head's box (the kernel stores it there), so the output's
    descriptor is passed again rather than built twice on every launch."""
    head, tail = split_n(config.block_n)
    split = config.epi_split
    if split not in (1, 2) or (split == 2 and tail and tail // 2 != head // 4):
        raise ValueError(
            f"gluon: epi_split {split} must be 1, or 2 with a tile a power of two wide or a "
            f"tail half its head (192 = 128 + 64); block_n {config.block_n} is {head} + {tail}"
        )
    boxes = [
        (x, (config.block_m, config.block_k)),
        (packed, (head, config.block_k)),
        (out, (config.block_m, head // 2 // split)),
    ]
    if tail:
        boxes.append((packed, (tail, config.block_k)))
        if split == 1:
            boxes.append((out, (config.block_m, tail // 2)))
    descs = [
        TensorDescriptor.from_tensor(t, list(box), smem_layout(box, x.dtype)) for t, box in boxes
    ]
    if not tail:
        return [*descs, None, None]
    return descs if split == 1 else [*descs, descs[2]]


def launch(x: torch.Tensor, packed: torch.Tensor, hidden: int, config, programs: int, proton=False):
    """m [M, hidden] from x [M, dim] and the packed weight [2 * padded hidden, dim] (pack).

    The first launch of a specialization goes through Gluon's JIT (it compiles); later ones call
    the compiled kernel directly. The JIT's own lookup re-derives each descriptor's type string
    (the layout's repr) and binds every argument on every call: on the H200 of
    docs/kernel_lab.md ("Host dispatch"), 63 us of a 117 us launch. The key holds what the JIT
    specializes on: the device, the configuration (boxes, layouts, constexprs), the dtype, and
    per integer argument whether it is 1 and whether 16 divides it. Descriptors are built on
    every call, so a new tensor of the same shape is always the one read."""
    M, K = x.shape
    out = torch.empty((M, hidden), device=x.device, dtype=x.dtype)
    if M == 0:
        return out
    tiles = triton.cdiv(M, config.block_m) * triton.cdiv(hidden, config.block_n // 2)
    grid = (min(tiles, programs), 1, 1)
    descs = descriptors(x, packed, out, config)
    key = (x.device.index, config, x.dtype, proton, *(_spec(v) for v in (M, hidden, K)))
    compiled = _COMPILED.get(key)
    if compiled is not None:
        compiled[grid](*descs, M, hidden, K, *_constexpr_values(config, proton))
        return out
    how = plan(config)
    _COMPILED[key] = fused_gate_up_geglu_gluon_kernel[grid](
        *descs, M, hidden, K, **constexprs(config, proton),
        num_warps=config.warps, maxnreg=how.maxnreg,
    )  # fmt: skip
    return out


# (device, config, dtype, proton, specializations) -> the compiled kernel: launch's fast path.
_COMPILED: dict[tuple, object] = {}


def _spec(value: int) -> tuple[bool, bool]:
    """What Triton specializes an integer argument on: equal to 1, divisible by 16."""
    return value == 1, value % 16 == 0


@cache
def _constexpr_values(config, proton: bool) -> tuple:
    """The kernel's arguments after M, HIDDEN and K, in its own order: a compiled kernel is
    called with every argument, constexprs included (its launcher skips them)."""
    values = dict(constexprs(config, proton), num_warps=config.warps)
    names = fused_gate_up_geglu_gluon_kernel.arg_names
    return tuple(values[name] for name in names[names.index("K") + 1 :])


def pack(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[hidden, dim] gate and up -> [2 * padded, dim]: UNITS gate rows, then the same units'
    UNITS up rows, and again (geglu says why 8). Zero rows pad hidden to a multiple of UNITS;
    their columns are past `hidden` and the TMA store clips them; TMA reads past the end as
    zeros, so any tile width works. shared.pack_gate_up's layout, at UNITS."""
    return pack_gate_up(gate, up, UNITS.value)


def compile_sm90(config, dtype: torch.dtype = torch.bfloat16, proton: bool = False):
    """The kernel compiled for sm_90 on this machine, GPU or not (Triton's own ptxas): what
    tests and tools/dev/kernel_lab/fused_geglu_sass.py read the SASS of."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    # Descriptors of meta tensors: the signature holds only the box, the dtype and the layout.
    meta = [torch.empty(16, 16, dtype=dtype, device="meta") for _ in range(3)]
    descs = descriptors(meta[0], meta[1], meta[2], config)
    names = ("x_desc", "w_desc", "out_desc", "w_tail_desc", "out_tail_desc")
    fixed = constexprs(config, proton)
    signature = {}
    for name, d in zip(names, descs, strict=True):
        signature[name] = "constexpr" if d is None else mangle_type(d)
        if d is None:  # what Triton's launch makes of a None argument
            fixed[name] = None
    signature.update(M="i32", HIDDEN="i32", K="i32")
    fixed["num_warps"] = config.warps
    signature.update(dict.fromkeys(fixed, "constexpr"))
    source = GluonASTSource(fused_gate_up_geglu_gluon_kernel, signature, constexprs=fixed)
    options = {"num_warps": config.warps, "maxnreg": plan(config).maxnreg}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
