"""Write tracereader/names/op_names.py: the torch op names the trace reader needs to split
Inductor's kernel names (triton_poi_fused__unsafe_view_gelu_mul_0 -> _unsafe_view, gelu, mul)
without importing torch (a 4 s, 650 MB import for a 2 KB trace).

Inductor names a kernel after the overload packets of the ops it fused: aten's, prims', its
own inductor_prims (prepare_softmax_online) and higher-order ops (flex_attention). Only the
names holding an underscore are written: a name without one is one token of the kernel name
anyway. Run it when torch adds ops; --check says whether the module is torch's list:

    uv run python -m tools.dev.reader_validation.op_names [--check]
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tracereader import Parser, run

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "tracereader" / "names" / "op_names.py"
NAMESPACES = ("aten", "prims", "inductor_prims")


def op_names() -> set[str]:
    """torch's op names (overload packets) of NAMESPACES and its higher-order ops."""
    import torch
    import torch._inductor.inductor_prims  # noqa: F401  (registers inductor_prims)

    names = set(torch._ops._higher_order_ops)
    for qualified in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = qualified.partition("::")
        if namespace in NAMESPACES:
            names.add(rest.split(".")[0])
    return {name for name in names if "_" in name}


def module_text(names: set[str], version: str) -> str:
    body = textwrap.fill(" ".join(sorted(names)), width=96, break_on_hyphens=False)
    return (
        f'"""torch {version}\'s op names that hold an underscore (aten, prims, inductor_prims,\n'
        "higher-order ops), for splitting Inductor's kernel names without torch.\n\n"
        "Written by tools/dev/reader_validation/op_names.py: "
        'run it again rather than editing."""\n\n'
        f'NAMES = """\n{body}\n"""\n'
    )


def main(argv: list[str] | None = None) -> int:

    import torch

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    names = op_names()
    if args.check:
        from tracereader import OP_NAMES as NAMES

        written = set(NAMES.split())
        missing, extra = sorted(names - written), sorted(written - names)
        if missing or extra:
            print(f"not torch {torch.__version__}'s list: missing {missing}, extra {extra}")
            return 1
        print(f"torch {torch.__version__}'s list ({len(names)} names)")
        return 0
    TARGET.write_text(module_text(names, torch.__version__.split("+")[0]))
    print(f"wrote {TARGET}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
