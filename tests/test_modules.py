"""nn.Module attribution (issue 15): the module tree torch.profiler records with with_stack=True,
each module's CPU time and the GPU time of the work it launched, by union, in the summary,
`--modules` and `--json`; nothing of it for a trace without module events."""

from __future__ import annotations

import copy
import gzip
import json
import statistics
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

from tracereader.analyses import modules
from tracereader.commands import compare, explain
from tracereader.trace import intervals
from tracereader.trace import load as trace_reader

FIXTURES = Path(__file__).parent / "fixtures"
MLP = FIXTURES / "h100/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz"
LLAMA_TRAIN = FIXTURES / "h100/models/llama_train_l8_h2048_b4_s1024_bf16.json.gz"
RUNTIME = {"cuda_runtime", "cuda_driver"}
GPU = {"kernel", "gpu_memcpy", "gpu_memset"}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*(Block() for _ in range(5)))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


def record(path: Path, with_stack: bool) -> Path:
    """Two recorded training steps of a small model, with the real profiler on the CPU."""
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2),
        with_stack=with_stack,
    ) as prof:
        for _ in range(4):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def cpu_traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modules")
    return record(folder / "stack.json", True), record(folder / "plain.json", False)


def events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return data["traceEvents"]


def steps_of(evs: list[dict]) -> list[dict]:
    cpu = ("user_annotation", "cpu_op")  # not the GPU's copy of the annotation
    steps = (e for e in evs if e.get("cat") in cpu and e["name"].startswith("ProfilerStep#"))
    return sorted(steps, key=lambda e: e["ts"])


def within(outer: dict, e: dict) -> bool:
    return outer["ts"] <= e["ts"] <= outer["ts"] + outer["dur"]


def run(argv: list[str], capsys) -> str:
    assert explain.main(argv) == 0
    return capsys.readouterr().out


def test_a_cpu_trace_with_stack_shows_the_module_tree(cpu_traces, capsys):
    """The wrapper (Net_0 around its body) is skipped, the five Blocks, more than the rows
    left, are one row; each module's CPU time is its recorded calls' time, median over the
    steps; the tree nests as the model does."""
    stack, _ = cpu_traces
    data = json.loads(run([str(stack), "--json"], capsys))["traces"][0]["summary"]["modules"]
    tree = {node["path"]: node for node in data["tree"]}
    assert data["wrappers"] == ["Net_0"]
    rows = [(r["name"], r["level"]) for r in data["rows"]]
    # which of the two top-level modules ranks first is their CPU time: on busy cores a noisy
    # Linear_10 call can outlast the five blocks, so the order of the two is not asserted
    assert sorted(rows) == [("Block x5", 2), ("Linear_10", 1), ("Sequential_0", 1)]
    assert rows.index(("Block x5", 2)) == rows.index(("Sequential_0", 1)) + 1  # under its parent
    assert tree["Net_0/Sequential_0/Block_4/Linear_9"]["depth"] == 3
    evs = events(stack)
    for step_name, path in (
        ("Linear_10", "Net_0/Linear_10"),
        ("Block_0", "Net_0/Sequential_0/Block_0"),
    ):
        durs = [e["dur"] for e in evs if e.get("name") == f"nn.Module: {step_name}"]
        assert len(durs) == 2  # one call per recorded step
        assert tree[path]["cpu_us"] == pytest.approx(statistics.median(durs), abs=0.01)
    assert tree["Net_0"]["cpu_us"] >= tree["Net_0/Sequential_0"]["cpu_us"]

    out = run([str(stack)], capsys)
    section = out[out.index("nn.Modules inside Net_0") :].splitlines()
    assert [line.split()[0] for line in section[1:4]] == ["Sequential_0", "Block", "Linear_10"]
    assert len(out.splitlines()) <= 80
    tree_out = run([str(stack), "--modules"], capsys)
    assert "nn.Module tree" in tree_out and "        Linear_9" in tree_out


def test_a_trace_without_module_events_shows_no_module_section(cpu_traces, capsys):
    _, plain = cpu_traces
    out = run([str(plain)], capsys)
    assert "nn.Module" not in out
    data = json.loads(run([str(plain), "--json"], capsys))
    assert data["traces"][0]["summary"]["modules"] is None
    assert "none in this trace" in run([str(plain), "--modules"], capsys)


# --- the GPU side: real H100 traces with module events placed over known CPU ops ----------


def _with_modules(tmp_path: Path, source: Path, wrap) -> Path:
    """`source` with nn.Module events added as torch writes them (python_function on the
    op's thread): `wrap(step, events)` returns (name, ts, dur, tid) per step."""
    data = json.loads(gzip.decompress(source.read_bytes()))
    evs = copy.deepcopy(data["traceEvents"])
    added = []
    for step in steps_of(evs):
        for name, ts, dur, tid in wrap(step, evs):
            added.append({"ph": "X", "cat": "python_function", "name": f"nn.Module: {name}",
                          "pid": step["pid"], "tid": tid, "ts": ts, "dur": dur})  # fmt: skip
    data["traceEvents"] = evs + added
    out = tmp_path / source.name.replace(".gz", "")
    out.write_text(json.dumps(data))
    return out


def _launched(evs: list[dict], keep) -> list[dict]:
    """The GPU events whose runtime call (matched by correlation id) satisfies `keep`."""
    calls = {e["args"].get("correlation"): e for e in evs if e.get("cat") in RUNTIME}
    return [
        e
        for e in evs
        if e.get("cat") in GPU and (c := calls.get(e["args"].get("correlation"))) and keep(c)
    ]


def _union(gpu: list[dict]) -> float:
    return intervals.length(intervals.union([(e["ts"], e["ts"] + e["dur"]) for e in gpu]))


def _mlp_with_modules(tmp_path: Path) -> Path:
    def wrap(step, evs):
        ops = [e for e in evs if e.get("ph") == "X" and within(step, e)]
        fwd = next(e for e in ops if e["name"] == "mlp_fwd")
        yield "GeGLUMLP_0", fwd["ts"], fwd["dur"], fwd["tid"]
        linears = sorted((e for e in ops if e["name"] == "aten::linear"), key=lambda e: e["ts"])
        for i, op in enumerate(linears):
            yield f"Linear_{i}", op["ts"], op["dur"], op["tid"]

    return _with_modules(tmp_path, MLP, wrap)


def test_gpu_time_is_the_union_of_what_each_module_launched(tmp_path):
    """The MLP's three aten::linear calls as Linear modules inside the MLP; the up GEMM moved
    onto the gate GEMM's time, as if on a second stream: the MLP's GPU time is the union of
    its work, less than the sum, and each Linear has its own GEMM (and memset)."""

    path = _mlp_with_modules(tmp_path)
    data = json.loads(path.read_text())
    evs = data["traceEvents"]
    fwds = [
        next(e for e in evs if e.get("name") == "mlp_fwd" and within(s, e)) for s in steps_of(evs)
    ]
    per_step = [_launched(evs, lambda c, f=f: c["tid"] == f["tid"] and within(f, c)) for f in fwds]
    for gpu in per_step:
        gate, up, _ = sorted(
            (e for e in gpu if e["name"].startswith("nvjet")), key=lambda e: e["ts"]
        )
        up["ts"] = gate["ts"] + 5
        up["args"]["stream"] = 99
    path.write_text(json.dumps(data))
    read = modules.read(trace_reader.load(path))
    tree = {n["path"]: n for n in read["tree"]}
    expected = statistics.median(_union(gpu) for gpu in per_step)
    summed = statistics.median(sum(e["dur"] for e in gpu) for gpu in per_step)
    assert tree["GeGLUMLP_0"]["gpu_us"] == pytest.approx(expected)
    assert tree["GeGLUMLP_0"]["gpu_us"] < summed - 40  # the moved GEMM overlaps by ~50 us
    assert tree["GeGLUMLP_0"]["launches"] == statistics.median(len(gpu) for gpu in per_step)
    linears = [tree[f"GeGLUMLP_0/Linear_{i}"] for i in range(3)]
    assert [n["launches"] for n in linears] == [2, 2, 1]  # gate, up: memset + GEMM; down: GEMM
    assert sum(n["gpu_us"] for n in linears) < tree["GeGLUMLP_0"]["gpu_us"]  # GeLU, mul outside
    assert read["outside_modules"]["other_threads_gpu_us"] == 0.0


@pytest.mark.slow  # a real Llama step's trace rewritten and read: ~2 s
def test_backward_kernels_on_the_autograd_thread_are_not_given_to_a_module(tmp_path, capsys):
    """One module around each Llama training step on the main thread: the forward's and the
    optimizer's work is inside it; the backward's, launched by the autograd thread where no
    module events exist, is counted apart and the summary says why."""

    def wrap(step, evs):
        yield "Trainer_0", step["ts"], step["dur"], step["tid"]

    path = _with_modules(tmp_path, LLAMA_TRAIN, wrap)
    read = modules.read(trace_reader.load(path))
    evs = json.loads(path.read_text())["traceEvents"]
    elsewhere = [
        _launched(evs, lambda c, s=s: c["tid"] != s["tid"] and within(s, c)) for s in steps_of(evs)
    ]
    assert all(elsewhere), "the fixture's backward runs on a thread of its own"
    out = read["outside_modules"]
    assert out["other_threads_gpu_us"] == pytest.approx(
        statistics.median(_union(gpu) for gpu in elsewhere)
    )
    assert out["other_threads_gpu_us"] > 0.3 * out["gpu_busy_us"]  # the backward: a big share
    assert out["module_threads_gpu_us"] == 0.0
    assert read["tree"][0]["gpu_us"] + out["other_threads_gpu_us"] >= out["gpu_busy_us"] * 0.999
    text = run([str(path)], capsys)
    assert "autograd's thread records none" in text and len(text.splitlines()) <= 80


def test_compare_names_the_modules_whose_gpu_time_changed(tmp_path, capsys):
    """B's down projection (the last GEMM of each step) takes twice as long: compare names
    that Linear and the MLP around it, and no other module."""
    a = _mlp_with_modules(tmp_path)
    data = json.loads(a.read_text())
    evs = data["traceEvents"]
    for s in steps_of(evs):
        down = next(e for e in evs if e.get("name") == "aten::linear" and within(s, e)
                    and e["ts"] > next(f for f in evs if f.get("name") == "aten::gelu"
                                       and within(s, f))["ts"])  # fmt: skip
        (gemm,) = _launched(evs, lambda c, d=down: c["tid"] == d["tid"] and within(d, c))
        gemm["dur"] *= 2
    b = tmp_path / "b.json"
    b.write_text(json.dumps(data))
    assert compare.main([str(a), str(b), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["modules"]
    assert sorted(r["path"] for r in found["changed"]) == ["GeGLUMLP_0", "GeGLUMLP_0/Linear_2"]
    assert found["gone"] == found["new"] == []
    assert compare.main([str(a), str(MLP)]) == 0
    assert "only A carries module events" in capsys.readouterr().out


def test_work_launched_between_modules_on_their_thread_is_counted_apart(tmp_path, capsys):
    """Only the three Linears are modules: the GeLU and mul kernels, launched between them on
    the same thread, are outside every module, and the summary says how much."""

    def wrap(step, evs):
        ops = [e for e in evs if e.get("ph") == "X" and within(step, e)]
        linears = sorted((e for e in ops if e["name"] == "aten::linear"), key=lambda e: e["ts"])
        for i, op in enumerate(linears):
            yield f"Linear_{i}", op["ts"], op["dur"], op["tid"]

    path = _with_modules(tmp_path, MLP, wrap)
    read = modules.read(trace_reader.load(path))
    evs = json.loads(path.read_text())["traceEvents"]
    between = [
        _launched(evs, lambda c, s=s: c["tid"] == s["tid"] and within(s, c)
                  and not any(e.get("cat") == "python_function" and within(e, c) for e in evs))
        for s in steps_of(evs)
    ]  # fmt: skip
    assert all(len(gpu) == 2 for gpu in between)  # GeLU and mul
    out = read["outside_modules"]
    assert out["module_threads_gpu_us"] == pytest.approx(
        statistics.median(_union(gpu) for gpu in between)
    )
    assert out["other_threads_gpu_us"] == 0.0
    assert read["wrappers"] == [] and [r["name"] for r in read["rows"]][0].startswith("Linear_")
    assert "launched outside modules" in run([str(path)], capsys)


REAL = sorted((FIXTURES / "h100/models").glob("*_modules.json.gz"))


@pytest.mark.slow  # real model steps with their module events
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name.split("_")[0])
def test_real_gpu_steps_recorded_with_modules_attribute_their_kernels(path, capsys):
    """Llama and ResNet-50 training steps recorded on an H100 with with_stack=True: the
    forward's kernels land in its modules (module events and the runtime calls nest on the
    GPU machine's clock), the backward's come from the autograd thread, and the three parts
    cover the step's GPU busy time; repeated blocks cost alike."""
    read = modules.read(trace_reader.load(path))
    out = read["outside_modules"]
    roots = sum(n["gpu_us"] for n in read["tree"] if n["depth"] == 0)
    assert roots > 0.1 * out["gpu_busy_us"] and out["other_threads_gpu_us"] > roots
    covered = roots + out["other_threads_gpu_us"] + out["module_threads_gpu_us"]
    assert covered >= 0.999 * out["gpu_busy_us"]
    layers = [
        n["gpu_us"]
        for n in read["tree"]
        if n["path"].split("/")[-1].startswith("LlamaDecoderLayer_")
    ]
    if layers:  # the Llama step: eight identical blocks
        assert len(layers) == 8 and max(layers) < 1.1 * statistics.median(layers)
    text = run([str(path)], capsys)
    assert len(text.splitlines()) <= 80
    assert ("LlamaDecoderLayer x8" if layers else "Sequential") in text  # blocks or stages
