"""Which fused-MLP kernel a lesson runs (03_fused_mlp.py, 08_generate.py --fused-gate), and the
one-line refusals where it cannot run: the choice belongs to the lessons, the kernels to
modules/geglu/."""

from functools import cache

import torch

from common import cli
from modules.geglu.fused import CONFIGS  # noqa: F401 - the names a flag may give
from modules.geglu.shared import GLUON
from modules.triton_support import INTERPRETING

# GPUs (torch.cuda.get_device_name) on which a gluon configuration measured faster than
# "hopper", kernel and forward, at the post's and the Llama shape (tools/dev/gpu_runs/gluon_gpu.sh),
# and that configuration (a key of CONFIGS): "auto" takes it there, nowhere else.
GLUON_MEASURED_FASTER: dict[str, str] = {
    # Measured 2026-11-27 (docs/kernel_lab.md, "auto"): gluon-coop faster than "hopper" there.
    "NVIDIA H100 80GB HBM3": "gluon-coop",
    "NVIDIA H200": "gluon-coop",
}


@cache
def gluon(flag: str = "--kernel gluon"):
    """modules/geglu/gluon.py, or one line naming the flag that asked for it where this Triton
    lacks Gluon's Hopper API (cli.UsageError)."""
    from modules.geglu import fused

    try:
        return fused.gluon()
    except ImportError as err:
        raise cli.UsageError(f"{flag}: {err}") from None


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
            "backend nor an interpreter (tools/dev/kernel_lab/fused_geglu_sass.py compiles it on "
            "a CPU)"
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
