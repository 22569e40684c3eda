"""Does a forward slow down when the GPU has been busy for a while? (Its power limit.)

Times 03_fused_mlp.py's forward (the post's shape, bf16) with do_bench every ~2 s while keeping
the GPU busy with the same forward in between, and prints beside each sample the SM clock,
power draw and throttle reasons that nvidia-smi reports at that moment. On the lent H100 and
H200 (700 W) the first sample reads 173-176 us at 1980 MHz; within two seconds the GPU sits at its
power limit (reason 0x4, software power cap), the clock drops to ~1500-1800 MHz, and the same
forward reads 187-192 us. Timings taken one after another across such a change compare power
states, not code: tools/tune_fused_mlp.py times its forwards round-robin for that reason.

    python3 -m tools.sustained_load --seconds 40        (needs a CUDA GPU)
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from common import cli, fused_kernel
from common.measuring import timing
from modules.geglu import fused as fused_geglu
from modules.models import GeGLUMLP
from tools.tune_fused_mlp import gpu_state
from tracereader import Parser, run


def main() -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0, help="how long (default: 40)")
    args = parser.parse_args()
    if not args.seconds > 0:
        parser.error("--seconds must be positive")
    if not torch.cuda.is_available():
        print("error: tools/sustained_load.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.set_grad_enabled(False)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    mlp = GeGLUMLP(768, 3072).to(dev, torch.bfloat16).eval()
    run = cli.Run(dev, torch.bfloat16, "bf16")
    kernel = fused_kernel.choose_kernel("auto", run, 768, 3072)
    fused = fused_geglu.FusedGeGLUMLP(mlp, fused_kernel.config_name(kernel, run, auto=True)).eval()
    x = torch.randn(64, 128, 768, device=dev, dtype=torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}; idle: {gpu_state()}")
    print("  time   forward (do_bench median)   SM clock, max, power, limit, throttle reasons")
    start = time.time()
    while time.time() - start < args.seconds:
        us = timing.time_gpu(lambda: fused(x)).median_s * 1e6
        print(f"  {time.time() - start:5.1f} s  {us:7.1f} us   {gpu_state()}", flush=True)
        busy_until = time.time() + 2
        while time.time() < busy_until:  # keep the GPU busy between samples
            for _ in range(50):
                fused(x)
            torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
