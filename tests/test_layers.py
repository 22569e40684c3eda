"""The reader's layers, as its package docstring draws them: imports point one way only, no
cycle, no torch, no analysis that opens a file, no file a newcomer cannot read in one sitting;
and the whole reading of a trace is built once per command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tracereader.analyses import launches, tops
from tracereader.commands import compare, explain
from tracereader.judge import findings
from tracereader.reading import Reading

PACKAGE = ROOT / "tracereader"
FIXTURES = ROOT / "tests" / "fixtures"
# Lower first: a module may import from its own layer and the ones before it.
LAYERS = (
    ("tracereader.units", "tracereader.files", "tracereader.commandline", "tracereader.caches"),
    ("tracereader.names",),
    ("tracereader.trace",),
    ("tracereader.analyses",),
    ("tracereader.judge",),
    ("tracereader.reading",),
    ("tracereader.render",),
    ("tracereader.commands",),
    ("tracereader",),  # the door
)
LONGEST = 600  # lines


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes if p != "tracereader"):
            return rank
    assert module == "tracereader", f"{module} is in no layer: add it to the docstring's map"
    return len(LAYERS) - 1


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every module imported anywhere in the file (function-level imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:  # `from pkg import mod` imports pkg.mod, not the door
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) for name, path in known.items()}


def test_imports_point_down_the_layers_only():
    upward = [
        f"{name} ({layer(name)}) imports {target} ({layer(target)})"
        for name, targets in graph().items()
        for target in targets
        if target.startswith("tracereader") and layer(target) > layer(name)
    ]
    assert upward == []


def test_the_leaves_import_nothing_of_the_reader_but_files():
    """The leaves stand alone; the caches read through files.read_regular, the one reader of
    an input that may be a FIFO or a device."""
    leaves = LAYERS[0]
    reached = {t for n in leaves for t in graph()[n] if t.startswith("tracereader")}
    assert reached <= {"tracereader.files"} and not graph()["tracereader.files"] & set(leaves)


def test_no_import_cycle():
    edges = {n: {t for t in ts if t.startswith("tracereader")} for n, ts in graph().items()}
    done, path = set(), []

    def visit(node: str) -> None:
        if node in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if target != node and not node.startswith(target + "."):  # a package's own init
                visit(target)
        path.pop()
        done.add(node)

    for name in sorted(edges):
        visit(name)


def test_no_torch_under_tracereader():
    assert [n for n, ts in graph().items() if any(t.split(".")[0] == "torch" for t in ts)] == []


def test_no_analysis_opens_a_file():
    """An analysis is a function of the trace model and its arguments: the same trace reads
    the same on every machine (the link's bandwidth is an argument, not a cache it reads)."""
    opened = []
    for path in (PACKAGE / "analyses").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("open", "read_text", "read_bytes", "load", "loads"):
                    opened.append(f"{path.name}:{node.lineno} {name}")
        if "tracereader.caches" in imports(path, modules()):
            opened.append(f"{path.name} imports the caches")
    assert opened == []


def test_every_layer_is_a_folder_and_no_file_is_longer_than_a_sitting():
    folders = [p[0] for p in LAYERS if (PACKAGE / p[0].split(".")[-1]).is_dir()]
    assert len(folders) >= 4
    lines = {p.name: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lines.items() if n > LONGEST} == {}


@pytest.mark.parametrize("flags", [[], ["--json"], ["--kernels", "--all-steps"]])
def test_explain_builds_the_reading_once(monkeypatch, capsys, flags):
    calls = counting(monkeypatch)
    path = FIXTURES / "h100" / "03_simple_mlp" / "b2_s8_d64_h128_bf16_eager.json.gz"
    assert explain.main([str(path), *flags]) == 0
    assert capsys.readouterr().out
    assert calls == {"Reading": 1, "ranked": 1, "launches": 1, "top kernels": 1}


def test_explain_reads_each_rank_of_a_run_once(monkeypatch, capsys):
    calls = counting(monkeypatch)
    run = FIXTURES / "h200x2" / "05_tp_mlp" / "b64_s128_d768_h3072_bf16_tp2_eager"
    assert explain.main([str(run), "--json"]) == 0
    assert capsys.readouterr().out
    assert calls == {"Reading": 2, "ranked": 2, "launches": 2, "top kernels": 2}


def test_compare_reads_no_summary_it_does_not_print(monkeypatch, capsys):
    calls = counting(monkeypatch)
    folder = FIXTURES / "h100" / "02_linear"
    a, b = folder / "b8_in4_out6_bf16_eager.json.gz", folder / "b8_in4_out6_bf16_compile.json.gz"
    assert compare.main([str(a), str(b)]) == 0
    assert capsys.readouterr().out
    assert calls == {"Reading": 0, "ranked": 0, "launches": 0, "top kernels": 0}


def counting(monkeypatch) -> dict[str, int]:
    calls = {"Reading": 0, "ranked": 0, "launches": 0, "top kernels": 0}

    def count(name, fn):
        def counted(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    monkeypatch.setattr(Reading, "__init__", count("Reading", Reading.__init__))
    monkeypatch.setattr(findings, "ranked", count("ranked", findings.ranked))
    monkeypatch.setattr(launches, "read", count("launches", launches.read))
    monkeypatch.setattr(tops, "kernels", count("top kernels", tops.kernels))
    return calls
