"""08_generate's measuring without the profiler: the arithmetic of its floors (a decode token's
traffic and the KV cache's bytes, prefill's GEMMs and FLOPs), the copy bandwidth the decode
floor divides by, `--bench` (prefill against its GEMMs run in sequence, a decode token against
the floor) and `--sweep-batch` (decode at every batch, and its plot).

`v` below is the lesson's variant (common.generation.Variant); `generation` a callable that
generates n tokens (the lesson's Generation).
"""

from __future__ import annotations

import dataclasses
import time

import torch

from common import outputs, profiling
from common.cli import Run, element_size
from common.measuring import ceilings, timing, traffic

# --- the arithmetic -----------------------------------------------------------------------


def traffic_model(v, keys: int, elt: int) -> list[traffic.Kernel]:
    """One decode step's minimum traffic: each GEMM reads its weight once for the B rows, and
    attention reads `keys` cached keys and values per sequence and layer, once."""
    c, b = v.cfg, v.batch
    kv = c.kv_heads * c.head_dim
    flops, read = 4 * b * c.heads * keys * c.head_dim, 2 * b * keys * kv * elt
    layer = [
        traffic.gemm("q_proj", b, c.dim, c.dim, elt),
        traffic.gemm("k_proj", b, c.dim, kv, elt),
        traffic.gemm("v_proj", b, c.dim, kv, elt),
        traffic.Kernel("attention (cache read)", "attention", flops, read, elt),
        traffic.gemm("o_proj", b, c.dim, c.dim, elt),
        *(traffic.gemm(n, b, c.dim, c.hidden, elt) for n in ("gate_proj", "up_proj")),
        traffic.gemm("down_proj", b, c.hidden, c.dim, elt),
    ]
    return layer * c.layers + [traffic.gemm("lm_head", b, c.dim, c.vocab, elt)]


def floor_s(v, new_tokens: int, elt: int, bytes_per_s: float) -> tuple[float, int]:
    """(seconds, bytes) a decode token must take at least, at the generation's mean cache
    length: its traffic over the measured copy bandwidth (its FLOPs are far below the
    matrix ceiling at any batch this lesson sweeps)."""
    _, moved = traffic.total(traffic_model(v, v.prompt + new_tokens // 2, elt))
    return moved / bytes_per_s, moved


def kv_arithmetic(cfg, tokens: int, batch: int, elt: int) -> int:
    """2 (keys, values) x layers x kv_heads x head_dim x tokens x bytes, per sequence."""
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * tokens * elt * batch


def gemm_flops(shapes: dict[tuple[int, int, int], int]) -> int:
    """2MKN of these GEMMs {(M, K, N): count}, each times its count."""
    return sum(2 * m * k * n * count for (m, k, n), count in shapes.items())


def prefill_gemms(v) -> dict[tuple[int, int, int], int]:
    """Prefill's GEMMs (M, K, N) -> how many: the layers' at M = B x P rows, the head's at M = B."""
    c, m = v.cfg, v.batch * v.prompt
    kv = c.kv_heads * c.head_dim
    if v.fused:
        layer = [(m, c.dim, c.dim + 2 * kv), (m, c.dim, c.dim), (m, c.dim, 2 * c.hidden)]
    else:
        layer = [(m, c.dim, c.dim)] * 2 + [(m, c.dim, kv)] * 2 + [(m, c.dim, c.hidden)] * 2
    shapes = {}
    for shape in [*layer, (m, c.hidden, c.dim)] * c.layers + [(v.batch, c.dim, c.vocab)]:
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


def prefill_weights(v, model) -> list[tuple[int, torch.Tensor]]:
    """(rows, weight) of prefill's GEMMs in the order it runs them: the layers' projections at
    B x P rows, the head's at B (ours and transformers' models name them alike)."""
    attn = ("qkv_proj", "o_proj") if v.fused else ("q_proj", "k_proj", "v_proj", "o_proj")
    mlp = ("gate_up_proj", "down_proj") if v.fused else ("gate_proj", "up_proj", "down_proj")
    rows, calls = v.batch * v.prompt, []
    for layer in model.model.layers:
        calls += [(rows, getattr(layer.self_attn, name).weight) for name in attn]
        calls += [(rows, getattr(layer.mlp, name).weight) for name in mlp]
    return calls + [(v.batch, model.lm_head.weight)]


def prefill_flops(v) -> float:
    """Its GEMMs' 2MKN, and attention's: q.k and p.v over the causal half (position i sees
    i + 1 keys), 2 x 2 x head_dim FLOPs per query head and key seen."""
    c, p = v.cfg, v.prompt
    return (
        gemm_flops(prefill_gemms(v))
        + c.layers * v.batch * c.heads * 4 * c.head_dim * p * (p + 1) / 2
    )


def copy_bandwidth(run: Run, *, fresh: bool) -> float:
    """The device's measured copy ceiling (bytes/s), cached as --bench caches it."""
    name = torch.cuda.get_device_name(run.device)
    measure = lambda what, probe: ceilings.measure(run.device, what, probe)  # noqa: E731
    copy = ceilings.get(name, torch.__version__, {ceilings.MEMORY: ()}, measure, fresh=fresh)
    print(f"copy ceiling: {copy[ceilings.MEMORY].describe(name)}")
    return copy[ceilings.MEMORY].per_s


# --- timing a generation whole ------------------------------------------------------------


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


def gemm_sequence(calls: list[tuple[int, torch.Tensor]], run: Run):
    """A callable running these GEMMs, (rows x K) @ weight.T for each (rows, weight), in order
    on random activations: on a GPU replaying them as one CUDA graph (their device time, no
    launch between them), elsewhere calling them."""
    inputs = {}
    for rows, w in calls:  # one activation per shape: what a GEMM reads besides its weight
        if (rows, w.shape[1]) not in inputs:
            inputs[rows, w.shape[1]] = torch.randn(rows, w.shape[1], device=w.device, dtype=w.dtype)

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


# --- --bench and --sweep-batch --------------------------------------------------------------


def decode_breakdown(reading: dict, v, new_tokens: int, elt: int, bytes_per_s: float) -> list[str]:
    """A decode token of the profiled trace, part by part (the medians of its decode steps):
    the GEMMs (GEMVs at this batch) and attention each against the bytes they must move at
    the copy bandwidth, the other kernels, and the gaps where the GPU runs nothing. The
    parts add up to the token's window; the floor is what the GEMMs' and attention's bytes
    take at the copy bandwidth."""
    d = reading["decode"]
    window, busy, classes = d.get("window_us"), d["gpu_busy_us"], dict(d["by_class_us"])
    if not window or busy is None:
        return []
    kernels = traffic_model(v, v.prompt + new_tokens // 2, elt)
    moved = {cls: sum(k.bytes for k in kernels if k.cls == cls) for cls in ("gemm", "attention")}
    lines = [f"  a decode token in the trace, part by part ({d['tokens']} decode steps, medians):"]
    for label, cls in (("GEMM", "gemm"), ("attention", "attention")):
        us, need = classes.pop(label, 0.0), moved[cls] / bytes_per_s * 1e6
        rate = moved[cls] / (us * 1e-6) if us else 0.0
        lines.append(
            f"    {label:<22} {us:9.1f} us  {moved[cls] / 1e9:.3g} GB at {rate / 1e12:.2f} TB/s = "
            f"{rate / bytes_per_s:.0%} of the copy bandwidth (its floor {need:.1f} us)"
        )
    for label, us in sorted(classes.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {label:<22} {us:9.1f} us  (no bytes counted in the floor)")
    lines.append(f"    {'gaps between kernels':<22} {window - busy:9.1f} us  (the GPU idle)")
    lines.append(f"    {'= the window':<22} {window:9.1f} us")
    return lines


def bench(
    v, generation, new_tokens: int, run: Run, floor: float | None,
    reading: dict | None = None, bytes_per_s: float | None = None,
) -> None:  # fmt: skip
    """Prefill against its own GEMMs run in sequence, then a decode token against the floor
    and, from the profiled trace's reading, part by part (decode_breakdown); on a GPU a
    generation's peak memory."""
    peak = None
    if run.on_gpu:  # a generation's own peak, before the rulers below allocate theirs
        torch.cuda.reset_peak_memory_stats(run.device)
        generation(new_tokens)
        torch.cuda.synchronize(run.device)
        peak = torch.cuda.max_memory_allocated(run.device)
    weights = prefill_weights(v, generation.model)
    gemms = gemm_sequence(weights, run)
    prefill_t, token, gemms_t = time_generation(generation, new_tokens, run, gemms=gemms)
    print(f"bench (profiler detached): prefill {prefill_t.us()}")
    flops, gemm_total = prefill_flops(v), gemm_flops(prefill_gemms(v))
    # Its floor: its GEMMs back to back, on the model's weights, as prefill runs them (each
    # shape timed alone by do_bench, after an L2 flush whose dirty lines are written back
    # during the GEMM, reaches less: prefill with --fused-gate beat that "floor"; there
    # cuBLAS's gate/up GEMM stands for the gate kernel, the same FLOPs). Prefill against
    # them: what its other kernels and the gaps between them cost.
    rate = gemm_total / gemms_t.median_s  # the same GEMMs (prefill_weights' test)
    print(
        f"  its {len(weights)} GEMMs in prefill's order on the model's weights"
        f"{', one CUDA graph' * run.on_gpu}, timed beside it: {gemms_t.us()} = "
        f"{rate / 1e12:.3g} TFLOP/s; prefill's FLOPs at that rate take "
        f"{flops / rate * 1e3:.3f} ms: prefill at {prefill_t.median_s * rate / flops:.2f}x "
        "that"
    )
    print(
        f"  decode: {token.median_s * 1e3:.3f} ms per token (20th-80th percentile "
        f"{token.p20_s * 1e3:.3f}-{token.p80_s * 1e3:.3f}), "
        f"{v.batch / token.median_s:,.1f} tokens/s"
    )
    if floor:
        print(
            f"  = {token.median_s / floor:.2f}x the bandwidth floor: "
            f"{floor / token.median_s:.0%} of the floor's speed"
        )
    if reading is not None and bytes_per_s:
        for line in decode_breakdown(reading, v, new_tokens, element_size(run), bytes_per_s):
            print(line)
    if peak is not None:
        print(f"  peak device memory in a generation: {peak / 2**30:.2f} GiB")


def sweep(v, batches, new_tokens: int, run: Run, build, bytes_per_s) -> list[dict]:
    """Decode at every batch of --sweep-batch: tokens/s and the share of the floor's speed.
    `build(variant)` makes the generation at that variant's batch."""
    print(f"sweep (decode, {new_tokens} new tokens, profiler detached):")
    rows = []
    for batch in batches:
        w = dataclasses.replace(v, batch=batch)
        _, token, _ = time_generation(build(w), new_tokens, run, repeats=3)
        elt = element_size(run)
        floor = floor_s(w, new_tokens, elt, bytes_per_s)[0] if bytes_per_s else None
        rows.append(
            {
                "batch": batch,
                "token_s": token.median_s,
                "tokens_per_s": batch / token.median_s,
                "of_floor": floor / token.median_s if floor else None,
            }
        )
        pct = f", {rows[-1]['of_floor']:.0%} of the floor's speed" if floor else ""
        print(
            f"  batch {batch:>4}: {token.median_s * 1e3:.3f} ms per token, "
            f"{rows[-1]['tokens_per_s']:,.0f} tokens/s{pct}"
        )
    return rows


def plot_sweep(rows: list[dict], png, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["batch"] for r in rows], [r["tokens_per_s"] for r in rows], "o-", label="tokens/s")
    ax.set(xscale="log", yscale="log", xlabel="batch", ylabel="decode tokens/s", title=title)
    if rows and rows[0]["of_floor"] is not None:
        right = ax.twinx()
        right.plot(
            [r["batch"] for r in rows],
            [100 * r["of_floor"] for r in rows],
            "s--",
            color="tab:red",
            label="% of the floor's speed",
        )
        right.set(ylabel="% of the bandwidth floor's speed", ylim=(0, 110))
    fig.tight_layout()
    with outputs.publishing(png) as (tmp,):
        fig.savefig(tmp)
    plt.close(fig)
    print(f"sweep plot: {png}")
