"""modules/geglu/gluon.py's kernel on an SM90 GPU: checked at odd shapes, then timed beside QuACK.

check    every configuration asked for at odd shapes and the shape timed, against the
         float32 reference (relative error under common/check.py's bf16 tolerance); a
         compile error is printed whole, with the configuration that raised it;
kernels  the gate/up + GeGLU kernels that passed, modules/geglu/fused.py's "hopper" as committed,
         QuACK's gemm_gated (tuned=True and False, where it imports), cuBLAS gate+up as
         one GEMM and the same GEMM followed by torch.compile's GeGLU kernel (the unfused
         pair fusion has to beat: at a prompt's M = 512 the question of issue 28's prefill),
         timed in round-robin passes (do_bench medians, cold L2: the tuner's timing), so that
         every kernel is timed in the same power state; with --graphs the same passes again with
         each call replayed from a CUDA graph, and each call's host dispatch: do_bench's events
         include any time the GPU waits for the host's launch, and where a launch costs the host
         more than the GPU's L2 flush before it (gluon's on the H200 of run 1: 274.8 us of host
         dispatch per forward for 166 us of GPU work),
         eager timings read the host, not the kernel;
forward  the whole MLP: the fastest gluon configuration, each named by --forwards (auto's
         candidate, gluon-coop, by default), "hopper", QuACK + cuBLAS down, in passes alike.
         Ratios against QuACK tuned=True: the issue's targets (<= 1.00).

  python -m tools.dev.kernel_lab.gluon_bench --m 8192 --dim 768 --hidden 3072 --graphs
  python -m tools.dev.kernel_lab.gluon_bench --m 8192 --dim 4096 --hidden 14336 --configs quick
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from common import check, cli
from modules import quack_gemm
from modules.geglu import fused as fused_geglu
from modules.models import GeGLUMLP, geglu_reference
from tools import fused_mlp_candidates as candidates
from tools import fused_mlp_timing as measure
from tools.tune_fused_mlp import ONE

ODD_SHAPES = ((1, 64, 40), (37, 264, 200), (1000, 776, 3080), (4099, 512, 1032))  # M, dim, hidden
ROUNDS = 5
UNFUSED = "cuBLAS gate+up, then the GeGLU (torch.compile: 2 kernels)"
TARGET = "QuACK gemm_gated, tuned=True"  # the kernel the ratios are against


def reference(x, gate, up, activation="gelu_tanh"):
    g = F.linear(x.float(), gate.float())
    g = F.silu(g) if activation == "silu" else F.gelu(g, approximate="tanh")
    return g * F.linear(x.float(), up.float())


def try_config(cfg, x, gate, up, hidden) -> tuple[object | None, str]:
    """(a call of the kernel under cfg, "") where it compiles and is right, else (None, why)."""
    packed = fused_geglu.pack(cfg, gate, up)

    def call():
        return fused_geglu.launch(x, packed, hidden, cfg)

    try:
        out = call()
        torch.cuda.synchronize()
    except Exception as err:
        print(f"  FAILED {cfg.describe()}: {measure.first_line(err)}")
        traceback.print_exc()
        if not measure.cuda_alive():
            raise
        return None, measure.first_line(err)
    err = measure.rel_err(out, reference(x, gate, up, cfg.activation))
    if not err <= check.TOLERANCE[x.dtype]:
        print(f"  WRONG  {cfg.describe()}: relative error {err:.2e}")
        return None, f"relative error {err:.2e}"
    return call, f"err {err:.1e}"


def interleaved(calls: dict) -> dict[str, list[float]]:
    """Round-robin do_bench medians (us); a call that fails is dropped, said once."""
    samples = {what: [] for what in calls}
    for _ in range(ROUNDS):
        for what in list(calls):
            try:
                samples[what].append(measure.bench_us(calls[what]))
            except Exception as err:
                print(f"  FAILED while timing {what}: {measure.first_line(err)}")
                del calls[what], samples[what]
    return samples


def graphed(fn):
    """fn captured once in a CUDA graph (after a warm call on a side stream, as torch's
    docs do it): its replay costs the host a few us, so do_bench's events time the GPU work
    alone. The output buffers are the graph's own; the replay reruns the same kernels."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay


def graph_calls(calls: dict) -> dict:
    """{what: the graph's replay} for every call that captures; one that does not is said."""
    replays = {}
    for what, fn in calls.items():
        try:
            replays[what] = graphed(fn)
        except Exception as err:
            print(f"  (not captured: {what}: {measure.first_line(err)})")
            torch.cuda.synchronize()
    return replays


def report(samples: dict[str, list[float]], against: str | None, flops: float) -> dict:
    median = {w: sorted(v)[len(v) // 2] for w, v in samples.items() if v}
    for what, us in sorted(median.items(), key=lambda item: item[1]):
        ratio = f"x{us / median[against]:.3f} of {against}" if against in median else ""
        spread = f"{min(samples[what]):.1f}-{max(samples[what]):.1f}"
        tflops = flops / (us * 1e-6) / 1e12
        print(f"  {us:8.1f} us  {tflops:4.0f} TFLOP/s  {what:<66} {ratio}  rounds {spread}")
    return median


def shape_args(parser: argparse.ArgumentParser) -> None:
    """--m, --dim, --hidden (the post's shape by default), each a size the kernels can take."""
    size = cli.int_in(1, 1 << 20, "the kernels index in 32 bits")
    parser.add_argument("--m", type=size, default=8192, help="rows of x (default: 8192)")
    parser.add_argument("--dim", type=size, default=768, help="x's columns (default: 768)")
    parser.add_argument("--hidden", type=size, default=3072, help="gate's rows (default: 3072)")


def refusal(args) -> str | None:
    """Why this shape or machine cannot be timed, or None: rows of 16 bytes (TMA) and fewer than
    2^31 elements in each tensor; an SM90 GPU."""
    if args.dim % 8 or args.hidden % 8:
        return (f"--dim and --hidden must be multiples of 8 (TMA's 16-byte rows); got "
                f"{args.dim}, {args.hidden}")  # fmt: skip
    if max(args.m, 2 * args.hidden) * max(args.dim, args.hidden) >= 2**31:
        return "the tensors of that shape pass 2^31 elements, which the kernels do not index"
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        return "needs an SM90 GPU (H100, H200)"
    return None


def run(main) -> int:
    """main through the one runner (tracereader.commandline.run): Ctrl-C and a closed stdout are
    one line each; a shape that does not fit the GPU's memory also one line, exit 2."""
    from tracereader import run as run_main

    def too_large(err: BaseException) -> tuple[int, str] | None:
        if isinstance(err, torch.OutOfMemoryError):
            return 2, f"the shape does not fit this GPU's memory ({cli.one_line(err)})"
        return None

    return run_main(main, known=too_large)


def parse(argv=None):
    """The flags, or why not (one line, exit 2): (args, the --forwards names) or (None, why)."""
    parser = cli.Parser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    shape_args(parser)
    parser.add_argument(
        "--configs", choices=["quick", "all"], default="quick", help="the tuner's gluon list"
    )
    parser.add_argument("--skip-odd", action="store_true", help="no odd-shape checks")
    parser.add_argument(
        "--graphs",
        action="store_true",
        help="also time every call replayed from a CUDA graph (GPU time alone) and its host "
        "dispatch",
    )
    parser.add_argument(
        "--forwards",
        default="gluon-coop",
        help="also time the whole forward with these fused_geglu.CONFIGS names, comma-separated "
        "('' for none; default: gluon-coop, the configuration auto may take)",
    )
    args = parser.parse_args(argv)
    named = [n.strip() for n in args.forwards.split(",") if n.strip()]
    if unknown := [n for n in named if n not in fused_geglu.CONFIGS]:
        return None, (f"--forwards takes names of fused_geglu.CONFIGS "
                      f"({', '.join(fused_geglu.CONFIGS)}); got {', '.join(unknown)}")  # fmt: skip
    if why := refusal(args):
        return None, why
    return args, named


def check_odd_shapes(configs: list) -> int:
    """Every configuration at ODD_SHAPES against the float32 reference: how many failed."""
    print("\ncheck: odd shapes against the float32 reference")
    failed, dev, dtype = 0, torch.device("cuda"), torch.bfloat16
    for M, dim, hidden in ODD_SHAPES:
        torch.manual_seed(0)
        x = torch.randn(M, dim, device=dev, dtype=dtype)
        gate, up = (torch.randn(hidden, dim, device=dev, dtype=dtype) / dim**0.5 for _ in "gu")
        for cfg in configs:
            call, note = try_config(cfg, x, gate, up, hidden)
            failed += call is None
            print(f"  {'ok ' if call else 'BAD'} M={M} dim={dim} hidden={hidden} "
                  f"{cfg.describe()}: {note}")  # fmt: skip
    return failed


def kernel_calls(configs: list, mlp, x) -> tuple[dict, int, dict]:
    """Each gate/up kernel that passes its check at the timed shape, cuBLAS's GEMM alone and
    followed by Inductor's GeGLU kernel, QuACK's variants: ({what: call}, how many gluon
    configurations failed, QuACK's variants {what: tuned})."""
    hidden = mlp.gate_proj.weight.shape[0]
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    calls, failed = {}, 0
    for cfg in configs + [fused_geglu.CONFIGS["hopper"]]:
        t0 = time.perf_counter()
        call, note = try_config(cfg, x, gate, up, hidden)
        failed += call is None and cfg.path == "gluon"
        if call:
            calls[f"ours: {cfg.describe()}"] = call
            print(
                f"  ready: {cfg.describe()} ({note}, first call {time.perf_counter() - t0:.1f} s)"
            )
    concat = torch.cat([gate, up]).contiguous()
    calls[ONE] = lambda: F.linear(x, concat)

    @torch.compile(fullgraph=True)
    def unfused(x):  # what fusing must beat: cuBLAS's GEMM, then Inductor's one GeGLU kernel
        h = F.linear(x, concat)
        return F.gelu(h[:, :hidden], approximate="tanh") * h[:, hidden:]

    calls[UNFUSED] = lambda: unfused(x)
    b_quack = quack_gemm.gate_up_weight(gate, up)
    quacks = quack_gemm.variants(9)
    if not quacks:
        print(f"  (QuACK not timed: {quack_gemm.unavailable(9)})")
    for what, tuned in quacks.items():
        t0 = time.perf_counter()
        try:
            out = quack_gemm.gated(x, b_quack, tuned=tuned)
            torch.cuda.synchronize()
        except Exception as err:
            print(f"  FAILED {what}: {measure.first_line(err)}")
            continue
        err = measure.rel_err(out, reference(x, gate, up))
        print(f"  ready: {what} (err {err:.1e}, first call {time.perf_counter() - t0:.1f} s)")
        calls[what] = lambda tuned=tuned: quack_gemm.gated(x, b_quack, tuned=tuned)
    return calls, failed, quacks


def time_kernels(args, calls: dict, configs: list):
    """The kernels in round-robin passes (and from CUDA graphs, with --graphs): the fastest
    gluon configuration of the GeGLU's, or None."""
    M, dim, hidden = args.m, args.dim, args.hidden
    print(f"  GPU before: {measure.gpu_state()}")
    print("  eager calls (do_bench: each call launched after an L2 flush)")
    median = report(interleaved(calls), TARGET, 4 * M * dim * hidden)
    print(f"  GPU after: {measure.gpu_state()}")
    if args.graphs:
        print("  the same, each call replayed from a CUDA graph (GPU time alone)")
        median = report(interleaved(graph_calls(calls)), TARGET, 4 * M * dim * hidden)
        print(f"  GPU after: {measure.gpu_state()}")
        print("  host dispatch per eager call (calls issued back to back, no GPU wait)")
        for what, fn in calls.items():
            print(f"  {measure.host_us(fn):8.1f} us  {what}")
    gluon_times = {  # the GeGLU's: the forward below is the GeGLU MLP
        w: us for w, us in median.items() if w.startswith("ours: gluon") and "silu" not in w
    }
    if not gluon_times:
        return None
    fastest = min(gluon_times, key=gluon_times.get)
    best = next(c for c in configs if f"ours: {c.describe()}" == fastest)
    print(f"  fastest gluon: {best.describe()}")
    print(f"  paste into CONFIGS: {candidates.as_code(best)}")
    return best


def time_forwards(args, mlp, x, best, named: list[str], quacks: dict) -> None:
    """The whole MLP under the fastest gluon configuration, each --forwards name, hopper and
    QuACK + cuBLAS down, checked, then in round-robin passes (and from CUDA graphs)."""
    M, dim, hidden = args.m, args.dim, args.hidden
    print(f"\nforward at M={M}, dim={dim}, hidden={hidden}: gate/up + GeGLU, then cuBLAS down")
    x3 = x.view(1, M, dim)
    forwards = {}
    if best:
        fused_geglu.CONFIGS["gluon-best"] = best
        forwards["fused MLP, gluon (fastest above)"] = fused_geglu.FusedGeGLUMLP(mlp, "gluon-best")
    for name in named:
        what = f"fused MLP, {name}: {fused_geglu.CONFIGS[name].describe()}"
        forwards[what] = fused_geglu.FusedGeGLUMLP(mlp, name)
    forwards["fused MLP, hopper"] = fused_geglu.FusedGeGLUMLP(mlp, "hopper")
    for what, tuned in quacks.items():
        forwards[f"QuACK MLP: {what} + cuBLAS down"] = quack_gemm.QuackGeGLUMLP(mlp, tuned=tuned)
    y_ref = geglu_reference(x3, mlp)
    fcalls = {}
    for what, module in forwards.items():
        try:
            err = measure.rel_err(module(x3), y_ref)
        except Exception as err:
            print(f"  FAILED {what}: {measure.first_line(err)}")
            traceback.print_exc()
            continue
        print(f"  ready: {what} (err {err:.1e})")
        fcalls[what] = lambda module=module: module(x3)
    against = f"QuACK MLP: {TARGET} + cuBLAS down"
    report(interleaved(fcalls), against, 6 * M * dim * hidden)
    if args.graphs:
        print("  the same, each forward replayed from a CUDA graph (GPU time alone)")
        report(interleaved(graph_calls(fcalls)), against, 6 * M * dim * hidden)


def main(argv: list[str] | None = None) -> int:
    args, named = parse(argv)
    if args is None:
        print(f"error: {named}", file=sys.stderr)
        return 2
    import triton

    torch.set_grad_enabled(False)
    dev, dtype = torch.device("cuda"), torch.bfloat16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    # and 08_generate's SiLU-gated one: checked, and timed beside the GeGLU's
    configs = candidates.gluon_candidates(args.configs == "quick")
    configs += [fused_geglu.CONFIGS["gluon-silu"]]
    for cfg in configs:
        plan = fused_geglu.gluon().plan(cfg)
        print(f"config: {cfg.describe()}  ({plan})")
    failed = 0 if args.skip_odd else check_odd_shapes(configs)

    M, dim, hidden = args.m, args.dim, args.hidden
    print(f"\nkernels at M={M}, dim={dim}, hidden={hidden} (bf16)")
    torch.manual_seed(0)
    mlp = GeGLUMLP(dim, hidden).to(dev, dtype).eval()
    x = torch.randn(M, dim, device=dev, dtype=dtype)
    calls, bad, quacks = kernel_calls(configs, mlp, x)
    best = time_kernels(args, calls, configs)
    time_forwards(args, mlp, x, best, named, quacks)
    return 1 if failed + bad else 0


if __name__ == "__main__":
    sys.exit(run(main))
