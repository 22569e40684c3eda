"""Lines that fit a terminal: a line longer than the width is wrapped at spaces, its
continuation indented under the line's own indent, so a long list (kernel names, CPU ops gone)
stays readable and nothing is cut. explain's text is at most WIDTH wide; a path longer than
that (typed that long) is kept whole on a line of its own, a name that long broken at the end of
the line."""

from __future__ import annotations

import os
import shlex
import textwrap

WIDTH = 100  # explain's and compare's text, every line of it
HANG = 4  # a continuation line's indent past its item's own


def wrap(lines: list[str], width: int = WIDTH) -> list[str]:
    """Each line as it is, or wrapped at spaces into lines of at most `width`."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        room = width - len(indent) - HANG
        # a path is copied whole, on a line of its own however long; a longer name (a compiled
        # kernel's) is broken where a line ends, so that no line is wider than `width`
        path = any(len(word) > room and "/" in word for word in line.split())
        out += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=indent + " " * HANG,
            break_on_hyphens=False,
            break_long_words=not path,
        )
    return out


def typed(path: str) -> str:
    """A path inside a command to copy: relative to the current folder where it lies under it
    (the command is pasted where it was printed), quoted for the shell where it must be."""
    try:
        rel = os.path.relpath(path)
    except (ValueError, OSError):  # another drive (Windows), the current folder gone
        rel = path
    shown = path if rel.startswith("..") else rel
    return shlex.quote(f"./{shown}" if shown.startswith("-") else shown)  # never an option


def cut(name: str, width: int) -> str:
    """A name in a table's column: whole where it fits, else its start and an ellipsis."""
    return name if len(name) <= width else name[: width - 3] + "..."


def header(head: str, about: str, width: int = WIDTH) -> list[str]:
    """A section's first line, `head` (naming a path) then `(about)`: one line where it fits,
    else `about` whole on the line below, so that a path's length never splits what is said of
    it."""
    line = f"{head} ({about})"
    if len(line) <= width:
        return [line]
    return [*wrap([head], width), *wrap([f"{' ' * HANG}({about})"], width)]


_KEEP = "\ue000"  # stands for a space inside an item: textwrap breaks at none (a private-use code)


def wrap_items(head: str, items: list[str], sep: str = ", ", width: int = WIDTH) -> list[str]:
    """`head` then the items joined by `sep`, wrapped as `wrap` wraps a line, except that an
    item short enough for a line of its own is never broken (a kernel's name holds spaces:
    `void f<float, int>(...)` read across two lines reads as two names)."""
    # the room of a continuation line, less the mark (a comma) that follows its item there
    room = width - (len(head) - len(head.lstrip(" "))) - HANG - len(sep.rstrip())
    kept = [item.replace(" ", _KEEP) if len(item) <= room else item for item in items]
    return [line.replace(_KEEP, " ") for line in wrap([head + sep.join(kept)], width)]


def clauses(text: str) -> list[str]:
    """`text` split after each ", " or "; " outside parentheses, each clause keeping its mark:
    a sentence of figures (compare's verdict) wraps between what it says, not inside a
    figure's "(0.70x; per step ...)"."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch in ",;" and text[i + 1 : i + 2] == " ":
            out.append(text[start : i + 1])
            start = i + 2
    return [*out, text[start:]] if text[start:] else out
