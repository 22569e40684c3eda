"""How tools/tune_fused_mlp.py and tools/dev/kernel_lab's benches time and check a call: do_bench
medians, calls queued back to back, the host's issue time, the GPU's clocks and power from
nvidia-smi, a relative error, and the compute floor (a forward's FLOPs at the best rate any GEMM
timed beside it reached)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from common.measuring import timing
from tracereader import datasheet


@dataclass
class Row:
    what: str
    us: float | None  # None: failed
    note: str = ""


def bench_us(fn) -> float:
    """do_bench's median (common.measuring.timing.time_gpu), in us."""
    return timing.time_gpu(fn).median_s * 1e6


def queued_us(fn) -> float:
    """Calls issued back to back between CUDA events (warm L2), median per call, in us."""
    return timing.time_gpu_queued(fn).median_s * 1e6


def host_us(fn) -> float:
    """The host's time to issue one call (no waiting for the GPU), median, in us."""
    return timing.time_host(fn).median_s * 1e6


def gpu_state() -> str:
    """SM clock, power and throttle reasons from nvidia-smi, or why not."""
    import subprocess

    query = "clocks.sm,clocks.max.sm,power.draw,power.limit,clocks_event_reasons.active"
    # nvidia-smi ignores CUDA_VISIBLE_DEVICES: name the GPU torch uses by its UUID, where
    # torch knows it (else nvidia-smi's first GPU, said so)
    uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", ""))
    uuid = uuid if not uuid or uuid.startswith("GPU-") else f"GPU-{uuid}"
    for select in ([["-i", uuid]] if uuid else []) + [[]]:
        try:
            out = subprocess.run(
                ["nvidia-smi", *select, f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"(nvidia-smi: {first_line(err)})"
        lines = out.stdout.strip().splitlines()
        if out.returncode == 0 and lines:
            return lines[0] + ("" if select else " (nvidia-smi's GPU 0)")
    return "(nvidia-smi gave no reading)"


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:160]


def cuda_alive() -> bool:
    try:
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.float()
    if not torch.isfinite(out).all():
        return math.inf
    return float((out - ref).norm() / ref.norm())


def compute_floor(
    fwd_flops: float, flops: dict[str, float], median_us: dict[str, float], device: str, dtype: str
) -> tuple[float, list[str]]:
    """The forward's FLOPs at the best rate any GEMM timed in the same passes reached (what:
    FLOPs of one call; median_us: its time): (floor in us, lines that say each rate, the
    datasheet's peak beside)."""
    rates = {w: f / (median_us[w] * 1e-6) for w, f in flops.items() if median_us.get(w)}
    if not rates:
        return math.nan, ["compute floor: no GEMM could be timed"]
    best = max(rates, key=rates.__getitem__)
    sheet = datasheet(device)
    peak = sheet.rate(dtype) if sheet else None
    lines = [
        f"{median_us[w]:7.1f} us {w:<52} {r / 1e12:4.0f} TFLOP/s"
        + (f" ({r / peak:.0%} of {sheet.name}'s datasheet {dtype} peak)" if peak else "")
        for w, r in rates.items()
    ]
    floor_us = fwd_flops / rates[best] * 1e6
    lines.append(
        f"compute floor: {fwd_flops / 1e9:.1f} GFLOP at {rates[best] / 1e12:.0f} TFLOP/s, the "
        f"best rate measured ({best}) = {floor_us:.1f} us"
    )
    return floor_us, lines
