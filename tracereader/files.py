"""Reading a small input file that a user, a cache or another tool may have made into something
else: a FIFO (an open that blocks), a device (/dev/zero never ends), a folder. One definition,
for the reader's caches and for the tools' inputs (through the door: `read_regular`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegular(ValueError):
    """The path is no regular file: the message says what it is."""


def kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "no regular file"


def read_regular(path: str | Path, limit: int) -> bytes:
    """At most limit + 1 bytes of `path` (the caller tells "too large" by the length). Looked at
    before it is opened (a link is followed, to a regular file only), opened non-blocking and
    looked at again (it may have been swapped in between): NotRegular otherwise; OSError where
    it cannot be read at all."""
    what = kind(os.stat(path).st_mode)
    if what:
        raise NotRegular(what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        what = kind(os.fstat(fd).st_mode)
        if what:
            raise NotRegular(what)
        return handle.read(limit + 1)
