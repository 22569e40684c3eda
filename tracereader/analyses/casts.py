"""A cast's dtypes read off its CPU op: `aten::_to_copy` / `aten::to` record the input's type
and, with record_shapes, the dtype they cast to (torch's ScalarType code, which the loader
keeps as "Cast to")."""

from __future__ import annotations

import math

from tracereader.trace.model import DTYPES, CpuOp

# torch's ScalarType codes, as record_shapes writes a dtype argument ("Concrete Inputs").
SCALAR_TYPES = {"5": "fp16", "6": "fp32", "7": "fp64", "15": "bf16"}


def cast(op: CpuOp) -> tuple[str | None, str | None, int | None]:
    """An `aten::_to_copy` / `aten::to` op's (from, to, elements), each None where the trace
    does not say (no record_shapes, a cast that only moves devices)."""
    types = op.args.get("Input type") or ()
    dims = op.args.get("Input Dims") or ()
    source = DTYPES.get(types[0]) if types else None
    target = SCALAR_TYPES.get(op.args.get("Cast to", ""))
    elements = math.prod(dims[0]) if dims and isinstance(dims[0], tuple) else None
    return source, target, elements
