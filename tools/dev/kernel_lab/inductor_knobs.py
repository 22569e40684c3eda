"""Run a lesson with Inductor settings that have no environment variable of their own, for GPU
experiments: INDUCTOR_KNOBS="combo_kernels=1,benchmark_combo_kernel=1" python3 -m
tools.dev.kernel_lab.inductor_knobs 08_generate.py ARGS... Each knob is torch._inductor.config's
attribute of that name (its type kept: 0/1 for booleans, numbers, else a string); an unknown one
stops the run in one line. A setting the lesson makes itself wins (08_generate --autotune sets
coordinate descent and combo kernels after these)."""

from __future__ import annotations

import os
import runpy
import sys

from tracereader import run

BOOLEANS = {"1": True, "true": True, "0": False, "false": False}


def _value(old, text: str):
    """text as old's type; ValueError for one it cannot be."""
    if isinstance(old, bool):
        if text.lower() not in BOOLEANS:
            raise ValueError(f"{text!r} is not 0, 1, true or false")
        return BOOLEANS[text.lower()]
    return type(old)(text) if isinstance(old, (int, float)) else text


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: INDUCTOR_KNOBS=a=1,b=2 python3 -m tools.dev.kernel_lab.inductor_knobs SCRIPT "
              "[ARGS...]", file=sys.stderr)  # fmt: skip
        return 2
    import torch._inductor.config as config

    for knob in filter(None, os.environ.get("INDUCTOR_KNOBS", "").split(",")):
        name, _, text = knob.partition("=")
        target, _, attr = name.rpartition(".")
        owner = config if not target else getattr(config, target, None)
        if owner is None or not hasattr(owner, attr):
            print(f"error: torch._inductor.config has no {name}", file=sys.stderr)
            return 2
        try:
            setattr(owner, attr, _value(getattr(owner, attr), text))
        except ValueError as err:
            print(f"error: INDUCTOR_KNOBS {name}: {err}", file=sys.stderr)
            return 2
        print(f"inductor knob: {name} = {getattr(owner, attr)!r}", file=sys.stderr)
    if not os.path.isfile(sys.argv[1]):
        print(f"error: no script {sys.argv[1]}", file=sys.stderr)
        return 2
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
