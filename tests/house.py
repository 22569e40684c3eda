"""The house's rules, checked over a whole checkout: what may import what, no import circle, no
file over 600 lines, no function over 80 lines without a reason written above it.

    lessons (NN_*.py at the root) -> common -> modules -> tracereader

An arrow is "may import". Tools may import common, modules and the reader; tests anything.
common/ and tools/ reach the reader through its door (`tracereader`) only; the reader imports
nothing of the project's other packages. Imports inside functions count: a circle hidden in a
function is still a circle. A function past 80 lines passes with a comment `# long: <why>`
in the comment block right above it (or above its decorators).

    uv run python -m tests.house        # the faults of this checkout, one a line
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
LONG_REASON = "# long:"
SKIP = {".venv", ".git", "traces", "__pycache__", ".gl"}
# Which of the project's packages each layer may import (lessons are files, never imported).
MAY_IMPORT = {
    "lesson": {"common", "modules", "tracereader"},
    "common": {"common", "modules", "tracereader"},
    "modules": {"modules", "tracereader"},
    "tracereader": {"tracereader"},
    "tools": {"common", "modules", "tracereader", "tools"},
    "tests": {"common", "modules", "tracereader", "tools", "tests"},
}
DOOR_ONLY = {"common", "tools"}  # these reach the reader through `tracereader` alone


@dataclass
class House:
    root: Path
    modules: dict[str, Path] = field(default_factory=dict)  # dotted name -> file
    faults: list[str] = field(default_factory=list)


def python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if not SKIP.intersection(p.relative_to(root).parts))


def dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(name: str) -> str:
    first = name.split(".")[0]
    if first in MAY_IMPORT:
        return first
    return "lesson" if first[:2].isdigit() else "other"


def imported(tree: ast.AST, modules: dict[str, Path]) -> set[tuple[str, int]]:
    """Every import in the file, module level or inside a function: (dotted name, line). For
    `from a.b import c`: a.b.c where c is a module, else a.b."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {(alias.name, node.lineno) for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                found.add((inner if inner in modules else node.module, node.lineno))
    return found


def read(root: Path) -> tuple[House, dict[str, set[str]]]:
    """The house's files and the import graph between its modules (edges to modules only)."""
    house = House(root)
    trees = {}
    for path in python_files(root):
        name = dotted(root, path)
        house.modules[name] = path
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines > MAX_FILE_LINES:
            house.faults.append(f"{path.relative_to(root)}: {lines} lines (> {MAX_FILE_LINES})")
        try:
            trees[name] = ast.parse(text)
        except SyntaxError as err:
            house.faults.append(f"{path.relative_to(root)}: does not parse ({err.msg})")
            continue
        long_functions(house, path, trees[name], text.splitlines())
    graph: dict[str, set[str]] = {name: set() for name in trees}
    for name, tree in trees.items():
        for target, line in sorted(imported(tree, house.modules)):
            if target in house.modules:
                graph[name].add(target)
                arrow(house, name, target, line)
    return house, graph


def arrow(house: House, source: str, target: str, line: int) -> None:
    """An import against the layers: upward, or into the reader past its door."""
    here, there = layer(source), layer(target)
    where = f"{house.modules[source].relative_to(house.root)}:{line}"
    if there not in MAY_IMPORT.get(here, MAY_IMPORT.keys()):
        house.faults.append(f"{where}: {here} imports {target} ({there})")
    elif here in DOOR_ONLY and there == "tracereader" and target != "tracereader":
        house.faults.append(f"{where}: {target}: {here} reaches the reader through `tracereader`")


def long_functions(house: House, path: Path, tree: ast.AST, lines: list[str]) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = node.end_lineno - start + 1
        if length > MAX_FUNCTION_LINES and not reason_above(lines, start):
            house.faults.append(
                f"{path.relative_to(house.root)}:{node.lineno}: {node.name} is {length} lines "
                f"(> {MAX_FUNCTION_LINES}) with no `{LONG_REASON} <why>` above it"
            )


def reason_above(lines: list[str], start: int) -> bool:
    """The comment block right above line `start` (1-based) holds `# long: <why>`."""
    at = start - 2
    while at >= 0 and lines[at].strip().startswith("#"):
        if lines[at].strip().startswith(LONG_REASON):
            return True
        at -= 1
    return False


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of two modules or more, or a module
    that imports itself (Tarjan's algorithm, iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return found


def faults(root: Path) -> list[str]:
    """Every fault of the checkout at `root`, one line each; none: the house is in shape."""
    house, graph = read(root)
    for circle in circles(graph):
        house.faults.append("import circle: " + " -> ".join([*circle, circle[0]]))
    return house.faults


if __name__ == "__main__":
    said = faults(Path(__file__).resolve().parent.parent)
    print("\n".join(said) or "the house is in shape")
    sys.exit(1 if said else 0)
