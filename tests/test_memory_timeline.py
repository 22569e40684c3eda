"""`explain --memory`: allocated memory from a trace recorded with profile_memory=True.

On the committed H200 recording (a wrapped Llama training step, bf16 autocast, AdamW) the
peak must be the allocator's own largest `Total Allocated` on cuda:0 over the whole trace,
the ops alive then must add up to it with what was allocated before the trace, and the
forward's activations must be among them; on a hand-written trace, every number is known.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracereader.analyses import memory
from tracereader.commands import explain
from tracereader.commands import memory as memory_command
from tracereader.trace.load import load

FIXTURES = Path(__file__).parent / "fixtures/h200/models"
TRACE = FIXTURES / "llama_train_wrapped_l8_h2048_b4_s1024_bf16_memory.json.gz"
NO_MEMORY = FIXTURES / "llama_train_wrapped_l8_h2048_b4_s1024_bf16.json.gz"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reading() -> dict:
    return memory.read(load(TRACE, memory=True))


def _cuda0(reading: dict) -> dict:
    return next(d for d in reading["devices"] if d["device"] == "cuda:0")


def test_peak_is_the_allocators_largest_total_over_the_whole_trace(reading):
    with gzip.open(TRACE, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("name") == "[memory]"]
    on_gpu = [e["args"] for e in events if e["args"]["Device Type"] == 1]
    assert all(a["Device Id"] == 0 for a in on_gpu)
    peak = _cuda0(reading)["peak"]
    assert peak["bytes"] == max(a["Total Allocated"] for a in on_gpu)
    # in the recorded steps here, in the backward, ~16 ms into the ~54 ms step
    assert peak["step"] == "ProfilerStep#2" and peak["phase"] == "backward"
    assert 0 < peak["from_step_start_us"] < 54_170
    assert [d["device"] for d in reading["devices"]] == ["cuda:0", "cpu"]  # the CPU's apart


def test_alive_at_the_peak_adds_up_and_holds_the_forwards_activations(reading):
    d = _cuda0(reading)
    rows = {r["op"]: r for r in d["at_peak"]}
    # Nothing allocated before the trace is freed inside it here: all of it is alive.
    assert rows[memory.BEFORE]["bytes"] == d["before_bytes"] > 0
    events = sum(r["bytes"] for r in d["at_peak"] if r["op"] != memory.BEFORE)
    assert events == d["peak"]["bytes"] - d["before_bytes"]
    assert rows.keys() & {"aten::mm", "aten::linear", "aten::addmm"}
    assert rows["aten::mm"]["bytes"] > 0 and rows["aten::silu"]["bytes"] > 0
    sizes = [r["bytes"] for r in d["at_peak"]]
    assert sizes == sorted(sizes, reverse=True)
    # allocation helpers are named after the op that called them
    assert not rows.keys() & {"aten::empty", "aten::empty_strided"}


def test_each_step_has_its_peak_and_the_phases_to_draw(reading):
    d = _cuda0(reading)
    assert [p["step"] for p in d["step_peaks"]] == ["ProfilerStep#2", "ProfilerStep#3"]
    assert max(p["peak_bytes"] for p in d["step_peaks"]) == d["peak"]["bytes"]
    phases = [p for p, _, _ in reading["steps"][0]["phases"]]
    assert phases == ["forward", "backward", "optimizer"]


def test_the_default_load_keeps_no_memory_events():
    assert load(TRACE).memory is None


def test_command_prints_the_peak_and_writes_the_png(tmp_path, capsys):
    png = tmp_path / "plot.png"
    assert explain.main([str(TRACE), "--memory", "--memory-png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "peak allocated 12.06 GiB" in out and "in ProfilerStep#2, backward" in out
    assert memory.BEFORE in out and "aten::mm" in out and f"plot: {png}" in out
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]  # no temporary file left


def test_png_goes_to_the_working_folder_and_json_carries_the_reading(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the trace stays where it is (a fixture): nothing lands there
    trace = TRACE
    assert explain.main([str(trace), "--memory", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    png = tmp_path / "llama_train_wrapped_l8_h2048_b4_s1024_bf16_memory.memory.png"
    assert png.read_bytes().startswith(PNG_MAGIC)
    mem = data["traces"][0]["memory"]
    assert mem["png"] == str(png)
    assert mem["devices"][0]["peak"]["bytes"] == 12944361472
    assert "timeline" not in mem["devices"][0]
    assert data["traces"][0]["summary"] is not None  # the whole reading, memory added
    # a folder: the default name inside it
    assert memory_command.png_path(str(trace), str(tmp_path)) == png


def test_a_trace_without_memory_events_is_one_line_and_exit_2(tmp_path, capsys):
    trace = tmp_path / NO_MEMORY.name
    shutil.copy(NO_MEMORY, trace)
    assert explain.main([str(trace), "--memory"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "no memory events" in captured.err
    assert [p.name for p in tmp_path.iterdir()] == [trace.name]  # no PNG


def test_a_file_that_is_not_a_trace_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"not": "a trace"}')
    with pytest.raises(SystemExit) as exit_:
        explain.main([str(bad), "--memory"])
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


@pytest.mark.parametrize("where", ["missing/plot.png", "a_file/plot.png"])
def test_an_unwritable_png_path_is_one_line_and_exit_2(where, tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    assert explain.main([str(TRACE), "--memory", "--memory-png", str(tmp_path / where)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "cannot write" in captured.err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a_file"]


def test_a_plot_that_fails_midway_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    from tracereader.render import memory_plot

    def half(reading, out, title):
        out.write(PNG_MAGIC)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(memory_plot, "draw", half)
    png = tmp_path / "plot.png"
    png.write_bytes(b"the previous plot")
    assert explain.main([str(TRACE), "--memory", "--memory-png", str(png)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert png.read_bytes() == b"the previous plot"  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_memory_png_without_memory_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        explain.main([str(TRACE), "--memory-png", "x.png"])
    assert exit_.value.code == 2


# --- a hand-written trace: every number known --------------------------------------------

GPU, CPU = (1, 0), (0, -1)


def _op(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _mem(ts: float, addr: int, size: int, total: int, device=GPU) -> dict:
    args = {"Addr": addr, "Bytes": size, "Total Allocated": total, "Total Reserved": 2048,
            "Device Type": device[0], "Device Id": device[1]}  # fmt: skip
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1,
            "tid": 1, "ts": ts, "args": args}  # fmt: skip


def _tiny(path: Path) -> Path:
    """1000 bytes allocated before the trace, 200 of them freed at ts 5 (an address the trace
    never saw allocated); aten::mm allocates 60 + 40, aten::add 50 (the peak: 950 at ts 32),
    then mm's are freed and aten::_to_copy allocates 30 through aten::empty_strided."""
    events = [
        _op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        _op("aten::mm", 10, 10),
        _op("aten::add", 30, 5),
        _op("aten::_to_copy", 50, 10),
        _op("aten::empty_strided", 51, 2),
        # in file order out of time order: the loader sorts them
        _mem(32, 0xB, 50, 950),
        _mem(5, 0xF, -200, 800),
        _mem(12, 0xA, 60, 860),
        _mem(13, 0xA2, 40, 900),
        _mem(20, 0xC0, 8, 8, device=CPU),
        _mem(40, 0xA, -60, 890),
        _mem(41, 0xA2, -40, 850),
        _mem(52, 0xC, 30, 880),
        _mem(70, 0xB, -50, 830),
        {**_mem(71, 0xD, 1, 831), "args": {"Bytes": "one"}},  # malformed: skipped, counted
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_tiny_trace_has_its_exact_peak_and_owners(tmp_path):
    trace = load(_tiny(tmp_path / "tiny.json"), memory=True)
    assert trace.skipped == {"[memory] events without numeric args": 1}
    result = memory.read(trace)
    gpu, cpu = result["devices"]
    assert (gpu["device"], cpu["device"]) == ("cuda:0", "cpu")
    assert gpu["before_bytes"] == 1000
    assert (gpu["events"], gpu["allocations"], gpu["frees"]) == (8, 4, 4)
    assert gpu["peak"] == {
        "bytes": 950,
        "reserved_bytes": 2048,
        "ts": 32.0,
        "step": "ProfilerStep#1",
        "step_index": 0,
        "from_step_start_us": 32.0,
        "phase": None,  # no phase op in this step
    }
    assert gpu["at_peak"] == [
        {"op": memory.BEFORE, "bytes": 800, "allocations": None},
        {"op": "aten::mm", "bytes": 100, "allocations": 2},
        {"op": "aten::add", "bytes": 50, "allocations": 1},
    ]
    assert gpu["timeline"][1] == [800, 860, 900, 950, 890, 850, 880, 830]
    assert cpu["peak"]["bytes"] == 8 and cpu["at_peak"] == [
        {"op": "aten::mm", "bytes": 8, "allocations": 1}
    ]
    c = trace.memory.ts.tolist().index(52.0)
    assert memory.op_name(trace.memory.op[c]) == "aten::_to_copy"  # past the helper


def test_a_tiny_trace_through_the_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _tiny(tmp_path / "tiny.json")
    assert explain.main([str(path), "--memory"]) == 0
    out = capsys.readouterr().out
    assert "peak allocated 950 B (reserved then 2.00 KiB) in ProfilerStep#1" in out
    assert (tmp_path / "tiny.memory.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.slow
def test_explain_starts_without_matplotlib():
    code = (
        "import sys, tracereader.commands.explain, tracereader.trace.load; "
        "print('matplotlib' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
