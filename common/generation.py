"""08_generate's plumbing: timing a generation whole, the --sweep-batch flag and its plot, and
the printed line of the reader's generation reading against the lesson's floor."""

from __future__ import annotations

import argparse
import time

from common import outputs, profiling
from common.cli import Run
from common.measuring import timing
from tracereader.analyses.generation import WORDS


def time_generation(generation, new_tokens: int, run: Run, repeats: int = 5, gemms=None):
    """Prefill and decode apart, without a sync per token: a generation of one token (prefill
    alone) and one of new_tokens, each timed whole; a decode token = their difference /
    (new_tokens - 1). Medians (20th-80th percentiles) of `repeats` such pairs. `gemms` (a
    callable, gemm_sequence's) is timed the same way in each repeat, beside the pair: the same
    power state of the GPU. Returns (prefill, token, gemms or None)."""

    def seconds(fn):
        profiling.synchronize(run)
        start = time.perf_counter()
        fn()
        profiling.synchronize(run)
        return time.perf_counter() - start

    seconds(lambda: generation(new_tokens))  # warm
    if gemms:
        seconds(gemms)
    calls = [lambda: generation(1), lambda: generation(new_tokens)] + ([gemms] if gemms else [])
    samples = [[seconds(fn) for fn in calls] for _ in range(repeats)]
    how = f"{repeats} generations of 1 and of {new_tokens} tokens, each timed whole"
    token = timing.summarize([(n - one) / (new_tokens - 1) for one, n, *_ in samples], how)
    prefill = timing.summarize([one for one, *_ in samples], how)
    beside = f"{repeats} runs, each timed whole beside a pair of those generations"
    ruler = timing.summarize([s[2] for s in samples], beside) if gemms else None
    return prefill, token, ruler


def gemm_sequence(calls: list[tuple[int, object]], run: Run):
    """A callable running these GEMMs, (rows x K) @ weight.T for each (rows, weight), in order
    on random activations: on a GPU replaying them as one CUDA graph (their device time, no
    launch between them), elsewhere calling them."""
    import torch

    inputs = {}
    for rows, w in calls:  # one activation per shape: what a GEMM reads besides its weight
        if (rows, w.shape[1]) not in inputs:
            inputs[rows, w.shape[1]] = torch.randn(rows, w.shape[1], device=w.device,
                                                   dtype=w.dtype)  # fmt: skip

    def run_all():
        for rows, w in calls:
            torch.mm(inputs[rows, w.shape[1]], w.t())

    if not run.on_gpu:
        return run_all
    run_all()  # cuBLAS's workspaces and heuristics: before the capture
    torch.cuda.synchronize(run.device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_all()
    return graph.replay


def gemm_flops(shapes: dict[tuple[int, int, int], int]) -> int:
    """2MKN of these GEMMs {(M, K, N): count}, each times its count."""
    return sum(2 * m * k * n * count for (m, k, n), count in shapes.items())


def batches(text: str) -> list[int]:
    try:
        found = [int(b) for b in text.split(",")]
    except ValueError:
        found = []
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of positive batches")
    return found


def print_reading(g: dict | None, floor: float | None) -> None:
    """The reader's reading of the phases: per token, and its verdict (launch-bound,
    balanced, GPU- and so at a small batch bandwidth-bound)."""
    if g is None:
        print("generation: no decode step in the trace")
        return
    d = g["decode"]
    per = d["per_token_us"]["median"]
    line = f"generation: decode {per / 1e3:.3f} ms per token in the trace (profiled)"
    if g["prefill"]:
        line += f", prefill {g['prefill']['wall_us'] / 1e3:.3f} ms"
    print(line)
    if g["bound"] is None:
        return
    wait = d["host_wait_us"]
    print(f"  per token the GPU is busy {d['gpu_busy_us'] / 1e3:.3f} ms and waits on the host "
          f"{wait / 1e3:.3f} ms ({d['host_share']:.0%} of its window); {d['kernels']:g} "
          f"kernels, launch calls {d['launches']}")  # fmt: skip
    if g["bound"] == "launch":
        print("  -> launch-bound: the host cannot issue the kernels as fast as the GPU runs "
              "them; CUDA graphs replay a token's kernels with one launch")  # fmt: skip
    elif g["bound"] == "balanced":
        print(f"  -> balanced: the host's part ({d['host_share']:.0%}) and the GPU's both "
              "count; CUDA graphs take the launches, not the loop's own CPU work")  # fmt: skip
    elif g["bound"] == "stalled":
        print(f"  -> {WORDS['stalled']}: {d['other_us'] / 1e3:.3f} ms of each token; the "
              "syncs, copies and collectives in `explain`'s findings say on what")  # fmt: skip
    else:
        near = f" (its busy time {d['gpu_busy_us'] / 1e6 / floor:.2f}x the floor)" if floor else ""
        print(f"  -> GPU-bound{near}, and at a small batch bandwidth-bound: more sequences "
              "per step, fewer weight bytes (quantize), a smaller KV cache")  # fmt: skip


def plot_sweep(rows: list[dict], png, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["batch"] for r in rows], [r["tokens_per_s"] for r in rows], "o-", label="tokens/s")
    ax.set(xscale="log", yscale="log", xlabel="batch", ylabel="decode tokens/s", title=title)
    if rows and rows[0]["of_floor"] is not None:
        right = ax.twinx()
        right.plot([r["batch"] for r in rows], [100 * r["of_floor"] for r in rows], "s--",
                   color="tab:red", label="% of the floor's speed")  # fmt: skip
        right.set(ylabel="% of the bandwidth floor's speed", ylim=(0, 110))
    fig.tight_layout()
    with outputs.publishing(png) as (tmp,):
        fig.savefig(tmp)
    plt.close(fig)
    print(f"sweep plot: {png}")
