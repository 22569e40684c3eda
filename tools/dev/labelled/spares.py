"""Spare workloads, recorded after the others while time is left: a second take on three causes
(a sync per micro-batch, an SGD for-loop, a forward's graph kept alive), to stand in for a
workload whose plant came out too small to score."""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import record_function

from .common import Ctx, Plan, mlp


def item_loss_logging(ctx: Ctx) -> Plan:
    rows, width, micro = ctx.size(2048, 32), ctx.size(4096, 64), ctx.size(8, 2)
    with ctx.device:
        model = mlp([width] * 5, ctx.half, ctx.device)
    batches = [torch.randn(rows, width, device=ctx.device, dtype=ctx.half) for _ in range(micro)]

    def run(sync_each: bool):
        def step():
            total = 0.0 if sync_each else torch.zeros((), device=ctx.device)
            for x in batches:  # gradient accumulation over micro-batches
                with record_function("forward"):
                    loss = model(x).float().square().mean()
                with record_function("backward"):
                    loss.backward()
                total += loss.item() if sync_each else loss.detach()  # the logging
            model.zero_grad(set_to_none=True)
            return float(total)

        return step

    return Plan(
        "sync",
        ["aten::item", "aten::_local_scalar_dense"],
        run(True),
        run(False),
        f"gradient accumulation over {micro} micro-batches logging `loss.item()` after each "
        "(a host sync per micro-batch) vs the loss summed on the GPU and read once per step",
    )


def sgd_forloop(ctx: Ctx) -> Plan:
    count = ctx.size(256, 16)
    with ctx.device:
        small = [nn.Parameter(torch.randn(64, 64)) for _ in range(count)]
    params = list(small)

    def run(optimizer):
        def step():
            with record_function("forward"):
                loss = torch.stack(small).square().mean()
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        return step

    return Plan(
        "optimizer",
        ["Optimizer.step#SGD.step", "optimizer"],
        run(torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False)),
        run(torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)),
        f"SGD(momentum=0.9, foreach=False) over {count} parameter tensors of 64x64 vs foreach=True",
        active=2,
    )


def memory_graph(ctx: Ctx) -> Plan:
    rows, width = ctx.size(1024, 16), ctx.size(2048, 64)
    model = mlp([width] * 4, torch.float32, ctx.device)
    x = torch.randn(rows, width, device=ctx.device)
    kept: list[torch.Tensor] = []
    last: list[torch.Tensor] = []

    def planted():  # evaluation without torch.no_grad(): every output holds its graph
        with record_function("forward"):
            kept.append(model(x))

    @torch.no_grad()
    def twin():
        with record_function("forward"):
            last[:] = [model(x)]

    return Plan(
        "memory growth",
        ["aten::linear", "aten::addmm", "aten::relu"],
        planted,
        twin,
        f"an evaluation loop without torch.no_grad() keeping each output (its graph and the "
        f"activations it saved stay alive: an fp32 MLP of width {width} at {rows} rows) vs "
        "under no_grad keeping the last output",
        memory=True,
    )


SPARES = {
    "item_loss_logging": item_loss_logging,
    "sgd_forloop": sgd_forloop,
    "memory_graph": memory_graph,
}
