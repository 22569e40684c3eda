"""The device's two ceilings, measured rather than read off a datasheet, and cached per device.

- memory: a large device-to-device copy, counting bytes read plus bytes written;
- matrix: a large bf16 matmul on random data (zeros run faster than real data on some GPUs).
Cached in $XDG_CACHE_HOME/profiling-pytorch/ceilings.json (default ~/.cache/...), keyed by
device name and torch version, so repeated runs do not pay for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from common.measuring.timing import time_gpu
from tracereader import caches as jsoncache

COPY_BYTES = 1 << 30  # 1 GiB: many times the 50-60 MB L2 of an H100/H200
MATMUL_N = 8192


@dataclass(frozen=True)
class Ceilings:
    bytes_per_s: float
    flops_per_s: float
    measured: str  # when and with what

    def describe(self) -> str:
        return (
            f"memory {self.bytes_per_s / 1e12:.2f} TB/s (1 GiB DtoD copy, read + write), "
            f"matrix {self.flops_per_s / 1e12:.0f} TFLOP/s (bf16 {MATMUL_N}^3 matmul); "
            f"{self.measured}"
        )


def cache_path() -> Path:
    return jsoncache.path("ceilings.json")


def device_key(device: torch.device) -> str:
    return f"{torch.cuda.get_device_name(device)} | torch {torch.__version__}"


def _copy_seconds(device: torch.device) -> float:
    src = torch.randn(COPY_BYTES // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return time_gpu(lambda: dst.copy_(src)).median_s


def _matmul_seconds(device: torch.device) -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    return time_gpu(lambda: a @ b).median_s


def measure(device: torch.device) -> Ceilings:
    copy_s, mm_s = _copy_seconds(device), _matmul_seconds(device)  # buffers freed in between
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    return Ceilings(
        2 * COPY_BYTES / copy_s, 2 * MATMUL_N**3 / mm_s, f"measured {stamp} on {device_key(device)}"
    )


def get(
    key: str, measure_fn: Callable[[], Ceilings], *, path: Path | None = None, fresh: bool = False
) -> tuple[Ceilings, bool]:
    """Cached ceilings for `key`, measuring (and caching) them if absent; (ceilings, cached?)."""
    path = path or cache_path()
    cache = jsoncache.load(path)
    if not fresh and key in cache:
        try:
            found = Ceilings(**cache[key])
            if float(found.bytes_per_s) > 0 and float(found.flops_per_s) > 0:
                return found, True
        except (TypeError, ValueError):
            pass  # an older or damaged entry: measure again
    ceilings = measure_fn()
    cache[key] = asdict(ceilings)
    jsoncache.save(path, cache)
    return ceilings, False
