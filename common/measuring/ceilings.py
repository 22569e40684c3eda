"""The device's ceilings, measured rather than read off a datasheet: one per precision, cached.

- memory: a 1 GiB device-to-device copy, counting bytes read plus bytes written;
- matrix, for each precision a run needs: bf16 and fp16 (Tensor cores), tf32 (float32 inputs
  with TF32 allowed: Tensor cores), fp32 (TF32 refused: CUDA cores). Each is the best rate of a
  few matmuls on random data (zeros run faster than real data on some GPUs): squares of 4096,
  8192 and 16384, plus the lesson's own GEMM shapes. One square is no ceiling: on an H100 a bf16
  8192x4096x4096 GEMM ran at 105% of the 8192^3 matmul's rate, a K = 768 gate/up at 109%.
Each probe is its fastest call's GPU time as the profiler measures it, the measure of the kernels
it judges.
Cached in $XDG_CACHE_HOME/profiling-pytorch/ceilings.json (default ~/.cache/...), one entry per
device, torch version and precision holding the rate of every shape measured, so a run measures
only the precisions and shapes no earlier run did; `--fresh-ceilings` measures them again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tracereader import cache_path as reader_cache_path
from tracereader import datasheet, load_cache, save_cache

PRECISIONS = ("bf16", "fp16", "tf32", "fp32")  # the datasheet's keys (tracereader.names.devices)
MEMORY = "memory"
COPY = "1 GiB device-to-device copy"
COPY_BYTES = 1 << 30  # many times the 50-60 MB L2 of an H100/H200
SQUARES = (4096, 8192, 16384)

Shape = tuple[int, int, int, int]  # a GEMM's (batch, m, k, n)


def shape_text(shape: Shape) -> str:
    batch, m, k, n = shape
    text = f"{m}^3" if m == k == n else f"{m}x{k}x{n}"
    return text if batch == 1 else f"{batch} x {text}"


def probes(precision: str, shapes: Iterable[Shape] = ()) -> list[str]:
    """What a ceiling is the best of: the copy for memory; the squares and `shapes` for a
    precision (each named as the cache names it)."""
    if precision == MEMORY:
        return [COPY]
    squares = [(1, n, n, n) for n in SQUARES]
    return list(dict.fromkeys(shape_text(s) for s in [*squares, *shapes]))


@dataclass(frozen=True)
class Ceiling:
    what: str  # MEMORY or one of PRECISIONS
    per_s: float  # bytes/s for memory, FLOP/s for a precision: the best of `rates`
    rates: dict[str, float]  # probe -> its rate
    measured: str  # the date of the oldest rate used
    cached: bool  # every rate came from the cache

    @property
    def best(self) -> str:
        return max(self.rates, key=self.rates.__getitem__)

    def describe(self, device_name: str | None) -> str:
        """`bf16: measured 767 of a 989 TFLOP/s datasheet bf16 peak (78%, H100 SXM); best of
        5 matmuls: 4096^3, 2026-11-24 [cached]`."""
        memory = self.what == MEMORY
        unit, digits = ("TB/s", 2) if memory else ("TFLOP/s", 0)
        mine = f"{self.per_s / 1e12:.{digits}f}"
        sheet = datasheet(device_name)
        peak = (sheet.bytes_per_s if memory else sheet.rate(self.what)) if sheet else None
        if peak:
            text = (
                f"{self.what}: measured {mine} of a {peak / 1e12:.{digits}f} {unit} datasheet"
                f"{'' if memory else ' ' + self.what} peak ({self.per_s / peak:.0%}, {sheet.name})"
            )
        elif sheet:
            text = f"{self.what}: measured {mine} {unit} ({sheet.name}'s datasheet has no rate)"
        else:
            text = f"{self.what}: measured {mine} {unit} (no datasheet row for this device)"
        if memory:
            how = f"{COPY}, read + write"
        elif len(self.rates) == 1:
            how = f"{self.best} matmul"
        else:
            how = f"best of {len(self.rates)} matmuls: {self.best}"
        return f"{text}; {how}, {self.measured}{' [cached]' if self.cached else ''}"


def cache_path() -> Path:
    return reader_cache_path("ceilings.json")


def key(device_name: str, torch_version: str, what: str) -> str:
    return f"{device_name} | torch {torch_version} | {what}"


def _cached_rate(entry: object, probe: str) -> tuple[float, str] | None:
    """(rate, date) of one probe in a cache entry, None if absent or damaged."""
    if not isinstance(entry, dict) or not isinstance(entry.get(probe), dict):
        return None
    found = entry[probe]
    try:
        rate = float(found["per_s"])
    except (KeyError, TypeError, ValueError):
        return None
    if not rate > 0 or rate == float("inf"):
        return None
    return rate, str(found.get("measured", ""))


def get(
    device_name: str,
    torch_version: str,
    needed: Mapping[str, Iterable[Shape]],
    measure_fn: Callable[[str, str], float | None],
    *,
    path: Path | None = None,
    fresh: bool = False,
) -> dict[str, Ceiling]:
    """The ceilings `needed` ({MEMORY or precision: the lesson's GEMM shapes}), from the cache
    where it has them, else `measure_fn(what, probe)` -> rate (None: could not be measured,
    e.g. out of memory), cached. A ceiling none of whose probes could be measured is left out."""
    path = path or cache_path()
    cache = load_cache(path)
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    out = {}
    changed = False
    for what, shapes in needed.items():
        k = key(device_name, torch_version, what)
        entry = cache.get(k) if isinstance(cache.get(k), dict) else {}
        rates, dates, cached = {}, [], True
        for probe in probes(what, shapes):
            found = None if fresh else _cached_rate(entry, probe)
            if found is None:
                rate = measure_fn(what, probe)
                if rate is None:
                    continue
                found, cached, changed = (rate, stamp), False, True
                entry[probe] = {"per_s": rate, "measured": stamp}
            rates[probe] = found[0]
            dates.append(found[1])
        cache[k] = entry
        if rates:
            best = max(rates.values())
            out[what] = Ceiling(what, best, rates, min(dates), cached)
    if changed:
        save_cache(path, cache)
    return out


# --- measuring, on a CUDA GPU ----------------------------------------------------------------


def parse_shape(probe: str) -> Shape:
    """The inverse of shape_text."""
    batch, _, gemm = probe.rpartition(" x ")
    if gemm.endswith("^3"):
        n = int(gemm[:-2])
        return (int(batch or 1), n, n, n)
    m, k, n = (int(v) for v in gemm.split("x"))
    return (int(batch or 1), m, k, n)


@contextlib.contextmanager
def _tf32(allowed: bool):
    """cuBLAS's TF32 switch for float32 matmuls, restored afterwards."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _seconds(fn: Callable[[], object]) -> float:
    """The fastest of 20 calls, in GPU time as the profiler measures it: the measure of the
    profiled kernels a ceiling judges (CUDA events around queued calls count the gaps
    between kernels too, and a kernel the ceiling was taken on could then beat it)."""
    from common.measuring.timing import time_gpu_profiled

    return time_gpu_profiled(fn).best_s


def measure(device, what: str, probe: str) -> float | None:
    """One probe's rate on `device`; None where it does not fit in memory."""
    import torch

    try:
        if what == MEMORY:
            src = torch.randn(COPY_BYTES // 2, device=device, dtype=torch.bfloat16)
            dst = torch.empty_like(src)
            return 2 * COPY_BYTES / _seconds(lambda: dst.copy_(src))
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(what, torch.float32)
        batch, m, k, n = parse_shape(probe)
        lead = (batch,) if batch > 1 else ()
        a = torch.randn(*lead, m, k, device=device, dtype=dtype)
        b = torch.randn(*lead, n, k, device=device, dtype=dtype).transpose(-2, -1)  # nn.Linear's
        with _tf32(what == "tf32"):
            seconds = _seconds(lambda: torch.matmul(a, b))
    except torch.cuda.OutOfMemoryError:
        return None  # the other probes decide
    return 2 * batch * m * k * n / seconds
