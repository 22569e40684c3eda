"""The Part 1 cheatsheet, read off a trace: what a careful reader would point at on screen.

Each finding is one sentence with its evidence, the time at stake where it has one (us per
step and % of the median step) and what to try next. Health problems (a trace that cannot
show what it was meant to) come first and are marked so a script can refuse to trust the
rest; then the bound verdict; then the findings with a time at stake, largest first, one per
kind; then the observations that have none. A finding whose time at stake is under 1% of the
step is left out unless asked for (`read(trace, everything=True)`).

Part 3 (attention) adds: a GEMM run as split-K (two kernels, one GEMM); a 0% occupancy that is
a gap in the profiler's estimate, worked out from the kernel's footprint instead; a fused
attention kernel whose low occupancy is its design; the copy an out-of-place op makes under
aten::clone; a mask built again inside every step; float32 work inside a bf16/fp16 run; a
library's CPU work hidden in one opaque op; kernels launched as a single block (one SM of
the GPU's working: a one-row reduction at batch 1). Each looks at one step (or each step once): no
question asks about every op against every other.
"""

from __future__ import annotations

from tracereader.judge import cause, kernel_findings, model_findings, step_findings
from tracereader.judge.finding import Finding, step_time
from tracereader.trace.model import (
    Trace,
)

HIDDEN_BELOW = 0.01  # a finding with less than this share of the step at stake is left out


def _at_stake(finding: Finding, wall: float) -> Finding:
    if finding.us is None or finding.pct is not None or wall <= 0:
        return finding
    return Finding(**{**finding.as_dict(), "pct": 100 * finding.us / wall})


def read(trace: Trace, everything: bool = False) -> list[Finding]:
    """The findings, ranked (see the module's docstring); `everything` keeps the small ones."""
    found, hidden = ranked(trace)
    return found + hidden if everything else found


def ranked(trace: Trace) -> tuple[list[Finding], list[Finding]]:
    """(the findings shown, those left out for being under 1% of the step)."""
    health = step_findings.health(trace)
    if not trace.steps:
        return health, []
    wall = step_time(trace)
    rest = [_at_stake(f, wall) for f in _all(trace) if f is not None]
    bound = [f for f in rest if f.topic == "bound"]
    named = cause.first(trace)
    if named is not None:  # the cause first, after what says the trace is damaged (notes
        # such as "no ProfilerStep: the window is one unit" come after it)
        damage = [f for f in health if f.problem and not f.message.startswith("compilation inside")]
        health = [*damage, named, *(f for f in health if f not in damage)]
    elif bound and bound[0].us is not None and bound[0].pct and bound[0].pct >= 50:
        why = cause.unattributed(trace)  # a generic verdict says what it could not attribute
        if why:
            bound = [Finding(**{**bound[0].as_dict(), "message": f"{bound[0].message} ({why})"})]
    timed = sorted(
        (f for f in rest if f.us is not None and f.topic != "bound"), key=lambda f: -f.us
    )
    plain = [f for f in rest if f.us is None and f.topic != "bound"]
    shown = [f for f in timed if f.pct is None or f.pct >= 100 * HIDDEN_BELOW]
    hidden = [f for f in timed if f not in shown]
    return [*health, *bound, *shown, *plain], hidden


def _all(trace: Trace) -> list[Finding | None]:
    return [
        *step_findings.first(trace),
        *kernel_findings.found(trace),
        *model_findings.found(trace),
        *step_findings.last(trace),
    ]


# --- what attention's traces show (Part 3) --------------------------------------------------
