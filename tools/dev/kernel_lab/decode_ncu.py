"""One decode token (or, --prefill, the prompt) of 08_generate's 8B model under Nsight Compute:
what each kernel reads from DRAM and how near the memory's peak it runs (issue 28's "where a
target is missed, Nsight Compute's figures"). Builds the model in bf16 (random weights, no
float32 reference: the lesson checks tokens), generates once to compile and capture, then
brackets one decode step (or one prefill) with cudaProfilerStart/Stop for
`ncu --profile-from-start off`:

    ncu --profile-from-start off --graph-profiling node --section SpeedOfLight \
        --section MemoryWorkloadAnalysis -o OUT python3 -m tools.dev.kernel_lab.decode_ncu \
        --compile --cuda-graphs --fuse --attention split [--autotune]

Without ncu it runs the same (the bracket is a no-op) and prints the step's time.
"""

from __future__ import annotations

import importlib.util
import sys
import time

import torch

from common import cli
from modules import llama
from tracereader import Parser


def lesson():
    spec = importlib.util.spec_from_file_location("script_08_generate", "08_generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    p = Parser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="8b", choices=list(llama.PRESETS))
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--autotune", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true")
    p.add_argument("--fuse", action="store_true")
    p.add_argument("--attention", default="sdpa", choices=list(llama.ATTENTION))
    p.add_argument("--gemv", action="store_true", help="decode's projections as decode_gemv's")
    p.add_argument("--prefill", action="store_true", help="bracket the prefill, not a token")
    args = p.parse_args()
    cfg = llama.PRESETS[args.preset]
    if not (
        0 < args.prompt and 0 < args.new_tokens and args.prompt + args.new_tokens <= cfg.context
    ):
        print(f"error: --prompt and --new-tokens: positive, at most {cfg.context} together",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.gemv and not args.fuse:
        print("error: --gemv needs --fuse (its GEMVs read the fused qkv and gate_up)",
              file=sys.stderr)  # fmt: skip
        return 2
    if not torch.cuda.is_available():
        print("error: decode_ncu needs a CUDA GPU", file=sys.stderr)
        return 2
    g = lesson()
    run = cli.Run(torch.device("cuda"), torch.bfloat16, "bf16")
    max_len = -(-(args.prompt + args.new_tokens - 1) // 16) * 16
    v = g.Variant(cfg, 1, args.prompt, max_len, "static", "ours", args.compile,
                  args.cuda_graphs, args.fuse, args.attention, args.autotune,
                  args.gemv)  # fmt: skip
    model = llama.build(cfg, max_len + 1, run.device, run.dtype)
    model.attend = llama.ATTENTION[args.attention]
    if args.fuse:
        model.fuse_projections()
    if args.gemv:
        model.decode = g.decode_gemv.decode
    prompt = g.make_prompt(v, 0, run)
    generation = g.Generation(v, model, prompt, args.new_tokens, run)
    start = time.perf_counter()
    generation(args.new_tokens)  # compiles, captures, and fills the cache to its end
    torch.cuda.synchronize()
    print(f"first generation: {time.perf_counter() - start:.1f} s", flush=True)
    generation.prefill()  # position back at the prompt's end
    for _ in range(args.new_tokens // 2 - 1):  # to the mean length, as the floor counts it
        generation.step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    t0 = time.perf_counter()
    (generation.prefill if args.prefill else generation.step)()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    torch.cuda.cudart().cudaProfilerStop()
    what = (
        "prefill"
        if args.prefill
        else f"decode step at position {args.prompt + args.new_tokens // 2}"
    )
    print(f"profiled {what}: {(t1 - t0) * 1e3:.3f} ms (under ncu: its replays)")
    return 0


if __name__ == "__main__":
    from tracereader import run_cli  # Ctrl-C, a closed stdout: one line

    sys.exit(run_cli(main))
