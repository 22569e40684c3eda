"""--bench for a lesson run by torchrun: the forward timed on every rank, the all-reduce alone,
and the link it runs over; measured by every rank, reported by rank 0.

Every rank must issue the same collectives in the same order, or the ranks wait on each other
until the timeout. So every timer here makes a fixed number of calls: do_bench, and the CPU
timer's default budget, choose their count from the clock, which differs from rank to rank.
On a GPU the forward is timed with its calls queued between two CUDA events (a loop's
throughput; the one-call cold-L2 number of the single-GPU lessons would need do_bench), and
the host's dispatch apart. The slowest rank sets the pace of all: it is the number reported.

The link: the all-reduce's bus bandwidth (2(N-1)/N x bytes / time, nccl-tests' busbw) at every
size from 1 MiB to 1 GiB (common.measuring.link), the curve tools/dev/ranks/link_curve.py measures
for all three kinds, measured once per kind of GPU, backend and rank count and cached
(`tracereader.caches`; --fresh-ceilings measures again). The forward's all-reduce, and every
traced one in the multi-rank reading, is judged against it at its own size: a ceiling taken at
one size is no ceiling at another.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

import tracereader
from common.cli import Run
from common.measuring import bench, ceilings, link, timing, traffic
from common.torchrun import Group
from tracereader import LinkCurve, bytes_text, link_curve_key, store_link_curve

# the largest buffer the link's measurement allocates (a lesson's memory estimate counts it)
LINK_BYTES = 2 * link.HIGH  # an all-gather's output and input
# timed calls per rank (on a GPU queued between two CUDA events), and on a GPU how many times


@dataclass(frozen=True)
class Measured:
    world: int
    forward: list[timing.Timing]  # per rank
    host: list[timing.Timing] | None  # GPU: the host's dispatch per call, per rank
    allreduce: list[timing.Timing] | None  # the forward's all-reduce alone, per rank
    reduced_bytes: int
    reduced_shape: str
    link: LinkCurve | None  # the all-reduce's curve on this machine (None on a CPU, N = 1)
    link_cached: bool
    fresh_ceilings: bool  # --fresh-ceilings: rank 0's report measures them again


def _gathered(value) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _link(run: Run, group: Group, *, fresh: bool) -> tuple[LinkCurve | None, bool]:
    """The link's all-reduce curve: (the curve, cached?)."""
    if not run.on_gpu or group.world == 1:
        return None, False
    name = torch.cuda.get_device_name(run.device)
    cached = tracereader.link_curve(name, group.backend, group.world)
    curve = None if fresh or cached is None or "all-reduce" not in cached.points else cached
    # Measure if any rank lacks it: the measurement is a collective, all must take part.
    need = torch.tensor([int(curve is None)], device=run.device)
    dist.all_reduce(need, op=dist.ReduceOp.MAX)
    if not need.item() and curve is not None:
        return curve, True
    curve = link.measure(run, world=group.world, backend=group.backend, device_name=name,
                         kinds=("all-reduce",))  # fmt: skip
    if cached is not None:  # keep the kinds measured before (tools/dev/ranks/link_curve.py's three)
        curve = dataclasses.replace(curve, points={**cached.points, **curve.points})
    if group.rank == 0:
        store_link_curve(link_curve_key(name, group.backend, group.world),
                                curve.to_csv())  # fmt: skip
    return curve, False


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
    forward = _gathered(timing.time_fixed(step, run))
    host = _gathered(timing.time_host(step)) if run.on_gpu else None
    allreduce = None
    if group.world > 1:
        buf = torch.zeros_like(reduced)
        allreduce = _gathered(timing.time_fixed(lambda: dist.all_reduce(buf), run))
    curve, cached = _link(run, group, fresh=args.fresh_ceilings)
    return Measured(
        world=group.world,
        forward=forward,
        host=host,
        allreduce=allreduce,
        reduced_bytes=reduced.numel() * reduced.element_size(),
        reduced_shape=f"{str(reduced.dtype).removeprefix('torch.')} {list(reduced.shape)}",
        link=curve,
        link_cached=cached,
        fresh_ceilings=args.fresh_ceilings,
    )


def _slowest(timings: list[timing.Timing]) -> tuple[int, float]:
    rank = max(range(len(timings)), key=lambda r: timings[r].median_s)
    return rank, timings[rank].median_s


def link_of(m: Measured | None) -> LinkCurve | None:
    """The link's curve --bench measured (or found cached), as the multi-rank reading takes
    it."""
    return m.link if m is not None else None


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
        judged = m.link.judge("all-reduce", m.reduced_bytes, bus) if m.link else None
        if judged is not None and judged.ceiling_bytes_per_s:
            print(
                f"  the link at {bytes_text(m.reduced_bytes)}: "
                f"{judged.ceiling_bytes_per_s / 1e9:.0f} GB/s ({m.link.measured})"
                f"{' [cached]' if m.link_cached else ''}: the forward's all-reduce: "
                f"{judged.text()}"
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
    top = m.link.ceiling("all-reduce", m.reduced_bytes) if m.link else None
    if top:
        summary += f" link_GBps={top / 1e9:.1f}"  # the curve at the forward's all-reduce size
    print(summary)
