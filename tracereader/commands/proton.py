"""explain --proton TRACE: the per-warp reading of a Proton trace of the fused GeGLU kernels
(03_fused_mlp.py --proton writes one), two lines."""

from __future__ import annotations

import sys

from tracereader.analyses.proton import read
from tracereader.render.lines import wrap
from tracereader.render.proton import summary
from tracereader.trace.proton import load


def explain_main(args) -> int:
    try:
        events = load(args.trace)
    except (OSError, ValueError) as err:  # missing, unreadable, not JSON (or not gzip)
        print(f"error: cannot read {args.trace}: {err}", file=sys.stderr)
        return 2
    for line in wrap(summary(read(events))):  # explain's text: at most 100 columns
        print(line)
    return 0
