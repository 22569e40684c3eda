"""Datasheet peaks per GPU: what the vendor says a device can do, beside what we measure.

A measured ceiling (common.measuring.ceilings, `--bench`) is what a lesson's numbers are judged
against; the datasheet is the second opinion printed beside it, and what the reader uses where
nothing was measured (capping a byte estimate by what the device could have moved in a kernel's
time). Dense rates, no structured sparsity; matrix rates are the Tensor (matrix) cores',
"fp32" is plain fp32 on the CUDA (vector) cores. Figures are the vendors' published numbers:
leads, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12

# precision -> dense FLOP/s. bf16 and fp16 share the Tensor cores' rate on every part listed.
_HOPPER_SXM = {"bf16": 989.4 * T, "fp16": 989.4 * T, "tf32": 494.7 * T, "fp32": 66.9 * T}
_AMPERE_A100 = {"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T}


@dataclass(frozen=True)
class Datasheet:
    name: str  # the part the row describes
    bytes_per_s: float  # HBM bandwidth
    flops_per_s: dict[str, float]  # precision ("bf16", "fp16", "tf32", "fp32") -> dense FLOP/s

    def rate(self, precision: str) -> float | None:
        return self.flops_per_s.get(precision)


# Most specific first: a device name is matched by the first row whose every word it contains
# (case-insensitive), so "H100 PCIe" must come before "H100".
_TABLE = (
    (("h200",), Datasheet("H200 SXM", 4.8 * T, _HOPPER_SXM)),
    (
        ("h100", "pcie"),
        Datasheet(
            "H100 PCIe",
            2.0 * T,
            {"bf16": 756.5 * T, "fp16": 756.5 * T, "tf32": 378 * T, "fp32": 51.2 * T},
        ),
    ),
    (
        ("h100", "nvl"),
        Datasheet(
            "H100 NVL",
            3.9 * T,
            {"bf16": 835.5 * T, "fp16": 835.5 * T, "tf32": 417.5 * T, "fp32": 60 * T},
        ),
    ),
    (("h100",), Datasheet("H100 SXM", 3.35 * T, _HOPPER_SXM)),
    (("h800",), Datasheet("H800 SXM", 3.35 * T, _HOPPER_SXM)),
    (("a100", "80gb", "pcie"), Datasheet("A100 80GB PCIe", 1.935 * T, _AMPERE_A100)),
    (("a100", "80gb"), Datasheet("A100 80GB SXM", 2.039 * T, _AMPERE_A100)),
    (("a100",), Datasheet("A100 40GB", 1.555 * T, _AMPERE_A100)),
    (("v100",), Datasheet("V100", 0.9 * T, {"fp16": 125 * T, "fp32": 15.7 * T})),
    (
        ("b200",),
        Datasheet(
            "B200", 8.0 * T, {"bf16": 2250 * T, "fp16": 2250 * T, "tf32": 1100 * T, "fp32": 75 * T}
        ),
    ),
    (
        ("mi250x",),
        Datasheet("MI250X", 3.2768 * T, {"bf16": 383 * T, "fp16": 383 * T, "fp32": 47.9 * T}),
    ),
    (
        ("mi250",),
        Datasheet("MI250", 3.2768 * T, {"bf16": 362.1 * T, "fp16": 362.1 * T, "fp32": 45.3 * T}),
    ),
)


def datasheet(device_name: str | None) -> Datasheet | None:
    """The datasheet row for a device name as torch or the trace spells it
    ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI250X"), or None."""
    if not device_name:
        return None
    name = device_name.lower()
    for words, sheet in _TABLE:
        if all(word in name for word in words):
            return sheet
    return None
