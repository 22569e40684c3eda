"""Questions about the ops an op is nested in, asked of many ops at once: which backward node
holds a kernel's launcher, whether an optimizer region does, the outermost cast around it.
Walking every asked op's ancestors (model.ancestors) costs the depth each time: quadratic in
a nest thousands deep where every op launches (a recursion traced op by op). Here each op's
answer is built from its parent's and kept, so a whole nest costs one walk.
"""

from __future__ import annotations

from collections.abc import Callable

from tracereader.trace.model import CpuOp


def along(fold: Callable[[object, CpuOp], object]) -> Callable[[CpuOp | None], object]:
    """The answer for an op (None for no op): `fold(answer for its parent, op)`, where ops
    directly under the step fold from None. Each answer is kept for the returned function's
    life, so ask one of them per reading of a trace, not one per op."""
    known: dict[CpuOp, object] = {}

    def answer(op: CpuOp | None) -> object:
        chain = []  # the ops not yet answered, innermost first: no recursion, any depth
        while op is not None and op not in known:
            chain.append(op)
            op = op.parent
        found = known[op] if op is not None else None
        for node in reversed(chain):
            found = known[node] = fold(found, node)
        return found

    def each(ops) -> list:
        """The answers for `ops`, parents before their children (a step's ops in start
        order): one pass, each op from its parent's answer, the walk only where it is not
        known yet (an ancestor outside `ops`)."""
        out = []
        for op in ops:
            parent = op.parent
            if parent is not None and parent not in known:
                out.append(answer(op))
                continue
            found = known[op] = fold(known[parent] if parent is not None else None, op)
            out.append(found)
        return out

    answer.each = each  # asked of a whole step's ops at once: the summary's hot path
    return answer


def innermost(test: Callable[[CpuOp], object]) -> Callable[[CpuOp | None], object]:
    """The innermost of an op and its ancestors that `test` holds for (None: none does)."""
    return along(lambda above, op: op if test(op) else above)


def outermost(test: Callable[[CpuOp], object]) -> Callable[[CpuOp | None], object]:
    """The outermost of an op and its ancestors that `test` holds for (None: none does)."""
    return along(lambda above, op: above if above is not None else op if test(op) else None)
