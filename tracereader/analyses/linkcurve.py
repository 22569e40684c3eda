"""The link between GPUs as a curve: bus bandwidth against message size, per collective kind.

A collective's bus bandwidth depends on its size (small messages are latency, large ones
bandwidth), so a ceiling taken at one size is no ceiling for another: a 537 MB all-reduce
judged against a 256 MiB one read "104% of the link". nccl-tests sweeps sizes for that reason;
tools/dev/ranks/link_curve.py does the same on the machine at hand, and a collective is judged
against the curve at its own kind and size.

Bus bandwidth, nccl-tests' busbw, for a collective over N ranks of S bytes (the whole buffer:
the all-reduce's, the all-gather's output, the reduce-scatter's input) taking t seconds:
all-reduce 2(N-1)/N x S / t; all-gather and reduce-scatter (N-1)/N x S / t.

Each point is the best of its repeated timings (a ceiling is the most the link gave, not its
typical), interpolated linearly in log2(size) between points; above the largest size the
largest's (the link is saturated), below the smallest none (latency dominates: no claim).
A traced collective faster than the curve is reported at the ceiling and flagged, never as
more than 100% of it: the curve is a measurement too, of calls queued with their launch gaps.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

KINDS = ("all-reduce", "all-gather", "reduce-scatter")
COLUMNS = ("kind", "bytes", "bus_GBps", "best_us", "median_us")


@dataclass(frozen=True)
class Judged:
    """A collective against the curve: its share of the ceiling at its size (at most 1.0),
    whether it ran faster than the curve (then share is 1.0), and the ceiling used."""

    share: float | None
    above: bool
    ceiling_bytes_per_s: float | None

    def text(self) -> str:
        if self.share is None:
            return "below the measured curve's sizes: latency-bound, no ceiling claimed"
        if self.above:
            return ("at the link's ceiling for its size (faster than the curve's best call: "
                    "the curve times calls with their launch gaps)")  # fmt: skip
        note = " (latency-bound at this size)" if self.share < 0.5 else ""
        return f"{self.share:.0%} of the link's ceiling at its size and kind{note}"


@dataclass(frozen=True)
class LinkCurve:
    device: str
    backend: str
    world: int
    measured: str  # how and when
    points: dict[str, tuple[tuple[int, float], ...]]  # kind -> ((bytes, bus bytes/s), ...) sorted

    def ceiling(self, kind: str, nbytes: float) -> float | None:
        """The bus bandwidth the link gave `kind` at `nbytes` (bytes/s), None below the curve's
        smallest size or for a kind not measured."""
        found = self.points.get(kind)
        if not found or not nbytes or nbytes < found[0][0]:
            return None
        if nbytes >= found[-1][0]:
            return found[-1][1]
        x = math.log2(nbytes)
        for (s0, b0), (s1, b1) in zip(found, found[1:], strict=False):
            if s0 == s1:
                continue  # a size measured twice (a curve built by hand): no slope between
            if s0 <= nbytes <= s1:
                f = (x - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
                return b0 + f * (b1 - b0)
        return None

    def judge(self, kind: str, nbytes: float, bus_bytes_per_s: float) -> Judged:
        top = self.ceiling(kind, nbytes)
        if top is None or not bus_bytes_per_s or top <= 0:
            return Judged(None, False, top)
        share = bus_bytes_per_s / top
        return Judged(min(share, 1.0), share > 1.0, top)

    def to_csv(self) -> str:
        out = io.StringIO()
        out.write(f"# {self.device} | {self.backend} | {self.world} ranks | {self.measured}\n")
        writer = csv.writer(out)
        writer.writerow(COLUMNS[:3])
        for kind in KINDS:
            for nbytes, bus in self.points.get(kind, ()):
                writer.writerow([kind, nbytes, f"{bus / 1e9:.3f}"])
        return out.getvalue()

    @classmethod
    def from_csv(cls, text: str) -> LinkCurve:
        """The inverse of to_csv; ValueError on anything else (a field past csv's limit too)."""
        try:
            return cls._from_csv(text)
        except csv.Error as err:
            raise ValueError(f"not a link curve: {err}") from None

    @classmethod
    def _from_csv(cls, text: str) -> LinkCurve:
        lines = text.splitlines()
        if not lines or not lines[0].startswith("# "):
            raise ValueError("not a link curve: its first line names the device and ranks")
        head = [part.strip() for part in lines[0][2:].split("|")]
        if len(head) != 4 or not head[2].endswith(" ranks"):
            raise ValueError("not a link curve: expected '# device | backend | N ranks | how'")
        points: dict[str, list[tuple[int, float]]] = {}
        for row in csv.DictReader(lines[1:]):
            kind, nbytes, bus = row.get("kind"), row.get("bytes"), row.get("bus_GBps")
            if kind not in KINDS or nbytes is None or bus is None:
                raise ValueError(f"not a link curve row: {row}")
            value = float(bus) * 1e9
            if not math.isfinite(value) or value <= 0 or not 0 < int(nbytes) < 2**63:
                raise ValueError(f"not a link curve row: {row}")
            points.setdefault(kind, []).append((int(nbytes), value))
        for kind, rows in points.items():  # one point per size (the best, where repeated)
            best: dict[int, float] = {}
            for size, value in rows:
                best[size] = max(best.get(size, 0.0), value)
            points[kind] = list(best.items())
        return cls(
            device=head[0],
            backend=head[1],
            world=int(head[2].removesuffix(" ranks")),
            measured=head[3],
            points={k: tuple(sorted(v)) for k, v in points.items()},
        )
