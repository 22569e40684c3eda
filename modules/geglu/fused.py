"""Gate, up and the GeGLU in one Triton GEMM: the kernel that 03_fused_mlp.py profiles.

Read it beside that lesson: the configurations, the launch of each kernel (plain.py, hopper.py,
hopper_epi.py, gluon.py, their shared epilogue in shared.py), the custom op that torch.compile
sees through, and the module, FusedGeGLUMLP. Tools and tests import it by name.
"""

from functools import cache

import torch
import triton
from torch import nn
from torch.library import triton_op

from modules.geglu.hopper import fused_gate_up_geglu_tma_kernel
from modules.geglu.hopper_epi import fused_gate_up_geglu_tma_epi_kernel
from modules.geglu.plain import fused_gate_up_geglu_kernel
from modules.geglu.shared import GLUON, HOPPER_PATHS, Config, pack_gate_up, refuse_off_sm90
from modules.models import GeGLUMLP
from modules.triton_support import INTERPRETING, as_is, sm_count, traceable

OP = "profiling_pytorch::fused_gate_up_geglu"
GLUON_OP = "profiling_pytorch::gluon_gate_up"  # gluon's kernel, opaque to Inductor
# What the first call's time is made of.
FIRST_CALL = (
    "Triton's interpreter compiles nothing"
    if INTERPRETING
    else "the kernel is compiled for this configuration and dtype, then cached in ~/.triton/cache"
)


# One fixed configuration per path, no autotuning: the kernel compiles once per dtype (about a
# second, then cached on disk), and the packed weight's layout depends on block_n. What each
# measured, on which GPU and when: docs/kernel_lab.md ("The configurations").
CONFIGS = {
    # One 128 x 256 accumulator (128 gate + 128 up columns) per tile, two warpgroups.
    "hopper": Config("hopper", 128, 256, 64, stages=3, warps=8),
    # No TMA, no persistent grid: Triton's tutorial 03's first CUDA configuration (A100-sized).
    "plain": Config("plain", 128, 256, 64, stages=3, warps=8),
    # Opt-in, SM90: hopper's tile, QuACK's tanh, a split store that makes room for a 4th stage.
    "hopper-epi": Config(
        "hopper-epi", 128, 256, 64, stages=4, warps=8, epi_split=2, fast_tanh=True
    ),
    # --kernel gluon: two consumer warpgroups taking turns over 128 x 128 tiles, 6 stages.
    GLUON: Config(GLUON, 128, 128, 64, stages=6, warps=4, consumers=2),
    # What "auto" runs where gluon measured faster: one consumer of 8 warps on 128 x 256 tiles.
    "gluon-coop": Config(GLUON, 128, 256, 64, stages=4, warps=8, fast_tanh=True),
    # For the tools (ncu_fused_mlp --configs gluon-fast): the fastest pingpong at the post's shape.
    "gluon-fast": Config(
        GLUON, 128, 128, 64, stages=6, warps=4, consumers=2, fast_tanh=True, epi_split=2
    ),
    # 08_generate.py --fused-gate: a prompt's gate/up with Llama's SiLU gate.
    "gluon-silu": Config(
        GLUON, 128, 128, 64, stages=6, warps=4, consumers=2, fast_tanh=True, activation="silu"
    ),
    # float32 in IEEE on the CUDA cores: tf32 lands near 3e-4, over common/check.py's 1e-4.
    "plain-fp32": Config("plain", 64, 64, 32, stages=3, warps=4),
}


@cache
def gluon():
    """gluon.py, imported on first use: its import builds Gluon kernels, and a Triton without
    Gluon's Hopper API raises ImportError there (common.fused_kernel says so in one line)."""
    from modules.geglu import gluon as gluon_kernel

    return gluon_kernel


def _descriptor_scratch(size: int, alignment: int, stream):
    """Device-side descriptors are written to a small global buffer per program: Triton asks
    for it through this allocator (Inductor installs its own for compiled code)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def constexprs(config: Config) -> dict:
    """The kernel's compile-time arguments for a configuration (launch() and
    tools/dev/kernel_lab/fused_geglu_sass.py pass the same)."""
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
    every call (about twice what launch() costs on the H100 of docs/lessons/03_fused_mlp.md,
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
