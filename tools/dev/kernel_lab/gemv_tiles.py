"""modules/decode_gemv.py's tiles, measured (issue 28): for each projection of the 8b preset at one
row,
with the prologue and residual 08_generate's --gemv gives it, every (BLOCK_N, BLOCK_K,
num_warps) of a small grid timed as a CUDA graph of 8 calls over 8 copies of the weight (none
found in L2; the head: 2 copies), median of 20 replays, beside cuBLAS's F.linear of the same
product (no prologue). Prints the 3 fastest tiles per shape and the TILES table to paste.

    python3 -m tools.dev.kernel_lab.gemv_tiles            (a GPU; ~1 minute)
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from modules import decode_gemv
from tools.dev.kernel_lab.decode_kernels_probe import COPIES, graph_time
from tracereader import Parser

# name: (N, K, prologue, residual), the 8b preset's fused projections and head
SHAPES = {
    "qkv": (6144, 4096, "norm", False),
    "o": (4096, 4096, "none", True),
    "gate_up": (28672, 4096, "norm", False),
    "down": (4096, 14336, "gate", True),
    "head": (128256, 4096, "norm", False),
}
TILES = [(bn, bk, w) for bn in (2, 4, 8, 16, 32) for bk in (128, 256, 512, 1024) for w in (4, 8)]


def main(argv=None) -> int:
    Parser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    if not torch.cuda.is_available():
        print("error: the tiles are timed on a GPU: no CUDA device here", file=sys.stderr)
        return 2
    dev, bf16 = "cuda", torch.bfloat16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    best_tiles = {}
    for name, (n, k, prologue, residual) in SHAPES.items():
        copies = 2 if n > 100_000 else COPIES
        width = 2 * k if prologue == "gate" else k
        args = [(torch.randn(1, 1, width, device=dev, dtype=bf16),
                 torch.randn(n, k, device=dev, dtype=bf16) * 0.02,
                 torch.rand(k, device=dev, dtype=bf16) + 0.5,
                 torch.randn(1, 1, n, device=dev, dtype=bf16) if residual else None)
                for _ in range(copies)]  # fmt: skip
        nbytes = n * k * 2
        linear = graph_time(lambda x, w, g, r, k=k: F.linear(x[..., :k], w), args)
        timed = []
        for tile in TILES:

            def run(x, w, g, r, tile=tile, prologue=prologue):
                return decode_gemv.launch(x, w, prologue, g, 1e-5, r, tile=tile)

            try:
                timed.append((graph_time(run, args), tile))
            except Exception as e:  # noqa: BLE001  (a probe: say it and go on)
                print(f"  {name} {tile}: {type(e).__name__}: {str(e)[:120]}")
        timed.sort()
        best_tiles[(n, k)] = timed[0][1]
        print(f"{name} [{n} x {k}], {prologue}{' + residual' if residual else ''}, "
              f"{nbytes / 1e6:.1f} MB: cuBLAS {linear * 1e6:.1f} us "
              f"({nbytes / linear / 1e12:.2f} TB/s)", flush=True)  # fmt: skip
        for t, tile in timed[:3]:
            print(f"  {tile}: {t * 1e6:.1f} us ({nbytes / t / 1e12:.2f} TB/s)")
        print(f"  slowest {timed[-1][1]}: {timed[-1][0] * 1e6:.1f} us")
        del args
    print(f"TILES = {best_tiles}")
    return 0


if __name__ == "__main__":
    from tracereader import run_cli  # Ctrl-C, a closed stdout: one line

    sys.exit(run_cli(main))
