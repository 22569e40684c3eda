"""Command-line plumbing that needs no torch: the parser with one-line errors, the argparse
types every script shares, and the error a script reports as one line.

Kept apart from common.cli (which imports torch, half a GB of memory and seconds of start-up)
so that the trace commands (explain, compare) and sharing start fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

# Upper bounds on the schedule: each recorded step adds events to the trace (a few KB to MB),
# and the trace must still open in Perfetto and read back in seconds.
MAX_WAIT = 1_000
MAX_ACTIVE = 10_000
SEED_RANGE = (0, 2**64 - 1)  # what torch.manual_seed accepts


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


def traces_folder(text: str) -> str:
    """An argparse type for --traces-dir: a path the profiler can really write to.

    Refused here, before any work: an empty name (it would silently mean the current folder),
    control characters such as a newline (the profiler's exporter cannot rename its file into
    such a folder and says nothing), and bytes that are not UTF-8 (torch cannot pass the path
    to its C++ side).
    """
    if not text:
        raise argparse.ArgumentTypeError("is empty; give a folder, e.g. --traces-dir traces")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} contains a control character (a newline?)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid UTF-8; the profiler cannot write there"
        ) from None
    return text


def bucket_name(text: str) -> str:
    """An argparse type for --bucket: a Hugging Face bucket id, checked locally by
    huggingface_hub's own repo-id rules before any work is done."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as err:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a bucket name ('name' or 'user/name': letters, digits, "
            f"'-', '_', '.', at most 96 characters): {one_line(err)}"
        ) from None
    return text
