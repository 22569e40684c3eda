"""08_generate.py --bench's breakdown of a decode token (common/measuring/generation.py), on a
real H200 decode trace: the arithmetic that says where the time above the floor goes."""

from __future__ import annotations

import re
import types

import pytest

import tracereader
from common.measuring import generation as measured
from modules import llama
from tests.helpers import ROOT
from tracereader.trace import load as trace_reader


def test_bench_breaks_a_decode_token_into_its_parts_and_they_fill_its_window():
    """--bench's breakdown on a real H200 decode (the best flags with --gemv and the fused gate):
    the GEMVs' bytes over their time against the copy bandwidth, attention's likewise, the
    other kernels and the gaps; the parts fill the token's window."""
    name = "8b_b1_p512_n256_bf16_static_graphs_fused_split_gemv_gate_compile.json.gz"
    trace = trace_reader.load(ROOT / "tests/fixtures/h200/08_generate" / name)
    reading = tracereader.generation(trace)
    v = types.SimpleNamespace(cfg=llama.PRESETS["8b"], batch=1, prompt=512)
    lines = measured.decode_breakdown(reading, v, 256, 2, bytes_per_s=4.27e12)
    parts = {line.split("  ")[2].strip(): float(re.search(r"([\d.]+) us", line).group(1))
             for line in lines[1:]}  # fmt: skip
    window = parts.pop("= the window")
    assert window == pytest.approx(reading["decode"]["per_token_us"]["median"], rel=0.01)
    assert sum(parts.values()) == pytest.approx(window, rel=0.01)
    gemm = next(line for line in lines if "GEMM" in line)
    weights = sum(k.bytes for k in measured.traffic_model(v, 640, 2) if k.cls == "gemm")
    rate = weights / (parts["GEMM"] * 1e-6)
    assert f"{rate / 4.27e12:.0%} of the copy bandwidth" in gemm and 0.8 < rate / 4.27e12 < 1.0
    assert parts["gaps between kernels"] == pytest.approx(
        window - reading["decode"]["gpu_busy_us"], abs=0.1
    )
