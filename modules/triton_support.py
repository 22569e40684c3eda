"""What every Triton kernel of modules/ shares: the interpreter's switches, the grid's SM count
and the wrapper that lets torch.compile trace a launch."""

import warnings
from functools import cache

import torch
import triton
import triton.language as tl
from torch.library import wrap_triton

# Triton reads TRITON_INTERPRET=1 when it is imported. Its kernels then run on the CPU in NumPy.
INTERPRETING = triton.knobs.runtime.interpret
# The interpreter keeps bf16 as raw 16-bit integers, and its tl.dot multiplies those bits
# (triton-lang/triton#11584). Interpreted kernels convert the operands to float32 first; on a
# GPU this constant is False and the compiler drops the branch.
UPCAST_FOR_INTERPRETER = tl.constexpr(INTERPRETING)
if INTERPRETING:  # gelu_tanh lets exp2 overflow to inf on purpose; NumPy would warn every time
    warnings.filterwarnings("ignore", "overflow encountered in exp2", RuntimeWarning)


@cache
@cache  # once per device: it runs on every eager launch
def sm_count(device: torch.device) -> int:
    """Programs of a persistent grid; on the interpreter, a few, so the tile loop still loops."""
    if device.type != "cuda":
        return 3
    return torch.cuda.get_device_properties(device).multi_processor_count


def traceable(kernel):
    """wrap_triton lets torch.compile see the launch and keep it in its graph (inside the custom
    op, when torch is not tracing, it hands back the kernel itself). Under Triton's interpreter
    the kernel is a plain Python function that cannot be traced: launch it as is."""
    return kernel if INTERPRETING else wrap_triton(kernel)


def as_is(kernel):
    return kernel
