"""How much of each lesson is plumbing, by one fixed definition; tests hold every lesson at or
under 25% (docs/plumbing.md, written by this tool: each lesson's share).

Measured on the lesson as the project's ruff formats it (`ruff format -`, pyproject.toml's
settings), its `# fmt: skip` and `# fmt: off`/`on` markers removed first: a statement squeezed
onto one line by hand counts the lines ruff gives it.

Counted: the lesson's code lines (not blank) after its docstring, less the imports and the
closing `if __name__ == "__main__":` (every script has both: neither lesson nor plumbing). A
guarded import (`try: from kernels import ... except ImportError: ...`) is an import; its
except clause counts, as a refusal.
A comment counts with the statement below it.

Plumbing, by the Python syntax tree (the rest is the lesson: the module, its reference, EXPECT,
the traffic model, building the module and its inputs, the warm-up, the correctness check, the
profiler loop, the reading of its trace):
  parsing    a function that builds or runs the argument parser (add_argument, make_parser,
             parse_args);
  refusals   a raise; an if whose body ends in a raise (the test and its message); a try's
             except clauses;
  helpers    a top-level function or class that uses none of torch, Triton, the kernels
             library, the lesson's guess (Expect, traffic) or a definition that does: text,
             tags, tables, bookkeeping;
  knobs      a top-level statement that is neither a definition nor an assignment
             (environment or interpreter settings, warning filters);
  set-up     a statement whose call sets the run up or winds it down (SET_UP: parsing the
             flags, picking the device, the memory estimate, naming and publishing the
             files, printing the table, the exit code), and the header of a `with` that
             publishes.

    uv run python -m tools.dev.plumbing_share            (every lesson)
    uv run python -m tools.dev.plumbing_share 03_fused_mlp.py --lines   (which lines, and why)
    uv run python -m tools.dev.plumbing_share --write docs/plumbing.md  (the page)
"""

from __future__ import annotations

import argparse
import ast
import datetime
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tracereader import Parser, run

# the repository: the folder above this file that holds pyproject.toml (wherever tools/ puts it)
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
LIMIT = 0.25  # the share no lesson may exceed (tests/test_plumbing_share.py)
MODULE = __spec__.name if __spec__ else __name__  # tools.dev.plumbing_share, run or imported
# ruff's suppression comments: a trailing `# fmt: skip`, a `# fmt: off` / `# fmt: on` line
FMT_SKIP = re.compile(r"[ \t]*#[ \t]*fmt:[ \t]*skip[ \t]*$")
FMT_OFF_ON = re.compile(r"^[ \t]*#[ \t]*fmt:[ \t]*(off|on)[ \t]*$")
PARSING = {"add_argument", "make_parser", "parse_args"}
GUESS = {"Expect", "traffic"}  # names that make a definition part of the lesson's guess
# The calls that set a run up and wind it down, from common/ (and the lesson's own parse):
# what every lesson does alike around its module and its profiler loop.
SET_UP = {
    "parse",
    "resolve",
    "require_gpu",
    "refuse_compile",
    "ensure_fits",
    "bytes_needed",  # the memory estimate, where a lesson computes it apart from ensure_fits
    "attention_bytes_needed",
    "run_tag",  # naming the files, where the name is computed apart from prepare
    "prepare",
    "init_process_group",
    "launched",
    "reset_peak_memory",
    "publishing",
    "show",
    "rank_files",
    "finish",
}
# A definition that uses names imported from these is the lesson's: PyTorch, Triton, and the
# kernels Hub's library (03_kernels and 04_d teach its get_kernel).
LIBRARIES = ("torch", "triton", "kernels")


@dataclass
class Share:
    lesson: str
    counted: int = 0
    plumbing: dict[int, str] = field(default_factory=dict)  # line -> which kind
    lines: list[str] = field(default_factory=list)  # the measured (formatted) text

    @property
    def share(self) -> float:
        return len(self.plumbing) / self.counted if self.counted else 0.0


def lessons() -> list[Path]:
    """The numbered lessons."""
    return sorted(ROOT.glob("0[0-9]_*.py"))


def formatted(source: str, name: str = "lesson.py") -> str:
    """The source as the project's ruff formats it, its fmt: skip/off/on markers removed
    first (so they format nothing)."""
    kept = [FMT_SKIP.sub("", line) for line in source.splitlines() if not FMT_OFF_ON.match(line)]
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", name, "-"],
        input="\n".join(kept) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,  # pyproject.toml's [tool.ruff]: its line length
    )
    if done.returncode:
        raise ValueError(f"{name}: ruff format failed: {done.stderr.strip()}")
    return done.stdout


def measure(path: Path) -> Share:
    """The lesson's share, measured on its ruff-formatted text."""
    return measure_source(formatted(path.read_text(), path.name), path.name)


def measure_source(source: str, name: str) -> Share:
    """The share of this text as it stands (measure formats it first)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    library_names = _imported_from(tree, LIBRARIES)
    counted: set[int] = set()
    result = Share(name, lines=lines)

    def mark(node: ast.AST, kind: str) -> None:
        for n in _span(node, lines):
            if n in counted:
                result.plumbing.setdefault(n, kind)

    for node in body:
        if _is_import(node) or _is_main_guard(node):
            if _is_guarded_import(node):
                for handler in node.handlers:
                    counted.update(_span(handler, lines))
            continue
        counted.update(_span(node, lines))
    result.counted = len(counted)

    # The lesson's definitions: those that use the libraries or the guess, then (until nothing
    # changes) those that use the lesson's definitions.
    definitions = {n.name: n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    uses = {name: _names(node) for name, node in definitions.items()}
    lesson = {name for name in definitions if uses[name] & (library_names | GUESS)}
    while grown := {n for n in definitions if n not in lesson and uses[n] & lesson}:
        lesson |= grown

    for node in body:
        if _is_guarded_import(node):
            for handler in node.handlers:
                mark(handler, "refusals")
        if _is_import(node) or _is_main_guard(node):
            continue
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            if _calls(node) & PARSING:
                mark(node, "parsing")
            elif node.name not in lesson:
                mark(node, "helpers")
        elif not isinstance(node, ast.Assign | ast.AnnAssign):
            mark(node, "knobs")
        for inner in ast.walk(node):
            if _sets_up(inner):
                mark(inner, "set-up")
            elif isinstance(inner, ast.With) and any(
                _call_name(item.context_expr) in SET_UP for item in inner.items
            ):
                for n in range(inner.lineno, inner.body[0].lineno):  # its header, not its body
                    if n in counted:
                        result.plumbing.setdefault(n, "set-up")
            if isinstance(inner, ast.Raise):
                mark(inner, "refusals")
            elif isinstance(inner, ast.If) and isinstance(inner.body[-1], ast.Raise):
                mark(inner, "refusals")
            elif isinstance(inner, ast.ExceptHandler):
                mark(inner, "refusals")
    return result


def _call_name(node: ast.AST | None) -> str:
    if not isinstance(node, ast.Call):
        return ""
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _sets_up(node: ast.AST) -> bool:
    """A statement whose own call (`x = call(...)`, `call(...)`, `return call(...)`) is one of
    SET_UP."""
    if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign | ast.Return):
        return _call_name(node.value) in SET_UP
    return False


def _span(node: ast.AST, lines: list[str]) -> set[int]:
    """The node's non-blank lines, with the comment lines right above it."""
    first = node.lineno
    while first > 1 and lines[first - 2].strip().startswith("#"):
        first -= 1
    return {n for n in range(first, node.end_lineno + 1) if lines[n - 1].strip()}


def _is_guarded_import(node: ast.stmt) -> bool:
    """`try:` holding imports only: an optional dependency, imported where it is installed."""
    return (
        isinstance(node, ast.Try)
        and not node.orelse
        and not node.finalbody  # else a try with more in it: counted as code
        and all(isinstance(inner, ast.Import | ast.ImportFrom) for inner in node.body)
    )


def _is_import(node: ast.stmt) -> bool:
    return isinstance(node, ast.Import | ast.ImportFrom) or _is_guarded_import(node)


def _imported_from(tree: ast.Module, packages: tuple[str, ...]) -> set[str]:
    names = set()
    statements = [
        inner for node in tree.body for inner in (node.body if _is_guarded_import(node) else [node])
    ]
    for node in statements:
        if isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.split(".")[0] in packages
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in packages:
            names |= {a.asname or a.name for a in node.names}
    return names


def _names(node: ast.AST) -> set[str]:
    """The names and attributes a definition uses."""
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }


def _calls(node: ast.AST) -> set[str]:
    return {
        c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
        for c in ast.walk(node)
        if isinstance(c, ast.Call)
    }


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


KINDS = ("parsing", "refusals", "helpers", "knobs", "set-up")


def page(shares: list[Share], date: str) -> str:
    """docs/plumbing.md: every lesson's share, how it was counted, when and by which command."""
    command = f"uv run python -m {MODULE} --write docs/plumbing.md"
    head = (
        "# How much of each lesson is plumbing\n\n"
        f"Written on {date} by `{command}`;\nrun it again rather than edit this page "
        "(`tests/test_plumbing_share.py` fails when it is stale).\n\n"
        "Each lesson is measured as the project's ruff formats it, its `# fmt: skip` markers "
        "removed\nfirst (lines: the file so formatted). Counted: its code lines after the "
        "docstring, without its\nimports and its `__main__` guard. Plumbing: parsing, "
        "refusals, helpers that use neither torch\nnor the lesson's guess, interpreter knobs, "
        "and the calls that set the run up and wind it down\n(the device, the memory estimate, "
        "naming and publishing the files, printing the table, the\nexit code). The definition "
        f"is `{MODULE.replace('.', '/')}.py`'s docstring;\n`--lines` shows which lines and "
        f"why. The tests hold every lesson at or under {LIMIT:.0%}.\n\n"
    )
    rows = [
        "| lesson | lines | code lines | plumbing lines | share | " + " | ".join(KINDS) + " |",
        "| --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in KINDS) + " |",
    ]
    for s in shares:
        kinds = [sum(1 for k in s.plumbing.values() if k == kind) for kind in KINDS]
        rows.append(
            f"| `{s.lesson}` | {len(s.lines)} | {s.counted} | {len(s.plumbing)} | "
            f"{s.share:.1%} | " + " | ".join(map(str, kinds)) + " |"
        )
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("lessons", nargs="*", help="lesson files (default: every lesson)")
    parser.add_argument("--lines", action="store_true", help="print each plumbing line")
    parser.add_argument(
        "--write", type=Path, metavar="PAGE", help="write the table as a page (docs/plumbing.md)"
    )
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.lessons] or lessons()
    for path in paths:
        if not path.is_file():
            print(f"error: {path}: no such lesson", file=sys.stderr)
            return 2
    print(f"{'lesson':<32} {'code lines':>10} {'plumbing':>9} {'share':>6}")
    over, shares = [], []
    for path in paths:
        share = measure(path)
        shares.append(share)
        flag = "" if share.share <= LIMIT else f"  over {LIMIT:.0%}"
        print(
            f"{share.lesson:<32} {share.counted:>10} {len(share.plumbing):>9} "
            f"{share.share:>6.1%}{flag}"
        )
        if flag:
            over.append(share.lesson)
        if args.lines:  # numbered as in the formatted text
            for n, kind in sorted(share.plumbing.items()):
                print(f"    {n:4} {kind:<9} {share.lines[n - 1]}")
    if args.write:
        args.write.write_text(page(shares, datetime.date.today().isoformat()))
        print(f"wrote {args.write}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(run(main))  # the one runner: one line for bad input, Ctrl-C, a closed stdout
