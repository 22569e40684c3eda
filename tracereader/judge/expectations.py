"""Declared expectations ("guess first") checked against a trace ("then look").

A script states, beside its module, what each recorded step should contain: GPU work counted in
kernel classes (never in one architecture's kernel names), the precision its GEMMs compute in
(read from their names), and CPU ops that must or must not appear. On a CPU-only trace only
the CPU part is checked.

GPU work is counted in operations: a GEMM that cuBLAS runs as split-K (a product kernel and a
reduce kernel) is one GEMM, as `Step.count` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracereader.names.kernel_classes import CLASSES, PRECISIONS
from tracereader.trace.load import DTYPES, Trace, input_dtype


@dataclass(frozen=True)
class Expect:
    gpu: dict[str, int] = field(default_factory=dict)  # class -> count per step; others unchecked
    cpu_present: tuple[str, ...] = ()  # op names (or name prefixes ending in '*') in every step
    cpu_absent: tuple[str, ...] = ()
    gemms_as_in: str | None = None  # a sibling variant whose GEMM names must be identical
    # What every GEMM computes in, one of PRECISIONS ("fp32 CUDA cores", ...), read from the
    # kernel names on a GPU trace; or {input dtype: precision} for a guess that holds only
    # for some --dtype ("bf16": the run's inputs, as record_shapes saw them); None: unchecked.
    gemm_precision: str | dict[str, str] | None = None
    why: str = ""  # one line: the reasoning behind the guess

    def __post_init__(self):
        unknown = set(self.gpu) - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown kernel classes {sorted(unknown)}; use {CLASSES}")
        declared = self.gemm_precision
        if declared is None:
            return
        by_dtype = declared if isinstance(declared, dict) else {"any": declared}
        dtypes = set(DTYPES.values()) | {"any"}
        for dtype, precision in by_dtype.items():
            if dtype not in dtypes or precision not in PRECISIONS:
                raise ValueError(
                    f"gemm_precision {dtype!r}: {precision!r}: use one of {PRECISIONS}, per "
                    f"input dtype ({', '.join(sorted(dtypes - {'any'}))}) or for any"
                )

    def precision_for(self, dtype: str | None) -> str | None:
        """The GEMM precision declared for a run whose inputs are `dtype`, if any."""
        if isinstance(self.gemm_precision, dict):
            return self.gemm_precision.get(dtype) if dtype else None
        return self.gemm_precision


@dataclass
class Verdict:
    lines: list[str]
    mismatches: list[str]
    expect: Expect

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def text(self) -> str:
        """The verdict as the lessons print it: the guess, each line, then the tally."""
        head = "expected vs seen" + (f" ({self.expect.why})" if self.expect.why else "")
        tail = (
            "all as expected"
            if self.ok
            else f"{len(self.mismatches)} mismatch(es): the most interesting thing on screen"
        )
        return "\n".join([head, *self.lines, tail])


def _matches(pattern: str, name: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def check(trace: Trace, expect: Expect, *, sibling: Trace | None = None) -> Verdict:
    lines, bad = [], []

    def report(ok: bool, what: str, seen: str):
        lines.append(f"  {'ok      ' if ok else 'MISMATCH'}  {what:<38} seen: {seen}")
        if not ok:
            bad.append(f"{what}: seen {seen}")

    if not trace.steps:
        return Verdict(["  MISMATCH  no recorded steps"], ["no recorded steps"], expect)
    if trace.device is not None:
        for cls, want in expect.gpu.items():
            seen = sorted({step.count(cls) for step in trace.steps})
            shown = "/".join(map(str, seen))
            report(seen == [want], f"{want} {cls} per step", shown)
        if expect.gemms_as_in:
            mine = _gemm_names(trace)
            if sibling is None:
                lines.append(
                    f"  (not checked) GEMM names equal {expect.gemms_as_in}'s: run the "
                    f"{expect.gemms_as_in} variant first to compare"
                )
            else:
                same = mine == _gemm_names(sibling)
                report(
                    same,
                    f"GEMM names equal {expect.gemms_as_in}'s",
                    "identical" if same else f"{mine} vs {_gemm_names(sibling)}",
                )
        _check_precision(trace, expect, report, lines)
    # An op belongs to a step if any thread ran it inside the step's time (see Step).
    names = [(s.name, s.op_names_any_thread()) for s in trace.steps]
    for pattern in expect.cpu_present:
        missing = [step for step, ops in names if not any(_matches(pattern, n) for n in ops)]
        report(
            not missing,
            f"CPU op {pattern}",
            "in every step" if not missing else f"missing in {', '.join(missing)}",
        )
    for pattern in expect.cpu_absent:
        present = [step for step, ops in names if any(_matches(pattern, n) for n in ops)]
        report(
            not present,
            f"no CPU op {pattern}",
            "absent" if not present else f"present in {', '.join(present)}",
        )
    if trace.device is None:
        lines.append("  (CPU-only trace: GPU expectations not checked)")
    return Verdict(lines, bad, expect)


def _check_precision(trace: Trace, expect: Expect, report, lines: list[str]) -> None:
    """Every GEMM launch (split-K reduces aside) in every step computes in the declared
    precision; GEMMs whose names do not say are listed, and fail nothing on their own."""
    want = expect.precision_for(input_dtype(trace.steps[-1]))
    if want is None:
        return
    per_step = []  # {precision: GEMMs} of each step
    for step in trace.steps:
        seen: dict[str, int] = {}
        for item in step.gpu:
            if item.klass.cls == "gemm" and not item.klass.joins_previous:
                precision = item.klass.facts.get("precision") or "not named"
                seen[precision] = seen.get(precision, 0) + 1
        per_step.append(seen)
    what = f"GEMMs on {want}"
    everywhere = {p for seen in per_step for p in seen}
    if not everywhere:
        lines.append(f"  (not checked) {what}: no GEMM in the recorded steps")
        return
    read = everywhere - {"not named"}
    if not read:
        lines.append(f"  (not checked) {what}: no GEMM's name says its precision")
        return
    shown = ", ".join(f"{n} {p}" for p, n in per_step[-1].items()) + " per step"
    if any(seen != per_step[-1] for seen in per_step):
        shown += " (the last; other steps differ)"
    report(read == {want}, what, shown)


def _gemm_names(trace: Trace) -> list[str]:
    return [i.name for i in trace.steps[-1].gpu if i.klass.cls == "gemm"]
