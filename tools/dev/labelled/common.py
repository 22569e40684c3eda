"""What every workload shares: its plan (planted step, twin step, label), the sizes of a run
(the GPU's, or --quick's tiny ones on a CPU), and small models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class Plan:
    """One workload: `planted` and `twin` each run one whole step (data, forward, backward,
    optimizer: what the user's loop runs); the label's cause and culprit are what an expert
    names first on the planted step's trace."""

    cause: str
    culprit: list[str]  # the names that count as the culprit, the likeliest first
    planted: Callable[[], object]
    twin: Callable[[], object]
    what: str  # one sentence: the plant and the twin
    memory: bool = False  # profile_memory=True; the stake is MiB per step, not ms
    active: int = 3  # recorded steps
    block: int = 5  # steps per timed block (their mean is one sample)
    blocks: int = 5  # timed blocks (the median is the step's time)
    warm: int = 3  # untimed steps before timing
    extra: dict = field(default_factory=dict)  # anything else the label should carry
    # other twins, timed (not profiled) beside the twin: a check on what the twin removes
    alternatives: dict = field(default_factory=dict)


@dataclass
class Ctx:
    device: torch.device
    quick: bool  # tiny sizes: the code paths on a CPU in seconds

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def size(self, gpu, cpu):
        return cpu if self.quick else gpu

    @property
    def half(self) -> torch.dtype:
        return torch.bfloat16


def mlp(dims: list[int], dtype: torch.dtype, device, act: type = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims, dims[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(act())
    return nn.Sequential(*layers).to(device=device, dtype=dtype)


def forever(loader):
    """The loader's batches without end: a new epoch's iterator where one ends (the profiler
    annotates each next() as `enumerate(DataLoader)#...__next__`)."""
    while True:
        yield from loader
