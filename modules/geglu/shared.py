"""What the GeGLU kernels share: the epilogue (what happens to the accumulator before anything
is written), the tile order, a configuration, the packed weight's layout.

    x [M, dim] @ packed [dim, 2 * hidden] -> (g, u) pairs in registers -> m = gelu_tanh(g) * u

Each kernel has a file of its own beside this one (plain, hopper, hopper_epi, gluon); fused.py
launches them and holds the module.
"""

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from modules.triton_support import INTERPRETING
from tracereader.names import proton as scopes

try:  # Proton's in-kernel scopes (03_fused_mlp.py --proton); None: Triton built without Proton
    from triton.profiler import language as pl
except ImportError:
    pl = None
# The hopper kernel's Proton scopes, named where the reader reads them back
PROTON_MAIN_LOOP = tl.constexpr(scopes.MAIN_LOOP)
PROTON_EPILOGUE = tl.constexpr(scopes.PLAIN_EPILOGUE)
HARDWARE_TANH = tl.constexpr(not INTERPRETING)  # see tanh_hardware


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


@dataclass(frozen=True)
class Config:
    """One kernel configuration. block_n counts packed rows: block_n // 2 gate, block_n // 2 up."""

    path: str  # "plain", "hopper", "hopper-epi" (HOPPER_PATHS) or "gluon" (modules/geglu/gluon.py)
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
GLUON = "gluon"  # modules/geglu/gluon.py: warp-specialized, SM90 only, no interpreter
PATHS = (*HOPPER_PATHS, GLUON, "plain")


@cache
@cache  # once per device and path: it runs on every eager launch
def refuse_off_sm90(device: torch.device, path: str) -> None:
    """hopper-epi was written and checked for SM90 only (its configurations fill Hopper's
    shared memory); elsewhere it fails by name before any launch. Cached: once per device."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] != 9:
        major, minor = torch.cuda.get_device_capability(device)
        raise RuntimeError(
            f"the {path} path runs on SM90 (Hopper) only; this GPU is {major}.{minor}"
        )


def pack_gate_up(gate: torch.Tensor, up: torch.Tensor, half: int) -> torch.Tensor:
    """[hidden, dim] gate and up -> [2 * padded, dim]: `half` gate rows, then the same hidden
    units' `half` up rows, and again. A tile of 2 * half packed rows then holds matching gate and
    up columns of the product. Zero rows pad hidden to a multiple of `half` (never stored)."""
    hidden, dim = gate.shape
    rows = (0, 0, 0, triton.cdiv(hidden, half) * half - hidden)
    blocks = [F.pad(w, rows).view(-1, half, dim) for w in (gate, up)]
    return torch.stack(blocks, dim=1).reshape(-1, dim).contiguous()
