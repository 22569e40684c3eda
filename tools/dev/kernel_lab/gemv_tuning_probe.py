"""How repeatable is `--autotune`'s tuning of a batch-1 GEMV? (issue 28's probe.)

08_generate's `--autotune` turns on Inductor's coordinate-descent tuning, under which a GEMV at
one row is lowered as a reduction (a multiply and a sum) whose tile Inductor picks by timing
candidates on the machine. The same command gave 4.40 and 4.55 ms a token on two H200s and
5.65 and 6.45 ms on two H100s; in the slow H100's trace two kernels of one shape (the qkv GEMV
with its RMSNorm) ran 18.8 and 46.8 us. This compiles each decode GEMV as the lesson writes it
(RMSNorm then the projection; the down projection behind SiLU(gate) * up), afresh --repeats
times (a new cache each time, so each compile tunes anew), under each of --settings, and times
each compiled result as a CUDA graph over 8 copies of its weights (no call finds them in L2):

    base        the lesson's --autotune settings
    cudagraph   + Inductor timing each candidate inside a CUDA graph (no host launch in it)
    alldirs     + coordinate descent trying every direction at each step
    radius2     + a search radius of 2

    python3 -m tools.dev.kernel_lab.gemv_tuning_probe [--settings base,cudagraph] [--repeats 3]

Slow on purpose: each fresh tuning recompiles every candidate (an H200 took the 380 s it was
given for qkv's three base tunings). A setting this torch lacks is said and skipped
(autotune_cudagraph_benchmarking: not in torch 2.11).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F

from tools.dev.kernel_lab.decode_kernels_probe import COPIES, graph_time
from tracereader import Parser

SETTINGS = {
    "base": {},
    "cudagraph": {"autotune_cudagraph_benchmarking": True},
    "alldirs": {"coordinate_descent_check_all_directions": True},
    "radius2": {"coordinate_descent_search_radius": 2},
}
# name: (N, K, the prologue): the 8b preset's fused projections at one row
SHAPES = {"qkv": (6144, 4096, "norm"), "o": (4096, 4096, None), "gate_up": (28672, 4096, "norm"),
          "down": (4096, 14336, "silu")}  # fmt: skip


def projection(prologue: str | None):
    def norm(x, g, w):
        return F.linear(F.rms_norm(x, (x.shape[-1],), g, 1e-5), w)

    def silu(x, g, w):
        gate, up = x.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, w)

    return {"norm": norm, "silu": silu, None: lambda x, g, w: F.linear(x, w)}[prologue]


def operands(n: int, k: int, prologue, copies: int):
    width = 2 * k if prologue == "silu" else k
    return [(torch.randn(1, width, device="cuda", dtype=torch.bfloat16),
             torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5,
             torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02)
            for _ in range(copies)]  # fmt: skip


def main(argv=None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="base,cudagraph",
                        help=f"comma-separated, of {', '.join(SETTINGS)}")  # fmt: skip
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="fresh tunings per setting")
    args = parser.parse_args(argv)
    settings, shapes = args.settings.split(","), args.shapes.split(",")
    wrong = [s for s in settings if s not in SETTINGS] + [s for s in shapes if s not in SHAPES]
    if wrong or args.repeats < 1:
        print(f"error: unknown {wrong or 'repeats'}: settings {list(SETTINGS)}, shapes "
              f"{list(SHAPES)}, repeats >= 1", file=sys.stderr)  # fmt: skip
        return 2
    if not torch.cuda.is_available():
        print("error: the probe times GPU kernels: no CUDA device here", file=sys.stderr)
        return 2
    import torch._inductor.config as config

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    defaults = {k: getattr(config, k) for s in SETTINGS.values() for k in s if hasattr(config, k)}
    for shape in shapes:
        n, k, prologue = SHAPES[shape]
        data = operands(n, k, prologue, COPIES)
        fn, nbytes = projection(prologue), n * k * 2
        want = fn(*[t.float() for t in data[0]])
        for setting in settings:
            missing = [key for key in SETTINGS[setting] if not hasattr(config, key)]
            if missing:
                print(f"{shape} {setting}: this torch has no {missing}", flush=True)
                continue
            times = []
            for _ in range(args.repeats):
                torch._dynamo.reset()
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="gemv_probe_")
                knobs = {"coordinate_descent_tuning": True, "max_autotune": True,
                         "force_disable_caches": True}  # fmt: skip
                with config.patch({**defaults, **SETTINGS[setting], **knobs}):
                    compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs")
                    got = compiled(*data[0]).float()
                if not torch.allclose(got, want, rtol=3e-2, atol=3e-2):
                    print(f"{shape} {setting}: WRONG result", flush=True)
                times.append(graph_time(compiled, data))
            us = [t * 1e6 for t in times]
            print(f"{shape:8} {setting:10} {' '.join(f'{t:6.1f}' for t in us)} us  "
                  f"(median {statistics.median(us):.1f}; {nbytes / min(times) / 1e12:.2f} TB/s at "
                  f"best, {nbytes / max(times) / 1e12:.2f} at worst)", flush=True)  # fmt: skip
        del data
    return 0


if __name__ == "__main__":
    from tracereader import run_cli  # Ctrl-C, a closed stdout: one line

    sys.exit(run_cli(main))
