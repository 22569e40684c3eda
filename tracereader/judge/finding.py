"""One finding and what every rule shares: the step's time (the denominator of every %), how
many steps and kernels a finding names."""

from __future__ import annotations

import statistics

from tracereader.analyses import idle
from tracereader.trace.model import Trace

SHOWN_STEPS = 5  # steps named in a finding; the rest are counted


SHOWN_KERNELS = 3  # kernels given a finding each; the rest are counted


# Per-kernel notes (occupancy, split-K, launch queries) are for steps of the lessons' size;
# in a model's step of thousands of kernels they are noise (explain --kernels shows each).
SMALL_STEP = 50


class Finding:
    """One finding (not a dataclass: see kernel_classes.KernelClass)."""

    __slots__ = ("topic", "message", "problem", "us", "pct", "next", "cause", "culprit",
                 "mib_per_step")  # fmt: skip

    def __init__(
        self,
        topic: str,
        message: str,
        problem: bool = False,
        us: float | None = None,
        pct: float | None = None,
        next: str = "",
        cause: str | None = None,
        culprit: str | None = None,
        mib_per_step: float | None = None,
    ):
        self.topic = topic
        self.message = message
        self.problem = problem  # a health problem: the trace cannot show what it should
        self.us = us  # the time at stake per step, where it can be measured
        self.pct = pct  # that time as % of the median step
        self.next = next  # what to try next
        self.cause = cause  # the first finding's: what it names as the step's cause
        self.culprit = culprit  # the op or region that holds it
        self.mib_per_step = mib_per_step  # memory growth: MiB kept per step

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __eq__(self, other) -> bool:
        return type(other) is Finding and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(tuple(self.as_dict().values()))

    def __repr__(self) -> str:
        return "Finding(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


def step_time(trace: Trace) -> float:
    """The median step's time, the denominator of every finding's %: per step the longer of
    its CPU span and its GPU window (analyses.idle), so that it holds whatever a finding
    counts, host time or GPU time, even where the GPU lags the host."""
    return statistics.median(idle.step_times(trace)) if trace.steps else 0.0


def cpu_time(trace: Trace) -> float:
    """The median step's CPU span."""
    return statistics.median(s.dur for s in trace.steps) if trace.steps else 0.0


def steps_text(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_STEPS])
    return shown + (f" and {len(names) - SHOWN_STEPS} more" if len(names) > SHOWN_STEPS else "")
