"""`explain --memory TRACE`: the memory reading of a trace recorded with profile_memory=True,
printed, and drawn into a PNG that is published whole or not at all (written under a
temporary name beside it, then renamed). A trace without memory events, a file that is not a
trace, or a PNG path that cannot be written: one line on stderr, exit code 2, no file left.

The PNG goes into the working folder (never beside the trace, which may be a repository's
fixture), or where --memory-png says. It replaces only a regular file, by rename: a path that
is the trace itself, a link, a device, a FIFO or a folder is refused before any work."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from tracereader.analyses import memory
from tracereader.commands.shared import load_or_exit, stdout_closed
from tracereader.render import memory as render
from tracereader.render.lines import wrap


def png_path(trace: str, asked: str | None) -> Path:
    """Where the PNG goes: `asked` (a folder: the default name in it), else the working
    folder, `<trace stem>.memory.png` (the stem without .json / .json.gz)."""
    name = Path(trace).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    default = f"{name}.memory.png"
    if asked is None:
        return Path.cwd() / default
    path = Path(asked)
    return path / default if path.is_dir() and not path.is_symlink() else path


def refusal(trace: str, asked: str | None, png: Path) -> str | None:
    """Why the PNG may not be written at `png`, or None: only a new file or a regular file
    that is not the trace being read is replaced (by rename, never written through)."""
    if asked == "":
        return "--memory-png is empty: name a file or a folder"
    if png.is_symlink():
        return f"--memory-png {png} is a link: name the file itself"
    if not png.exists():
        return None
    if not png.is_file():
        return f"--memory-png {png} is not a regular file (a folder, device or FIFO)"
    if png.samefile(trace):
        return f"--memory-png {png} is the trace being read"
    return None


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def write_png(reading: dict, path: Path, title: str) -> None:
    """Draw into a temporary file beside `path`, then rename it into place (atomic on one
    file system): a reader of `path` sees the old file or the whole new one, never a part.
    Raises OSError where the folder cannot be written; the temporary file is gone then."""
    from tracereader.render import memory_plot  # matplotlib: only here

    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            memory_plot.draw(reading, out, title)
        umask = os.umask(0)  # read it (it can only be read by setting it), then put it back
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp's 0600, as any new file would be
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def explain_main(args) -> int:
    png = png_path(args.trace, args.memory_png)
    refused = refusal(args.trace, args.memory_png, png)
    if refused:
        return _fail(refused)
    trace = load_or_exit(args.trace, memory=True)
    reading = memory.read(trace)
    if not reading["devices"] and reading["malformed"]:
        return _fail(f"{args.trace} has no usable memory events: {render.malformed(reading)}")
    if not reading["devices"]:
        return _fail(
            f"{args.trace} has no memory events (record it with "
            f"torch.profiler.profile(profile_memory=True))"
        )
    try:
        write_png(reading, png, f"{Path(args.trace).name}: allocated memory")
    except OSError as err:
        return _fail(f"cannot write {png}: {err.strerror or err}")
    try:
        if args.json:
            from tracereader.reading import Reading
            from tracereader.render import trace as trace_render

            data = render.as_dict(reading, str(png))
            trace_render.write_json(Reading(trace), sys.stdout, memory=data)
        else:
            from tracereader.analyses import growth
            from tracereader.judge.cause_text import growth_finding

            grown = growth.read(trace)  # memory that grows every step: said first
            first = growth_finding(grown) if grown else None
            if first is not None:
                print("\n".join(wrap([f"first: {first.message} -> try: {first.next}"])))
            print(render.text(reading, args.trace, str(png)))
    except BrokenPipeError:
        return stdout_closed()
    return 0
