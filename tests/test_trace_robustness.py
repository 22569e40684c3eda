"""The trace reader on damaged, hostile and large input: one line and exit code 2 for a file
it cannot use, skipped-and-counted for single malformed events, strict JSON out, and the same
reading whether the text arrives whole or in tiny chunks."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

import pytest

from tracereader.commands import compare, explain
from tracereader.judge import findings
from tracereader.reading import Reading
from tracereader.render import trace as render
from tracereader.trace import load as trace_reader
from tracereader.trace.model import UNNAMED_GPU, WINDOW

H200 = Path(__file__).parent / "fixtures" / "h200"
LINEAR = H200 / "02_linear" / "b8_in4_out6_bf16_eager.json.gz"
MLP = H200 / "03_simple_mlp" / "b64_s128_d768_h3072_bf16_eager.json.gz"
ROOT = Path(__file__).resolve().parent.parent


def events_of(source: Path) -> dict:
    return json.loads(gzip.decompress(source.read_bytes()))


def write(tmp_path: Path, data, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def changed(tmp_path: Path, change, source: Path = LINEAR) -> Path:
    data = copy.deepcopy(events_of(source))
    change(data["traceEvents"])
    return write(tmp_path, data)


def first(events: list[dict], cat: str) -> dict:
    return min((e for e in events if e.get("cat") == cat), key=lambda e: e["ts"])


def refused(path: Path, capsys) -> str:
    """Both commands: exit code 2 and exactly one line on stderr; returns that line."""
    lines = []
    for command in (
        lambda: explain.main([str(path)]),
        lambda: explain.main([str(path), "--json"]),
        lambda: compare.main([str(path), str(path)]),
    ):
        with pytest.raises(SystemExit) as exit_:
            command()
        assert exit_.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("error: ") and len(captured.err.splitlines()) == 1
        lines.append(captured.err)
    return lines[0]


def strict_json(text: str):
    """json.loads, refusing NaN and Infinity (which Python writes and JSON forbids)."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# --- files the reader cannot use: one line, exit 2 ------------------------------------------


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    assert "too deeply" in refused(write(tmp_path, f'{{"traceEvents": [{deep}]}}'), capsys)
    inside_an_event = f'{{"traceEvents": [{{"ph": "X", "args": {deep}}}]}}'
    assert "too deeply" in refused(write(tmp_path, inside_an_event), capsys)


def test_dev_zero_and_folders_are_refused_at_once(tmp_path, capsys):
    assert "not a regular file" in refused(Path("/dev/zero"), capsys)
    assert "is a folder without rank traces" in refused(tmp_path, capsys)


def test_a_trace_without_profiler_step_is_read_as_one_window(tmp_path, capsys):
    """A trace profiled without a schedule: the recorded window is the unit, and both the
    text and the JSON say so (issue 15: such traces were refused)."""
    path = changed(
        tmp_path,
        lambda ev: ev.__setitem__(
            slice(None), [e for e in ev if not str(e.get("name")).startswith("ProfilerStep")]
        ),
    )
    trace = trace_reader.load(path)
    (window,) = trace.steps
    assert trace.unit == "window" and window.name == WINDOW
    assert len(window.gpu) == 3 and {i.launched_by for i in window.gpu} == {"aten::addmm"}
    assert not [f for f in findings.read(trace) if f.problem]
    assert explain.main([str(path)]) == 0
    assert "no ProfilerStep: the recorded window is one unit" in capsys.readouterr().out
    assert explain.main([str(path), "--json"]) == 0
    assert strict_json(capsys.readouterr().out)["traces"][0]["unit"] == "window"
    assert compare.main([str(path), str(LINEAR)]) == 0


def test_a_trace_with_no_event_the_reader_uses_is_refused(tmp_path, capsys):
    assert "holds no event" in refused(write(tmp_path, {"traceEvents": []}), capsys)


@pytest.mark.parametrize(
    "content",
    [
        b'{"traceEvents": [1, 2, 3]}',
        b'{"traceEvents": {"ph": "X"}}',
        b'"just a string"',
        b'{"traceEvents": []} trailing',
        b'{"traceEvents": [], }',
        b"NaN",
        b"\xef\xbb\xbf",  # a UTF-8 byte order mark and nothing else
    ],
)
def test_json_that_is_no_trace_is_refused(content, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    refused(path, capsys)


# --- single malformed events: skipped, counted, the rest read -------------------------------


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda ev: first(ev, "kernel").update(ts="4460335614690.655"), "ts"),
        (lambda ev: first(ev, "cpu_op").update(args=["Input Dims", [8, 4]]), "args"),
        (lambda ev: first(ev, "cpu_op").update(name=12), "name"),
        (lambda ev: first(ev, "kernel").pop("name"), "no name"),
        (lambda ev: first(ev, "kernel").update(dur=float("nan")), "dur"),
        (lambda ev: first(ev, "cuda_driver").update(dur=float("inf")), "dur"),
        (lambda ev: first(ev, "cpu_op").update(ts=-float("inf")), "ts"),
        (lambda ev: first(ev, "cpu_op").update(dur=-5), "dur"),
        (lambda ev: first(ev, "cpu_op").update(tid=[1]), "tid"),
        (lambda ev: ev.append(["not", "an", "event"]), "not an object"),
    ],
    ids=[
        "ts-string",
        "args-list",
        "name-int",
        "kernel-without-name",
        "dur-nan",
        "dur-infinity",
        "ts-minus-infinity",
        "dur-negative",
        "tid-list",
        "array-entry",
    ],
)
def test_a_malformed_event_is_skipped_and_counted(change, reason, tmp_path, capsys):
    path = changed(tmp_path, change)
    trace = trace_reader.load(path)
    assert sum(trace.skipped.values()) == 1
    assert reason in next(iter(trace.skipped))
    assert len(trace.steps) == 3
    assert explain.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "PROBLEM: [health] 1 malformed event skipped" in out
    assert "nan" not in out.replace(str(path), "") and "inf " not in out
    assert explain.main([str(path), "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    found = data["traces"][0]["findings"][0]
    assert found["problem"] and "malformed" in found["message"]
    assert compare.main([str(path), str(LINEAR), "--json"]) == 0
    strict_json(capsys.readouterr().out)


def test_json_output_is_strict_even_for_non_finite_input(tmp_path, capsys):
    def poison(ev):
        for e in ev:
            if e.get("cat") in ("kernel", "cpu_op") and e.get("ph") == "X":
                e["dur"] = float("nan") if e["cat"] == "kernel" else float("inf")

    path = changed(tmp_path, poison)
    assert "NaN" in path.read_text() and "Infinity" in path.read_text()
    assert explain.main([str(path), "--json"]) == 0
    data = strict_json(capsys.readouterr().out)
    for step in data["traces"][0]["steps"]:  # what is left: the annotation around each forward
        assert not step["gpu"] and [o["name"] for o in step["cpu_ops"]] == ["linear_fwd"]
    with pytest.raises(ValueError):
        render.dump_json({"x": float("nan")}, sys.stdout)  # refuses rather than writes NaN


def test_json_is_written_step_by_step_exactly_as_json_dumps_would(capsys):
    for path in (MLP, H200 / "01_matmul_add" / "64_bf16_warm_compile.json.gz"):
        trace = trace_reader.load(path)
        assert explain.main([str(path), "--json"]) == 0
        assert (
            capsys.readouterr().out
            == json.dumps(render.document([render.trace_dict(Reading(trace))]), indent=2) + "\n"
        )


def test_names_that_cannot_be_printed_are_mended(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::\udcff", "ts": 1, "dur": 1},
    ]
    trace = trace_reader.load(write(tmp_path, {"traceEvents": events}))
    (op,) = trace.steps[0].cpu_ops
    op.name.encode("utf-8")  # a lone surrogate would make print() fail on a UTF-8 stdout


# --- linking: only real correlation ids -----------------------------------------------------


def test_events_without_a_correlation_id_link_to_nothing(tmp_path):
    """A runtime call and a kernel that both lack an id used to meet under the key None: the
    last step's GEMM was filed under the first step's cudaDeviceGetAttribute."""

    def drop_ids(ev):
        runtime = sorted((e for e in ev if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"])
        del runtime[0]["args"]["correlation"]  # the first step's cudaDeviceGetAttribute
        kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        del kernels[-1]["args"]["correlation"]  # the last step's GEMM

    trace = trace_reader.load(changed(tmp_path, drop_ids))
    assert [len(s.gpu) for s in trace.steps] == [1, 1, 0]
    assert all(i.runtime == "cuLaunchKernel" for s in trace.steps for i in s.gpu)
    assert not trace.skipped  # a missing id is not damage, only an unlinked event


# --- what is kept, and how ------------------------------------------------------------------


def test_bare_array_form_and_gzip_read_alike(tmp_path):
    data = events_of(MLP)
    bare = write(tmp_path, data["traceEvents"], "bare.json")
    gz = tmp_path / "whole.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(data).encode()))
    a, b = trace_reader.load(bare), trace_reader.load(gz)
    # No metadata in the bare form: a GPU trace all the same, its GPU's name unknown.
    assert (a.device, a.device_source) == (UNNAMED_GPU, "GPU events")
    assert (b.device, b.device_source) == ("NVIDIA H200", "deviceProperties")
    assert [s.op_names() for s in a.steps] == [s.op_names() for s in b.steps]
    assert [[i.name for i in s.gpu] for s in a.steps] == [[i.name for i in s.gpu] for s in b.steps]


def test_metadata_and_args_are_kept_compactly(tmp_path):
    data = events_of(H200 / "01_matmul_add" / "4096_bf16_warm_compile.json.gz")
    data["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 2}
    trace = trace_reader.load(write(tmp_path, data))
    assert trace.meta["distributedInfo"]["world_size"] == 2
    assert trace.meta["deviceProperties"][0]["numSms"] == 132
    step = trace.steps[0]
    memcpy, memset, gemm = step.gpu
    assert memcpy.args["bytes"] == 4096 * 4096 * 2 and memset.args["bytes"] == 4
    assert gemm.args["grid"] and gemm.args["block"] and "registers per thread" in gemm.args
    assert {"device", "stream", "shared memory", "warps per SM"} <= set(gemm.args)
    addmm = next(op for op in step.cpu_ops if op.name == "aten::addmm")
    assert addmm.args["Input Dims"][:4] == ((4096, 4096), (4096, 4096), (4096, 4096), ())
    assert set(addmm.args) == {"Input Dims", "Input type"}  # strides, values: dropped
    later = next(op for op in trace.steps[-1].cpu_ops if op.name == "aten::addmm")
    assert later.args is addmm.args  # interned: the same shapes repeat every step
    assert memcpy.launcher is addmm and addmm.parent.name.startswith("## Call CompiledFxGraph")


def test_reading_in_tiny_chunks_gives_the_same_trace(monkeypatch):
    def reading(trace):
        return [
            (s.name, [(o.name, o.depth, o.ts) for o in s.cpu_ops], [i.launched_by for i in s.gpu])
            for s in trace.steps
        ]

    whole = reading(trace_reader.load(MLP))
    for size in (1, 3, 50):
        monkeypatch.setattr(trace_reader, "_CHUNK", size)  # events and numbers cut anywhere
        assert reading(trace_reader.load(MLP)) == whole


@pytest.mark.parametrize("batch", [40, 200, 1 << 14])
def test_names_that_look_like_event_boundaries_are_read_whole(batch, monkeypatch, tmp_path):
    # Events are decoded in batches cut at "}, {": a name holding that text must not cut one.
    data = events_of(MLP)
    ops = [e for e in data["traceEvents"] if e.get("cat") == "cpu_op"]
    for n, op in enumerate(ops[::3]):
        op["name"] = f'aten::odd_{n}}}, {{"ph": "X"}}, {{'
    path = write(tmp_path, data)
    monkeypatch.setattr(trace_reader, "_BATCH", batch)
    trace = trace_reader.load(path)
    read = sorted((o.name, o.ts) for s in trace.steps for o in s.cpu_ops)
    assert sum(name.startswith("aten::odd_") for name, _ in read) > 10
    monkeypatch.setattr(trace_reader, "_BATCH", 0)  # one event at a time: the reference
    assert read == sorted((o.name, o.ts) for s in trace_reader.load(path).steps for o in s.cpu_ops)


# --- large traces: the generator of tools/dev/reader_validation/trace_bench.py --------------------


def bench_tool():
    from tools.dev.reader_validation import trace_bench

    return trace_bench


@pytest.mark.parametrize("name", ["synthetic.json", "synthetic.json.gz"])
def test_the_generator_makes_a_trace_the_reader_reads(name, tmp_path):
    path = tmp_path / name
    steps = bench_tool().generate(path, 0.3)
    assert steps > 10
    trace = trace_reader.load(path)
    assert len(trace.steps) == steps and not trace.skipped
    assert [s.name for s in trace.steps[:2]] == ["ProfilerStep#0", "ProfilerStep#1"]
    real = trace_reader.load(MLP).steps[-1]
    for step in (trace.steps[0], trace.steps[-1]):
        assert step.op_names() == real.op_names()
        assert [(i.name, i.launched_by) for i in step.gpu] == [
            (i.name, i.launched_by) for i in real.gpu
        ]


def test_a_huge_step_is_capped_in_text_and_complete_in_json(tmp_path, capsys):
    ops = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "ts": 1 + i, "dur": 0.5}
        for i in range(450)
    ]
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 500}
    path = write(tmp_path, {"traceEvents": [step, *ops]})
    assert explain.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) <= 80 and "aten::op199" not in out  # too big to list by default
    assert explain.main([str(path), "--ops"]) == 0
    out = capsys.readouterr().out
    assert "aten::op199" in out and "aten::op200" not in out
    assert "... 250 more (--max-ops)" in out
    assert explain.main([str(path), "--ops", "--max-ops", "10"]) == 0
    assert "... 440 more (--max-ops)" in capsys.readouterr().out
    assert explain.main([str(path), "--ops", "--max-ops", "0"]) == 0
    assert "aten::op449" in capsys.readouterr().out
    assert explain.main([str(path), "--json"]) == 0
    steps = strict_json(capsys.readouterr().out)["traces"][0]["steps"]
    assert len(steps[0]["cpu_ops"]) == 450
