"""tools/dev/reader_validation/record_model_traces.py at its tiny configs on the CPU: the traces the
lead records on a GPU in one command, recorded here the same way. Skipped where transformers or timm
is not importable (they are not the project's dependencies; run with
`uv run --with 'transformers>=5' --with timm pytest tests/test_record_model_traces.py`)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools/dev/reader_validation/record_model_traces.py"


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *argv], capture_output=True, text=True)


@pytest.mark.slow
def test_full_size_on_a_cpu_is_refused_in_one_line(tmp_path):
    proc = run("--device", "cpu", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--tiny" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_an_unknown_recording_is_refused_in_one_line(tmp_path):
    proc = run("--tiny", "--device", "cpu", "--only", "gpt", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "gpt" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tiny_training_steps_are_recorded_with_their_provenance(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("timm")
    proc = run(
        "--tiny", "--device", "cpu", "--only", "llama_train,timm_train", "--out", str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    provenance = json.loads((tmp_path / "provenance.json").read_text())
    assert [t["recording"] for t in provenance["traces"]] == ["llama_train", "timm_train"]
    assert provenance["versions"]["transformers"] and provenance["versions"]["timm"]
    assert not provenance["failed"]
    for record in provenance["traces"]:
        path = tmp_path / record["file"]
        assert path.stat().st_size == record["bytes"]
        with gzip.open(path, "rt") as f:
            events = json.load(f)["traceEvents"]
        names = [e.get("name", "") for e in events if e.get("ph") == "X"]
        assert sum(n.startswith("ProfilerStep#") for n in names) == 2  # active=2
        assert sum(n.startswith("Optimizer.step#AdamW.step") for n in names) == 2
        assert any("Input Dims" in e.get("args", {}) for e in events)  # record_shapes
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.slow
def test_with_modules_the_traces_carry_the_models_modules_and_no_other_python_frame(tmp_path):
    pytest.importorskip("transformers")
    from tracereader.analyses import modules
    from tracereader.trace import load

    proc = run("--tiny", "--device", "cpu", "--with-modules", "--only", "llama_train",
               "--out", str(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = json.loads((tmp_path / "provenance.json").read_text())["traces"]
    assert record["file"].endswith("_modules_cpu.json.gz") and record["with_stack"]
    with gzip.open(tmp_path / record["file"], "rt") as f:
        events = json.load(f)["traceEvents"]
    python = {e["name"] for e in events if e.get("cat") == "python_function"}
    assert python and all(name.startswith("nn.Module: ") for name in python)
    read = modules.read(load.load(tmp_path / record["file"]))
    assert read["wrappers"] == ["LlamaForCausalLM_0"]
    layers = [n for n in read["tree"] if n["name"].startswith("LlamaDecoderLayer_")]
    assert len(layers) == 2 and all(n["path"].startswith("LlamaForCausalLM_0/") for n in layers)
