"""What a batch-1 decode token's kernels can reach on this GPU, one by one (issue 28's probe).

For each GEMV shape of the 8b preset (x [1, K] @ W[N, K]^T): cuBLAS (F.linear), Inductor's
own reduction (the GEMV written as a multiply and a sum, compiled; also with coordinate-descent
tuning) and a plain Triton GEMV at a few tile shapes. For decode attention at 768 cached
positions: SDPA as 08_generate calls it (query heads packed, masked), SDPA's backends one by
one, and FlexAttention with and without a score_mod. Each is timed as a CUDA graph of 8 calls
over 8 copies of its operands (so no call finds its weights in L2), median of 20 replays;
bandwidth = the bytes it must read / that time, against the measured copy ceiling.

    python3 -m tools.dev.kernel_lab.decode_kernels_probe        (a GPU; prints one table)
"""

from __future__ import annotations

import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tracereader import run

COPIES = 8


@triton.jit
def gemv_kernel(x_ptr, w_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[n] = sum_k x[k] w[n, k]: BLOCK_N rows of W per program, read along K (coalesced)."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=rows[:, None] < N, other=0.0)
        x = tl.load(x_ptr + cols)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rows < N)


def triton_gemv(block_n, block_k, warps, stages):
    def run(x, w):
        n, k = w.shape
        y = torch.empty(1, n, device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(n, block_n),)
        gemv_kernel[grid](x, w, y, n, k, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
                          num_stages=stages)  # fmt: skip
        return y

    return run


def graph_time(fn, args_list) -> float:
    """Seconds per call: a CUDA graph of one call per operand set, replayed 20 times."""
    for args in args_list:
        fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in args_list:
            fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(20):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / len(args_list))
    return statistics.median(samples)


def main() -> None:
    dev, bf16 = "cuda", torch.bfloat16
    name = torch.cuda.get_device_name()
    buffers = [(torch.empty(1 << 29, device=dev, dtype=torch.uint8),) * 2 for _ in range(2)]
    buffers = [(a, torch.empty_like(a)) for a, _ in buffers]
    ceiling = 2 * (1 << 29) / graph_time(lambda a, b: b.copy_(a), buffers)
    del buffers
    print(f"{name}, torch {torch.__version__}, triton {triton.__version__}; copy ceiling "
          f"{ceiling / 1e12:.2f} TB/s (512 MiB copy, read + write)")  # fmt: skip

    def report(label, seconds, nbytes):
        rate = nbytes / seconds
        print(f"  {label:<44} {seconds * 1e6:8.1f} us  {rate / 1e12:5.2f} TB/s  "
              f"{rate / ceiling:4.0%} of the copy ceiling")  # fmt: skip

    inductor = torch.compile(lambda x, w: (x[:, None, :].float() * w.float()).sum(-1).to(bf16))
    shapes = {"qkv (fused)": (6144, 4096), "q / o": (4096, 4096), "k / v": (1024, 4096),
              "gate_up (fused)": (28672, 4096), "gate / up": (14336, 4096),
              "down": (4096, 14336), "head": (128256, 4096)}  # fmt: skip
    tiles = [(bn, bk, w, s) for bn in (4, 8, 16) for bk in (256, 512) for w in (4, 8)
             for s in (1, 3)]  # fmt: skip
    for label, (n, k) in shapes.items():
        copies = 2 if n > 100_000 else COPIES
        args = [(torch.randn(1, k, device=dev, dtype=bf16),
                 torch.randn(n, k, device=dev, dtype=bf16) * 0.02)
                for _ in range(copies)]  # fmt: skip
        nbytes = n * k * 2
        print(f"GEMV {label}: x [1, {k}] @ W [{n}, {k}]^T, {nbytes / 1e6:.1f} MB")
        want = F.linear(*args[0]).float()
        report("cuBLAS (F.linear)", graph_time(F.linear, args), nbytes)
        for tuned in (False, True):
            torch._inductor.config.coordinate_descent_tuning = tuned
            torch._dynamo.reset()
            try:
                got = inductor(*args[0]).float()
                assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), "wrong result"
                report(f"Inductor mul+sum{' (coordinate descent)' * tuned}",
                       graph_time(inductor, args), nbytes)  # fmt: skip
            except Exception as e:  # noqa: BLE001  (a probe: say it and go on)
                print(f"  Inductor mul+sum: {type(e).__name__}: {str(e)[:200]}")
        best = None
        for tile in tiles:
            try:
                fn = triton_gemv(*tile)
                assert torch.allclose(fn(*args[0]).float(), want, rtol=2e-2, atol=2e-2)
                t = graph_time(fn, args)
            except Exception as e:  # noqa: BLE001
                print(f"  Triton GEMV {tile}: {type(e).__name__}: {str(e)[:200]}")
                continue
            best = min(best or (t, tile), (t, tile))
        if best:
            report(f"Triton GEMV, best of {len(tiles)}: {best[1]}", best[0], nbytes)
        del args

    attention_probe(report)


def attention_probe(report) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import flex_attention

    dev, bf16 = "cuda", torch.bfloat16
    b, heads, kvh, hd, keys, pos = 1, 32, 8, 128, 768, 640
    args = []
    for _ in range(COPIES):
        q = torch.randn(b, heads, 1, hd, device=dev, dtype=bf16)
        k = torch.randn(b, kvh, keys, hd, device=dev, dtype=bf16)
        v = torch.randn(b, kvh, keys, hd, device=dev, dtype=bf16)
        args.append((q, k, v))
    nbytes = 2 * b * kvh * keys * hd * 2
    print(f"decode attention: 32 query heads, 8 kv heads, {keys} cached positions "
          f"({pos + 1} seen), {nbytes / 1e6:.2f} MB of cache")  # fmt: skip
    mask = torch.arange(keys, device=dev) <= pos
    position = torch.tensor([pos], device=dev)

    def packed(q, k, v):  # 08_generate's call: the group's query heads as rows, masked
        qq = q.reshape(b, kvh, heads // kvh, hd)
        return F.scaled_dot_product_attention(qq, k, v, attn_mask=mask.expand(heads // kvh, -1))

    want = packed(*args[0]).reshape(b, heads, 1, hd).float()
    report("SDPA packed + mask (08's, default backend)", graph_time(packed, args), nbytes)
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                got = packed(*args[0]).reshape(b, heads, 1, hd).float()
                assert torch.allclose(got, want, rtol=2e-2, atol=2e-2), "wrong result"
                report(f"SDPA packed + mask, {backend.name}", graph_time(packed, args), nbytes)
        except Exception as e:  # noqa: BLE001
            print(f"  SDPA {backend.name}: {type(e).__name__}: {str(e)[:160]}")

    def causal(score, bi, hi, qi, ki):
        return torch.where(ki <= position[0], score, -float("inf"))

    flex = torch.compile(flex_attention, dynamic=False)
    for label, kwargs in (("score_mod", {"score_mod": causal}), ("no mask (reads all)", {})):
        try:
            fn = lambda q, k, v, kw=kwargs: flex(q, k, v, enable_gqa=True, **kw)  # noqa: E731
            if label == "score_mod":
                assert torch.allclose(fn(*args[0]).float(), want, rtol=2e-2, atol=2e-2)
            report(f"FlexAttention, {label}", graph_time(fn, args), nbytes)
        except Exception as e:  # noqa: BLE001
            print(f"  FlexAttention {label}: {type(e).__name__}: {str(e)[:160]}")


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for Ctrl-C, a closed stdout
