"""Lines that fit a terminal: a line longer than WIDTH is wrapped at spaces, its continuation
indented under the line's own indent, so a long list (kernel names, CPU ops gone) stays
readable and nothing is cut."""

from __future__ import annotations

import textwrap

WIDTH = 160


def fit(lines: list[str], width: int = WIDTH) -> str:
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
            break_long_words=False,  # a path or a name is copied whole, never cut
        )
    return "\n".join(out)
