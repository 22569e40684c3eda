"""Where does 08_generate's prefill lose against its GEMMs? (issue 28's probe; one GPU.)

At the 8b preset (batch 1, prompt 512, bf16, fused projections) the lesson's --bench line held
prefill to "its FLOPs at the rate its GEMMs reach alone" (until --fused-gate beat that rate; it
now holds prefill to its GEMMs in sequence). This measures both sides of that:

    attention  one layer's prompt attention, each way SDPA can be asked for it: the prompt's
               own keys, causal, grouped queries (what modules/llama.py does now), per backend; the
               same with k and v repeated per query head; and the cache's full length behind
               a mask (what it did before). do_bench medians, L2 flushed.
    ruler      the prefill's GEMMs: each shape alone on random N(0, 1) data (the old ruler);
               the same with weights drawn like the model's (std 0.02); and the model's own
               GEMMs in the prefill's order as one CUDA graph (--bench's ruler), replayed
               after an idle pause (as a generation meets them) and back to back. With the SM
               clock and the power nvidia-smi reads during each.
    kernels    each shape's kernel as cuBLAS picks it alone and inside the graph (names,
               us), from one profiled call of each.

    python3 -m tools.dev.kernel_lab.prefill_probe [--parts attention,ruler,kernels]
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from common import cli
from common.generation import Variant
from common.measuring import generation as measured
from common.measuring import timing
from modules import llama
from tracereader import Parser

SHAPE = dict(batch=1, prompt=512, max_len=768)  # the lesson's 8b bench: 512 + 256 new tokens


@contextlib.contextmanager
def clocks(label: str):
    """nvidia-smi's SM clock (MHz) and power (W) sampled every 50 ms while the block runs."""
    try:
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
             "-lms", "50"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    except OSError:  # no nvidia-smi: the timings without the clocks
        yield
        return
    try:
        yield
    finally:
        smi.terminate()
        rows = [line.split(",") for line in smi.communicate()[0].splitlines() if "," in line]
        mhz = [float(r[0]) for r in rows if r[0].strip().replace(".", "").isdigit()]
        watts = [float(r[1]) for r in rows if r[1].strip().replace(".", "").isdigit()]
        if mhz and watts:
            print(f"    [{label}: SM clock median {statistics.median(mhz):.0f} MHz (min "
                  f"{min(mhz):.0f}), power median {statistics.median(watts):.0f} W (max "
                  f"{max(watts):.0f}), {len(mhz)} samples]")  # fmt: skip


def attention(cfg: llama.Config) -> None:
    b, s, n = SHAPE["batch"], SHAPE["prompt"], SHAPE["max_len"]
    dev, bf16 = "cuda", torch.bfloat16
    q = torch.randn(b, s, cfg.heads, cfg.head_dim, device=dev, dtype=bf16).transpose(1, 2)
    k, v = (torch.randn(b, cfg.kv_heads, s, cfg.head_dim, device=dev, dtype=bf16) for _ in "kv")
    cache_k, cache_v = (torch.zeros(b, cfg.kv_heads, n, cfg.head_dim, device=dev, dtype=bf16)
                        for _ in "kv")  # fmt: skip
    cache_k[:, :, :s], cache_v[:, :, :s] = k, v
    positions = torch.arange(s, device=dev)
    mask = torch.arange(n, device=dev) <= positions[:, None]
    group = cfg.heads // cfg.kv_heads
    ref = llama.sdpa_attention(q, cache_k, cache_v, positions, mask).float()
    ways = {
        "cache's 768 keys, masked (before)": lambda: llama.sdpa_attention(
            q, cache_k, cache_v, positions, mask
        ),
        "own keys, causal, GQA (now)": lambda: llama.sdpa_attention(q, k, v, positions, None),
    }
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION):  # fmt: skip
        ways[f"own keys, causal, GQA, {backend.name}"] = lambda backend=backend: _forced(
            backend, q, k, v, enable_gqa=True
        )
        ways[f"own keys, causal, k/v repeated (timed), {backend.name}"] = lambda backend=backend: (
            _forced(backend, q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
        )
    print(f"attention, one layer: b {b}, {cfg.heads} heads over {cfg.kv_heads} kv heads, "
          f"prompt {s}, head_dim {cfg.head_dim}, bf16 (do_bench median, L2 flushed)")  # fmt: skip
    for name, fn in ways.items():
        try:
            out = fn()
        except RuntimeError as e:  # a backend that does not take this input says why
            print(f"  {name:48s} refused: {str(e).splitlines()[0][:110]}")
            continue
        err = (out.float() - ref).abs().max().item()
        flat = out.transpose(1, 2).is_contiguous()
        t = timing.time_gpu(fn).median_s
        print(f"  {name:48s} {t * 1e6:7.1f} us  max |diff| {err:.3g}  "
              f"[b, s, h, d] contiguous: {flat}  kernels: {_kernels(fn)}")  # fmt: skip


def _forced(backend, q, k, v, **kw):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)


def _kernels(fn) -> str:
    """The kernels one call runs, with their GPU times (one profiled call)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    gpu = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return ", ".join(f"{e.name[:60]} {e.device_time:.1f}us" for e in gpu)


def ruler(model: llama.Llama) -> None:
    # the lesson's own list of prefill's GEMMs, and --bench's graph of them
    run = cli.Run(torch.device("cuda"), torch.bfloat16, "bf16")
    v = Variant(model.cfg, SHAPE["batch"], SHAPE["prompt"], SHAPE["max_len"], "static", "ours",
                  True, True, fused=True)  # fmt: skip
    shapes, calls = measured.prefill_gemms(v), measured.prefill_weights(v, model)
    flops = measured.gemm_flops(shapes)
    print(f"ruler: the prefill's {len(calls)} GEMMs, {flops / 1e12:.3f} TFLOP")
    for label, std in (("each shape alone, N(0, 1) data (--bench's old ruler)", 1.0),
                       ("each shape alone, weights std 0.02 as the model's", 0.02)):  # fmt: skip
        with clocks(label):
            total = 0.0
            for (mm, k, n), count in shapes.items():
                a = torch.randn(mm, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * std
                t = timing.time_gpu(lambda a=a, w=w: a @ w.t()).median_s
                total += count * t
                print(f"    ({mm}, {k}, {n}) x{count}: {t * 1e6:.1f} us, "
                      f"{2 * mm * k * n / t / 1e12:.0f} TFLOP/s")  # fmt: skip
        print(f"  {label}: {total * 1e3:.3f} ms, {flops / total / 1e12:.0f} TFLOP/s")
    replay = measured.gemm_sequence(calls, run)
    for label, pause in (("the model's GEMMs in order, one graph, after 50 ms idle", 0.05),
                         ("the same, replayed back to back", 0.0)):  # fmt: skip
        samples = []
        with clocks(label):
            for _ in range(30):
                if pause:
                    torch.cuda.synchronize()
                    time.sleep(pause)
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                replay()
                end.record()
                if pause:
                    end.synchronize()
                samples.append((start, end))
            torch.cuda.synchronize()
        t = statistics.median(s.elapsed_time(e) / 1e3 for s, e in samples)
        print(f"  {label}: {t * 1e3:.3f} ms, {flops / t / 1e12:.0f} TFLOP/s")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        replay()
        torch.cuda.synchronize()
    per: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            per.setdefault(e.name, []).append(e.device_time)
    print("  kernels in the graph (name: count, median us):")
    for name, us in per.items():
        print(f"    {name[:90]}: {len(us)}, {statistics.median(us):.1f}")


def kernels_alone() -> None:
    cfg = llama.PRESETS["8b"]
    m, kv = SHAPE["prompt"], cfg.kv_heads * cfg.head_dim
    print("kernels cuBLAS picks for each shape alone (one profiled call after a warm one):")
    for k, n in ((cfg.dim, cfg.dim + 2 * kv), (cfg.dim, cfg.dim), (cfg.dim, 2 * cfg.hidden),
                 (cfg.hidden, cfg.dim)):  # fmt: skip
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        a @ w.t()
        torch.cuda.synchronize()
        print(f"  ({m}, {k}, {n}): {_kernels(lambda a=a, w=w: a @ w.t())}")


def main(argv=None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--parts",
        default="attention,ruler,kernels",
        help="comma-separated: attention, ruler, kernels (default: all)",
    )
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    if unknown := set(parts) - {"attention", "ruler", "kernels"}:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    if not torch.cuda.is_available():
        print("error: the probe times GPU kernels; this machine has no GPU", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    cfg = llama.PRESETS["8b"]
    if "attention" in parts:
        attention(cfg)
    if "kernels" in parts:
        kernels_alone()
    if "ruler" in parts:
        model = llama.build(cfg, SHAPE["max_len"], "cuda", torch.bfloat16).fuse_projections()
        ruler(model)
    return 0


if __name__ == "__main__":
    from tracereader import run_cli  # Ctrl-C, a closed stdout: one line

    sys.exit(run_cli(main))
