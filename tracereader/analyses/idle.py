"""Why the GPU sat idle during a step, split the way HTA splits idle time:

  host wait     the GPU had finished everything queued and the next work was launched only
                after that: the GPU waited for the CPU
  kernel wait   a gap shorter than KERNEL_WAIT_US with the next work already queued: the
                cost of starting one kernel after another
  other         any other gap with the next work already queued (waiting on an event, a
                stream dependency, another stream's work)

HTA looks at each stream alone; here the gaps are those of the union of all the step's GPU
work (the time no stream was busy), from the step's start to its end or to its last GPU
work's end, whichever is later. Time after the last GPU work while the CPU is still inside
the step is host wait.
"""

from __future__ import annotations

from tracereader.trace.model import Step, in_start_order, per_step

KERNEL_WAIT_US = 0.03  # HTA's default consecutive_kernel_delay: 30 ns


@per_step
def split(step: Step) -> dict:
    host = kernel = other = 0.0
    free_from = step.ts  # the GPU is free (for this step's work) from here
    for item in in_start_order(step):
        gap = item.ts - free_from
        if gap > 0:
            launched = item.call.ts if item.call is not None else None
            if launched is not None and launched > free_from:
                host += gap
            elif gap < KERNEL_WAIT_US:
                kernel += gap
            else:
                other += gap
        free_from = max(free_from, item.ts + item.dur)
    if step.ts + step.dur > free_from:
        host += step.ts + step.dur - free_from
    return {"host_wait_us": host, "kernel_wait_us": kernel, "other_us": other}
