"""Why one-call timings of small shapes are noisy, and which numbers to trust instead.

For the GeGLU MLP at a small and the post's shape, eager and compiled, repeats each GPU timing
several times: do_bench (each call behind an L2 flush), calls queued back to back, the host's
time to issue one call, and the GPU time of the forward's kernels (profiled). Also times the
flush itself. Where the host needs longer to issue a call than the GPU needs for the flush,
do_bench's sample contains the difference, and it moves with the host.

    uv run python -m tools.dev.kernel_lab.small_shape_timing            (needs a CUDA GPU)
"""

from __future__ import annotations

import statistics
import sys

import torch

from common.measuring import timing
from modules.models import GeGLUMLP
from tracereader import run

REPEATS = 5


def gpu_kernel_us(fn, calls: int = 5) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.time_range.elapsed_us() for e in kernels) / calls


def flush_us() -> float:
    from triton import runtime

    cache = runtime.driver.active.get_empty_cache_for_benchmark()
    return timing.time_gpu_queued(lambda: runtime.driver.active.clear_cache(cache)).median_s * 1e6


def main() -> int:
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"L2 flush before each do_bench call: {flush_us():.1f} us of GPU time")
    bench_head = f"do_bench median us, {REPEATS} repeats"
    print(f"{'variant':<15} {'shape':>7} {bench_head:<44} {'queued':>7} {'host':>7} {'GPU':>7}")
    variants = {"eager": None, "compile": {}, "compile-static": {"dynamic": False}}
    for name, options in variants.items():
        torch._dynamo.reset()
        mlp = GeGLUMLP(768, 3072).cuda().to(torch.bfloat16).eval()
        fn = mlp if options is None else torch.compile(mlp, **options)
        for batch in (8, 64):
            x = torch.randn(batch, 128, 768, device="cuda", dtype=torch.bfloat16)
            with torch.no_grad():
                call = lambda fn=fn, x=x: fn(x)  # noqa: E731
                for _ in range(3):
                    call()
                benches = [timing.time_gpu(call).median_s * 1e6 for _ in range(REPEATS)]
                queued = statistics.median(
                    timing.time_gpu_queued(call).median_s * 1e6 for _ in range(3)
                )
                host = timing.time_host(call).median_s * 1e6
                gpu = gpu_kernel_us(call)
            shown = " ".join(f"{b:6.1f}" for b in benches)
            print(
                f"{name:<15} {f'{batch}x128':>7} {shown:<44} {queued:7.1f} {host:7.1f} {gpu:7.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
