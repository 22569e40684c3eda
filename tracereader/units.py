"""Numbers as the reader prints them: durations for a person, cells of a table, byte counts. A
module of its own, with no imports, so that what prints a number (ranks, the lessons' reports)
does not load the renderers and the analyses behind them."""

from __future__ import annotations


def duration(us: float | None) -> str:
    """A duration for a person: us below 10 ms (three decimals below 1 us, where floors of
    tiny kernels live), ms below 10 s, else s. The one duration format of the project."""
    if us is None:
        return "-"
    if abs(us) < 1:
        return f"{us:.3f} us"
    if abs(us) < 10_000:
        return f"{us:.1f} us"
    if abs(us) < 10_000_000:
        return f"{us / 1e3:.1f} ms"
    return f"{us / 1e6:.2f} s"


def cell(value: float | None) -> str:
    """A number in a table whose column header carries the unit; "-" where there is none."""
    return "-" if value is None else f"{value:.1f}"


def bytes_text(n: float | None) -> str:
    if n is None:
        return "? bytes"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def binary_size(n: float, *, three_digits: bool = False) -> str:
    """Bytes in binary units: 2 decimals (1.50 MiB), or 3 significant digits, never in
    e-notation (2.46 KiB, 96.0 MiB, 123 GiB)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            x = n / scale
            digits = max(0, 3 - len(str(int(abs(x))))) if three_digits else 2
            return f"{x:.{digits}f} {unit}"
    return f"{n:.0f} B"
