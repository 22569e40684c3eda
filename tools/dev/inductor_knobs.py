"""Run a lesson with Inductor settings that have no environment variable of their own, for GPU
experiments: INDUCTOR_KNOBS="combo_kernels=1,benchmark_combo_kernel=1" python3 -m
tools.dev.inductor_knobs 08_generate.py ARGS... Each knob is torch._inductor.config's attribute
of that name (its type kept: 0/1 for booleans, numbers, else a string); an unknown one stops the
run in one line. A setting the lesson makes itself wins (08_generate --autotune sets coordinate
descent and combo kernels after these)."""

from __future__ import annotations

import os
import runpy
import sys


def _value(old, text: str):
    if isinstance(old, bool):
        return text not in ("0", "false", "False", "")
    return type(old)(text) if isinstance(old, (int, float)) else text


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: INDUCTOR_KNOBS=a=1,b=2 python3 -m tools.dev.inductor_knobs SCRIPT [ARGS...]",
              file=sys.stderr)  # fmt: skip
        return 2
    import torch._inductor.config as config

    for knob in filter(None, os.environ.get("INDUCTOR_KNOBS", "").split(",")):
        name, _, text = knob.partition("=")
        target, _, attr = name.rpartition(".")
        owner = config if not target else getattr(config, target, None)
        if owner is None or not hasattr(owner, attr):
            print(f"error: torch._inductor.config has no {name}", file=sys.stderr)
            return 2
        setattr(owner, attr, _value(getattr(owner, attr), text))
        print(f"inductor knob: {name} = {getattr(owner, attr)!r}", file=sys.stderr)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
