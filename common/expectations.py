"""Declared expectations ("guess first") checked against a trace ("then look").

A script states, beside its module, what each recorded step should contain: GPU work counted in
kernel classes (never in one architecture's kernel names) and CPU ops that must or must not
appear. On a CPU-only trace only the CPU part is checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.kernel_names import CLASSES
from common.trace_reader import Trace


@dataclass(frozen=True)
class Expect:
    gpu: dict[str, int] = field(default_factory=dict)  # class -> count per step; others unchecked
    cpu_present: tuple[str, ...] = ()  # op names (or name prefixes ending in '*') in every step
    cpu_absent: tuple[str, ...] = ()
    gemms_as_in: str | None = None  # a sibling variant whose GEMM names must be identical
    why: str = ""  # one line: the reasoning behind the guess

    def __post_init__(self):
        unknown = set(self.gpu) - set(CLASSES)
        if unknown:
            raise ValueError(f"unknown kernel classes {sorted(unknown)}; use {CLASSES}")


@dataclass
class Verdict:
    lines: list[str]
    mismatches: list[str]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _matches(pattern: str, name: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def check(trace: Trace, expect: Expect, *, sibling: Trace | None = None) -> Verdict:
    lines, bad = [], []

    def report(ok: bool, what: str, seen: str):
        lines.append(f"  {'ok      ' if ok else 'MISMATCH'}  {what:<38} seen: {seen}")
        if not ok:
            bad.append(f"{what}: seen {seen}")

    if not trace.steps:
        return Verdict(["  MISMATCH  no recorded steps"], ["no recorded steps"])
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
    for pattern in expect.cpu_present:
        missing = [
            s.name for s in trace.steps if not any(_matches(pattern, n) for n in s.op_names())
        ]
        report(
            not missing,
            f"CPU op {pattern}",
            "in every step" if not missing else f"missing in {', '.join(missing)}",
        )
    for pattern in expect.cpu_absent:
        present = [s.name for s in trace.steps if any(_matches(pattern, n) for n in s.op_names())]
        report(
            not present,
            f"no CPU op {pattern}",
            "absent" if not present else f"present in {', '.join(present)}",
        )
    if trace.device is None:
        lines.append("  (CPU-only trace: GPU expectations not checked)")
    return Verdict(lines, bad)


def _gemm_names(trace: Trace) -> list[str]:
    return [i.name for i in trace.steps[-1].gpu if i.klass.cls == "gemm"]


def render(verdict: Verdict, expect: Expect) -> str:
    head = "expected vs seen" + (f" ({expect.why})" if expect.why else "")
    tail = (
        "all as expected"
        if verdict.ok
        else f"{len(verdict.mismatches)} mismatch(es): the most interesting thing on screen"
    )
    return "\n".join([head, *verdict.lines, tail])
