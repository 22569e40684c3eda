"""Launch each gate/up + GeGLU kernel a few times at one shape, for Nsight Compute to read.

Our fused kernel under each named configuration of fused_geglu.CONFIGS and, with --quack,
QuACK's gemm_gated (tuned=False, then tuned=True). Every kernel is checked against a float32
reference first (one line each; the first call compiles, and QuACK's tuned=True autotunes,
launching dozens of other kernels); only then does the profiled range open
(cudaProfilerStart), in which each kernel is launched --calls times, in the order listed. Run
ncu with --profile-from-start off so that it reads that range alone; the timing is ncu's.
Kernel names: fused_gate_up_geglu_tma_kernel (hopper), fused_gate_up_geglu_tma_epi_kernel
(hopper-epi), fused_gate_up_geglu_gluon_kernel (gluon), QuACK's kernel_cutlass_kernel_quack...

    ncu --profile-from-start off --clock-control none --set full -o OUT/post \\
        python3 -m tools.dev.kernel_lab.ncu_fused_mlp --configs gluon-fast --quack     (GPU only)
    ncu --import OUT/post.ncu-rep --print-summary per-kernel
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

from common import check, cli
from modules import quack_gemm
from modules.geglu import fused as fused_geglu
from tools.dev.kernel_lab import gluon_bench
from tracereader import Parser


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--m", type=int, default=8192, help="tokens (default: 8192)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--hidden", type=int, default=3072)
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument(
        "--configs", default="hopper,hopper-epi", help="names in fused_geglu.CONFIGS"
    )
    parser.add_argument("--quack", action="store_true", help="also QuACK's gemm_gated")
    parser.add_argument("--calls", type=int, default=2, help="launches each, after the check")
    args = parser.parse_args()
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in fused_geglu.CONFIGS]
    if unknown or args.calls < 1:
        print(
            f"error: --configs takes {', '.join(fused_geglu.CONFIGS)} and --calls >= 1; "
            f"got {args.configs!r}, {args.calls}",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    major, _ = torch.cuda.get_device_capability()
    no_quack = quack_gemm.unavailable(major, args.dtype) if args.quack else None
    if no_quack:  # our kernels are still worth profiling: say so and go on
        print(f"(QuACK not launched: {no_quack})")

    torch.set_grad_enabled(False)
    dtype = cli.DTYPES[args.dtype]
    torch.manual_seed(0)
    x = torch.randn(args.m, args.dim, device="cuda", dtype=dtype)
    scale = args.dim**-0.5
    gate = (torch.randn(args.hidden, args.dim, device="cuda") * scale).to(dtype)
    up = (torch.randn(args.hidden, args.dim, device="cuda") * scale).to(dtype)
    ref = F.gelu(F.linear(x.float(), gate.float()), approximate="tanh") * F.linear(
        x.float(), up.float()
    )
    calls = {}
    for name in names:
        cfg = fused_geglu.CONFIGS[name]
        packed = fused_geglu.pack(cfg, gate, up)
        calls[f"{name}: {cfg.describe()}"] = lambda packed=packed, cfg=cfg: fused_geglu.launch(
            x, packed, args.hidden, cfg
        )
    if args.quack and not no_quack:
        b = quack_gemm.gate_up_weight(gate, up)
        for what, tuned in quack_gemm.TUNED.items():
            calls[what] = lambda tuned=tuned: quack_gemm.gated(x, b, tuned=tuned)

    print(f"{torch.cuda.get_device_name()}: x [{args.m}, {args.dim}], hidden {args.hidden}")
    checked = []
    for what, call in calls.items():
        try:
            err = check.relative_error(call(), ref)  # the first call compiles (or autotunes)
        except Exception as error:  # one kernel failing must not hide the others
            print(f"FAILED {what}: {cli.one_line(error, 200)}")
            continue
        ok = err <= check.TOLERANCE[dtype]
        print(f"{'ok' if ok else 'WRONG':<6} {what}: relative error {err:.1e}")
        if ok:
            checked.append(call)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # what ncu --profile-from-start off reads: these launches only
    for call in checked:
        for _ in range(args.calls):
            call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0 if len(checked) == len(calls) else 1


if __name__ == "__main__":
    sys.exit(gluon_bench.run(main))  # Ctrl-C, a closed stdout, a shape too big: one line each
