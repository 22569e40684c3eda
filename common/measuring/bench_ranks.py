"""--bench for a lesson run by torchrun: the forward timed on every rank, the all-reduce alone,
and the link it runs over; measured by every rank, reported by rank 0.

Every rank must issue the same collectives in the same order, or the ranks wait on each other
until the timeout. So every timer here makes a fixed number of calls: do_bench, and the CPU
timer's default budget, choose their count from the clock, which differs from rank to rank.
On a GPU the forward is timed with its calls queued between two CUDA events (a loop's
throughput; the one-call cold-L2 number of the single-GPU lessons would need do_bench), and
the host's dispatch apart. The slowest rank sets the pace of all: it is the number reported.

The link: an all-reduce of a 256 MiB buffer, timed the same way, as bus bandwidth
(2(N-1)/N x bytes / time, nccl-tests' busbw), measured once per kind of GPU, backend and rank
count and cached beside the ceilings' cache (`tracereader.analyses.caches.cache_path()`;
--fresh-ceilings measures again). The multi-rank reading compares each traced all-reduce with it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.cli import Run
from common.measuring import bench, ceilings, timing, traffic
from common.torchrun import Group
from tracereader import caches
from tracereader.units import bytes_text

LINK_BYTES = 1 << 28  # 256 MiB: past the size where an all-reduce's time is latency, not bandwidth
# timed calls per rank (on a GPU queued between two CUDA events), and on a GPU how many times
CALLS, GPU_REPEATS = 20, 7


@dataclass(frozen=True)
class Measured:
    world: int
    forward: list[timing.Timing]  # per rank
    host: list[timing.Timing] | None  # GPU: the host's dispatch per call, per rank
    allreduce: list[timing.Timing] | None  # the forward's all-reduce alone, per rank
    reduced_bytes: int
    reduced_shape: str
    link_bus_bytes_per_s: float | None
    link_measured: str
    link_cached: bool
    fresh_ceilings: bool  # --fresh-ceilings: rank 0's report measures them again


def time_fixed(
    fn: Callable[[], object], run: Run, *, calls: int = CALLS, repeats: int = GPU_REPEATS
) -> timing.Timing:
    """A fixed number of calls on every rank (see the module's doc): on a GPU `calls` queued
    between two CUDA events, `repeats` times; on a CPU `calls` calls on the host clock."""
    if run.on_gpu:
        return timing.time_gpu_queued(fn, calls=calls, repeats=repeats)
    return timing.time_cpu(fn, warmup_s=0.0, budget_s=0.0, min_runs=calls, max_runs=calls)


def _gathered(value) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _link(run: Run, group: Group, *, fresh: bool) -> tuple[float | None, str, bool]:
    """The link's all-reduce bus bandwidth: (bytes/s, how measured, cached?)."""
    if not run.on_gpu or group.world == 1:
        return None, "", False
    key = caches.link_key(torch.cuda.get_device_name(run.device), group.backend, group.world)
    found = None if fresh else caches.cached_link(key)
    # Measure if any rank lacks it: the measurement is a collective, all must take part.
    need = torch.tensor([int(found is None)], device=run.device)
    dist.all_reduce(need, op=dist.ReduceOp.MAX)
    if not need.item() and found is not None:
        return float(found["bus_bytes_per_s"]), str(found.get("measured", "")), True
    buf = torch.zeros(LINK_BYTES // 2, dtype=torch.bfloat16, device=run.device)
    seconds = max(t.median_s for t in _gathered(time_fixed(lambda: dist.all_reduce(buf), run)))
    bus = 2 * (group.world - 1) / group.world * LINK_BYTES / seconds
    measured = caches.measured_stamp(
        f"{LINK_BYTES >> 20} MiB bf16 all-reduce over {group.world} ranks, {group.backend}, "
        f"torch {torch.__version__}"
    )
    if group.rank == 0:
        caches.store_link(key, bus, measured)
    return bus, measured, False


def measure(
    step: Callable[[], object],
    *,
    run: Run,
    group: Group,
    reduced: torch.Tensor,
    args: argparse.Namespace,
) -> Measured:
    """Every rank: time `step` (the forward, waited for), then an all-reduce of a tensor like
    `reduced` (the forward's output) alone, then the link."""
    dist.barrier()  # start together: the first all-reduce would otherwise time the stragglers
    forward = _gathered(time_fixed(step, run))
    host = _gathered(timing.time_host(step)) if run.on_gpu else None
    allreduce = None
    if group.world > 1:
        buf = torch.zeros_like(reduced)
        allreduce = _gathered(time_fixed(lambda: dist.all_reduce(buf), run))
    bus, measured, cached = _link(run, group, fresh=args.fresh_ceilings)
    return Measured(
        world=group.world,
        forward=forward,
        host=host,
        allreduce=allreduce,
        reduced_bytes=reduced.numel() * reduced.element_size(),
        reduced_shape=f"{str(reduced.dtype).removeprefix('torch.')} {list(reduced.shape)}",
        link_bus_bytes_per_s=bus,
        link_measured=measured,
        link_cached=cached,
        fresh_ceilings=args.fresh_ceilings,
    )


def _slowest(timings: list[timing.Timing]) -> tuple[int, float]:
    rank = max(range(len(timings)), key=lambda r: timings[r].median_s)
    return rank, timings[rank].median_s


def link(m: Measured | None) -> dict | None:
    """The link --bench measured (or found cached), as the multi-rank reading takes it."""
    if m is None or not m.link_bus_bytes_per_s:
        return None
    return {"bus_bytes_per_s": m.link_bus_bytes_per_s, "measured": m.link_measured}


def report(m: Measured, *, run: Run, model: list[traffic.Kernel]) -> None:
    """Rank 0: what every rank measured, the slowest rank first."""
    n = m.world
    _, forward = _slowest(m.forward)
    each = ", ".join(f"rank {r} {bench.us(t.median_s)}" for r, t in enumerate(m.forward))
    how = "calls queued" if run.on_gpu else "host clock"
    print("bench (profiler detached; every rank makes the same calls, the slowest sets the pace):")
    print(f"  forward at N={n} ({how}): {bench.us(forward)} per call ({each}; {m.forward[0].how})")
    if m.host:
        print(f"  host dispatch per call:  {bench.us(_slowest(m.host)[1])} (slowest rank)")
    flops, _ = traffic.total(model)
    if run.on_gpu:
        # Rank 0 alone, no collective: the other ranks go on to wait for the verdict.
        print(f"  per rank (1/{n} of the MLP's), the slowest rank's forward against the ceilings:")
        precisions, ceil, lines = bench.against_ceilings(run, model, fresh=m.fresh_ceilings)
        if ceil is not None:
            rates = {p: ceil[p].per_s for p in precisions if p}
            lines += bench.roofline(
                model, precisions, forward, rates, ceil[ceilings.MEMORY].per_s, how="queued"
            )[0]
        for line in lines:
            print(f"    {line}")
    else:
        print(
            f"  per rank: {bench.flop_count(flops)} (1/{n} of the MLP's), achieved "
            f"{bench.flop_rate(flops / forward)} on the CPU (no ceilings on a CPU)"
        )
    bus = None
    if m.allreduce:
        _, alone = _slowest(m.allreduce)
        bus = 2 * (n - 1) / n * m.reduced_bytes / alone
        print(
            f"  all-reduce alone ({bytes_text(m.reduced_bytes)}, {m.reduced_shape}): "
            f"{bench.us(alone)} -> bus bandwidth 2(N-1)/N x bytes / time = {bus / 1e9:.3g} GB/s, "
            f"{alone / forward:.0%} of the forward's time"
        )
        if m.link_bus_bytes_per_s:
            print(
                f"  the link: {m.link_bus_bytes_per_s / 1e9:.0f} GB/s ({m.link_measured})"
                f"{' [cached]' if m.link_cached else ''}: the forward's all-reduce reaches "
                f"{bus / m.link_bus_bytes_per_s:.0%} of it"
            )
        elif not run.on_gpu:
            print("  the link: not measured on a CPU (gloo over loopback is no link to speak of)")
    else:
        print("  one rank: no all-reduce (DTensor has nothing to reduce), no link")
    summary = f"tp-scaling: ranks={n} forward_us={forward * 1e6:.2f}"
    if m.host:
        summary += f" host_us={_slowest(m.host)[1] * 1e6:.2f}"
    if m.allreduce:
        summary += f" allreduce_us={_slowest(m.allreduce)[1] * 1e6:.2f} bus_GBps={bus / 1e9:.2f}"
    if m.link_bus_bytes_per_s:
        summary += f" link_GBps={m.link_bus_bytes_per_s / 1e9:.1f}"
    print(summary)
