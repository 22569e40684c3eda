"""What the host pays to issue 03_fused_mlp.py's kernel, by the way it is called.

The fused forward's GPU work is two kernels, but its host time decides the small shapes and,
through do_bench's L2 flush, even a single timed call at the post's shape. This script times,
on the host clock, calls issued back to back (common.measuring.timing.time_host: after a
synchronize, so that the launch queue never fills and blocks), for one small shape (the GPU
time stays under the host's):
  triton launch         the kernel object called with its grid: Triton's own launcher
  fused_geglu.launch()  the same through fused_geglu.launch(): output allocation and grid
  custom op             torch.ops.profiling_pytorch.fused_gate_up_geglu: the dispatcher, the
                        custom op's Python wrappers, then launch()
  launch() traceable    launch() with torch.library.wrap_triton outside any custom op: torch's
                        tracing wrapper, what the op avoids by turning it off inside
  empty custom_op       a torch.library.custom_op that only allocates its output: dispatch alone
  empty define/impl     the same registered with torch.library.define + impl
  eager forward         FusedGeGLUMLP as it runs eagerly (direct launch + down F.linear)
  F.linear              the down GEMM alone, for scale

    python3 -m tools.dispatch_cost            (needs a CUDA GPU; ~20 s)
"""

from __future__ import annotations

import argparse
import sys

import torch

from common import cli, fused_kernel
from common.measuring.timing import time_host
from modules import triton_support
from modules.geglu import fused as fused_geglu
from modules.geglu import hopper
from modules.models import GeGLUMLP
from tracereader import Parser, run


def empty_ops():
    """Two ops that do nothing but allocate their output, registered the two ways."""

    @torch.library.custom_op("dispatch_cost::empty_custom_op", mutates_args=())
    def empty_custom_op(x: torch.Tensor, hidden: int) -> torch.Tensor:
        return x.new_empty((x.shape[0], hidden))

    lib = torch.library.Library("dispatch_cost", "FRAGMENT")
    lib.define("empty_impl(Tensor x, int hidden) -> Tensor")
    lib.impl("empty_impl", lambda x, hidden: x.new_empty((x.shape[0], hidden)), "CUDA")
    return torch.ops.dispatch_cost.empty_custom_op, torch.ops.dispatch_cost.empty_impl, lib


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=1024, help="tokens (default: 1024 = 8x128)")
    parser.add_argument("--calls", type=int, default=50, help="calls per sample (default: 50)")
    args = parser.parse_args()
    if args.m < 1 or args.calls < 1:
        parser.error("--m and --calls must be positive")
    if not torch.cuda.is_available():
        print("error: tools/dispatch_cost.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    torch.set_grad_enabled(False)
    dev, dtype, dim, hidden = torch.device("cuda"), torch.bfloat16, 768, 3072
    torch.manual_seed(0)
    mlp = GeGLUMLP(dim, hidden).to(dev, dtype).eval()
    run = cli.Run(dev, dtype, "bf16")
    kernel = fused_kernel.choose_kernel("auto", run, dim, hidden)
    name = fused_kernel.config_name(kernel, run, auto=True)
    fused = fused_geglu.FusedGeGLUMLP(mlp, name).eval()
    config = fused_geglu.CONFIGS[name]
    x = torch.randn(args.m, dim, device=dev, dtype=dtype)
    m = torch.empty(args.m, hidden, device=dev, dtype=dtype)
    custom_op, define_impl, _lib = empty_ops()

    # The kernel alone, as launch() calls it, with the output allocated once outside.
    fused_geglu.launch(x, fused.gate_up, hidden, config)  # compiles; installs the TMA allocator
    if config.path == "hopper":
        k = hopper.fused_gate_up_geglu_tma_kernel
        tiles = triton.cdiv(args.m, config.block_m) * triton.cdiv(hidden, config.block_n // 2)
        programs = min(tiles, triton_support.sm_count(dev))

        def triton_launch():
            k[(programs,)](
                x, fused.gate_up, m, args.m, dim, hidden, fused.gate_up.shape[0],
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                GROUP_M=config.group_m, num_stages=config.stages, num_warps=config.warps,
                FLATTEN=config.flatten, WARP_SPECIALIZE=config.warp_specialize,
            )  # fmt: skip
    else:
        triton_launch = None

    calls = {
        "triton launch": triton_launch,
        "fused_geglu.launch()": lambda: fused_geglu.launch(x, fused.gate_up, hidden, config),
        "custom op": lambda: torch.ops.profiling_pytorch.fused_gate_up_geglu(
            x, fused.gate_up, hidden, kernel
        ),
        "launch() traceable": lambda: fused_geglu.launch(
            x, fused.gate_up, hidden, config, wrap=triton_support.traceable
        ),
        "empty custom_op": lambda: custom_op(x, hidden),
        "empty define/impl": lambda: define_impl(x, hidden),
        "eager forward": lambda: fused(x),
        "F.linear": lambda: mlp.down_proj(m),
    }
    print(
        f"{torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}, "
        f"Python {sys.version.split()[0]}; x [{args.m}, {dim}], hidden {hidden}, "
        f"{config.describe()}"
    )
    print(f"host time per call, median (p20-p80) of 15 samples of {args.calls} calls:")
    for name, fn in calls.items():
        if fn is None:
            print(f"  {name:<20} (the Hopper path only)")
            continue
        for _ in range(20):
            fn()
        t = time_host(fn, calls=args.calls)
        print(f"  {name:<20} {t.median_s * 1e6:7.1f} us  ({t.p20_s * 1e6:.1f}-{t.p80_s * 1e6:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
