"""Command-line plumbing that needs no torch: the parser with one-line errors, the whole-number
argparse types, and the error a command reports as one line.

The trace commands use it, and so do the lessons (through common.cli) and sharing: one parser,
one error path, and explain/compare start without importing torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


class UsageError(Exception):
    """Input the script cannot work with: reported as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (argparse prints the usage block first), the
    description keeps its layout, and a mistyped flag fails instead of matching a prefix."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def one_line(err: BaseException, limit: int = 200, *, secret: str | None = None) -> str:
    """`Type: first line of the message`, cut to `limit`: an exception fit for one stderr line.

    A `secret` (a token) is scrubbed from the whole message before it is cut, so that no
    prefix of it can survive at the cut.
    """
    text = str(err)
    if secret:
        text = text.replace(secret, "***")
    first = text.splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}"[:limit]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def int_in(low: int, high: int, why: str) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; `why` explains the bound."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value} ({why})")
        return value

    return parse


def size_up_to(high: float, unit: str, low: float = 0.0) -> Callable[[str], float]:
    """An argparse type: a number of `unit`, more than 0 (or at least `low`, where given) and at
    most `high`; NaN and inf are refused by the same comparisons."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text!r}") from None
        if not ((low < value if low == 0 else low <= value) and value <= high):
            floor = "more than 0" if low == 0 else f"at least {low:g}"
            raise argparse.ArgumentTypeError(
                f"must be {floor} and at most {high:g} {unit}, got {text}"
            )
        return value

    return parse
