"""The known defects of the reading (issue 39, item 6), each on the trace that showed it: a
compare verdict widened by one slow step, "GPU-bound" said of a host that paces the step, a
kernel's bytes beside another kernel's time, a sync filed under the copy that carried it, a
step wrapper's self time that was its wait in backward(), item() counted by runtime calls, a
CUDA graph's replay read as one launch per kernel. Each test failed before its fix."""

from __future__ import annotations

import pytest

from tests.helpers import EXTERNAL_TRACES, ROOT
from tracereader.analyses import diff, idle, launches, syncs, tops
from tracereader.judge import findings
from tracereader.names.devices import datasheet
from tracereader.reading import Reading
from tracereader.render.compare import text as compare_text
from tracereader.render.trace import text
from tracereader.trace.load import load
from tracereader.trace.model import ancestors

FIXTURES = ROOT / "tests/fixtures"
MODELS = FIXTURES / "h200/models"
MIXTRAL = MODELS / "mixtral_train_l4_h1024_e8k2_b4_s1024_bf16.json.gz"
WRAPPED = MODELS / "llama_train_wrapped_l8_h2048_b4_s1024_bf16.json.gz"
GRAPHS = MODELS / "llama_infer_l8_h2048_b4_s1024_bf16_cudagraphs_lag_w1-1-4.json.gz"
LAG_COMPILE = MODELS / "llama_infer_l8_h2048_b4_s1024_bf16_compile_lag_w1-1-4.json.gz"
SIMPLE_MLP = FIXTURES / "h100/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz"
FSDP_RANK = next((FIXTURES / "h100/fsdp_train").glob("*_fsdp1_eager_rank0.json.gz"))
KINETO = EXTERNAL_TRACES / "kineto"
external = pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")


# (a) one slow step widened the band: kineto's ResNet-50, 0 against 4 loader workers
A_STEPS = [187.9, 175.2, 179.7, 181.3, 182.2, 166.0]  # ms, resnet50_w0_run1's steps
B_STEPS = [182.3, 126.2, 127.2, 126.3, 163.5, 124.2]  # resnet50_w4's: 4 of 6 beat A's fastest


def test_one_slow_step_does_not_hide_a_change():
    assert diff.measurably_different(A_STEPS, B_STEPS)
    # the band is the interquartile range: one outlier of 6 leaves it where the rest are
    assert diff.band(B_STEPS)[0] > 124 and diff.band(B_STEPS)[1] < 165
    # and noise stays noise: one slow step on an unchanged side
    assert not diff.measurably_different(
        [100, 101, 99, 100, 102, 100], [101, 100, 99, 150, 100, 101]
    )
    # three steps a side have no quartiles: their full range, as before
    assert diff.band([1.0, 2.0, 9.0]) == (1.0, 9.0)


@external
def test_compare_of_resnet_with_and_without_loader_workers_says_faster():
    a = load(KINETO / "resnet50_w0_run1.pt.trace.json.gz")
    b = load(KINETO / "resnet50_w4.pt.trace.json.gz")
    assert [round(t / 1000, 1) for t in diff.step_times(a)] == A_STEPS
    assert [round(t / 1000, 1) for t in diff.step_times(b)] == B_STEPS
    assert diff.at_scale(a, b)["verdict"].startswith(
        "B is faster: step 180.5 ms -> 126.7 ms (0.70x"
    )


# (b) "GPU-bound, the launches keep ahead" of a host whose step outlasts the GPU's busy time
def test_a_host_that_outlasts_the_gpu_and_drains_the_queue_is_not_gpu_bound():
    """03_simple_mlp eager on an H100: the host works 261 us a step, the GPU is busy 257 us
    and waits for launches 26 us of its 296 us window: the launches do not keep ahead."""
    trace = load(SIMPLE_MLP)
    b = idle.bound(trace)
    assert b["host_work_us"] >= b["busy_us"] and b["host_wait_us"] > idle.DRAINS * b["window_us"]
    assert b["host_share"] <= 0.1  # the old rule's GPU-bound
    assert b["label"] == "balanced" and b["host_paced"]
    (bound,) = [f for f in findings.read(trace) if f.topic == "bound"]
    assert "keep ahead" not in bound.message.replace("do not keep ahead", "")
    assert "the host paces the step" in bound.message


@pytest.mark.parametrize("path", [FSDP_RANK, LAG_COMPILE], ids=["fsdp1", "lag_compile"])
def test_a_gpu_that_outlasts_the_hosts_own_work_stays_gpu_bound(path):
    """A host throttled by syncs on a lagging GPU (lag_compile: 7.4 ms of step, 3.3 ms of it
    in cudaEventSynchronize) works less than the GPU: still GPU-bound."""
    b = idle.bound(load(path))
    assert b["label"] == "GPU-bound" and b["host_work_us"] < b["busy_us"]


@external
def test_an_mtia_window_paced_by_its_host_is_not_gpu_bound():
    b = idle.bound(load(EXTERNAL_TRACES / "hta/mtia_inference_rank_0.json.gz"))
    assert b["label"] == "balanced" and b["host_work_us"] > 1.3 * b["busy_us"]


# (c) a kernel's own bytes beside the mean time of every kernel of its name
def test_compare_puts_each_kernels_own_time_beside_its_bytes():
    """mixtral against llama: a FillFunctor of 524 MB ran 111 us; the mean of its name's
    kernels, 10.4 us, read 50 TB/s on an H200."""
    a, b = load(MIXTRAL), load(WRAPPED)
    result = diff.compare(a, b)
    sheet = datasheet(a.device)
    fills = [e for e in result["only_in_a"] if "FillFunctor" in e["name"] and e["bytes"]]
    assert any(e["bytes"] > 5e8 for e in fills)
    for e in (*result["only_in_a"], *result["only_in_b"]):
        assert e["us"] == e["kernel_us"]
        if e["bytes"]:
            assert e["bytes"] <= sheet.bytes_per_s * e["us"] * 1e-6  # a rate the device has
    big = max(fills, key=lambda e: e["bytes"])
    assert big["name_mean_us"] < big["us"] / 5  # what was printed before
    shown = result["only_in_a"][:12]
    lines = compare_text(result).splitlines()
    start = lines.index("only in A:") + 1
    for e, line in zip(shown, lines[start : start + len(shown)], strict=True):
        assert line.startswith(f"  {e['us']:7.1f} us")


# (d) mixtral's syncs filed under aten::copy_ with pin-memory advice
def test_a_sync_is_filed_under_the_op_that_made_it_with_that_ops_fix():
    """24 DtoH copies per step into pageable memory and their stream syncs, each inside
    aten::_grouped_mm's fp32 fallback (the group offsets read on the host)."""
    trace = load(MIXTRAL)
    rows = {r["what"]: r for r in syncs.step(trace.steps[-1])}
    copy = rows["copy with pageable host memory"]
    assert copy["count"] == 24 and copy["by"] == "aten::_grouped_mm"
    assert "float" in copy["by_types"]
    assert rows["cudaStreamSynchronize"]["by"] == "aten::_grouped_mm"
    (sync,) = [f for f in findings.read(trace) if f.topic == "sync"]
    assert "in aten::_grouped_mm" in sync.message and "in aten::copy_" not in sync.message
    assert "bf16" in sync.next and "pin_memory" not in sync.next


def test_a_scalar_read_is_filed_under_what_the_user_wrote():
    """item() under aten::is_nonzero (`if tensor:`): the bool, not the copy or the read."""
    trace = load(MIXTRAL)
    rows = {r["what"]: r for r in syncs.step(trace.steps[-1])}
    assert rows["item() (a GPU scalar read on the CPU)"]["by"] == "aten::is_nonzero"


# (e) the step wrapper's self time was its thread waiting in backward()
def test_a_wrappers_wait_in_backward_is_not_its_self_time():
    """llama_train_wrapped: `train_step` read 100.6 ms of self time over 2 steps, first of the
    list; 74.8 ms of it the step thread blocked in backward() while autograd's thread ran."""
    trace = load(WRAPPED)
    raw = sum(op.dur - op.inner for s in trace.steps for op in s.cpu_ops if op.name == "train_step")
    (row,) = [r for r in tops.ops_by_self(trace, 1000) if r["name"] == "train_step"]
    assert row["backward_wait_us"] > 0.5 * raw
    assert row["self_us"] + row["backward_wait_us"] == pytest.approx(raw)
    busy = [(op.ts, op.end) for s in trace.steps for op in s.other_ops if op.parent is None]
    assert busy  # autograd's thread ran the backward
    screen = text(Reading(trace))
    assert "train_step" in screen and "waiting in backward(), not counted" in screen


# (f) "item() x2": two runtime calls (the copy, the wait) of one item()
def test_item_counts_item_calls_not_runtime_calls():
    trace = load(MIXTRAL)
    step = trace.steps[-1]
    row = next(r for r in syncs.step(step) if r["what"].startswith("item()"))
    calls = [
        c for c in step.runtime if any(op.name in syncs.SCALAR_OPS for op in ancestors(c.launcher))
    ]
    items = {id(next(op for op in ancestors(c.launcher)[::-1] if op.name in syncs.SCALAR_OPS))
             for c in calls}  # fmt: skip
    assert len(calls) > len(items)  # each item() is a copy and a wait
    assert row["count"] == len(items) == 1


# (g) a CUDA graph's kernels each measured against the one cudaGraphLaunch
def test_a_graph_replay_is_one_launch_in_the_launch_statistics():
    """llama inference replayed from CUDA graphs: 416 kernels of 4 replays read "416 shorter
    than their launch call", their queue 104 deep at the one launch."""
    trace = load(GRAPHS)
    got = launches.read(trace)
    replays = {
        id(i.call)
        for s in trace.steps
        for i in s.gpu
        if i.call is not None and i.call.name.startswith("cudaGraphLaunch")
    }
    assert got["graph_launches"] == len(replays) == 4
    assert got["graph_kernels"] == 416
    assert got["kernels"] == 4 and got["shorter_than_launch"] <= got["kernels"]
    assert got["queue_depth"]["max"] <= got["kernels"] + got["graph_launches"]
    line = next(x for x in text(Reading(trace)).splitlines() if x.startswith("launches:"))
    assert "4 CUDA graph replays" in line


@pytest.mark.slow  # reads every recorded fixture of 08 and the models
def test_no_fix_offered_is_one_the_program_already_uses():
    """A program that replays CUDA graphs is never told to try CUDA graphs, a compiled one never
    torch.compile, in any finding (the cause, the bound, a single-block kernel's)."""
    from tracereader.judge.cause_text import compiled, graphs

    paths = [*sorted((ROOT / "tests/fixtures/h200/08_generate").glob("*.json.gz")),
             *sorted((ROOT / "tests/fixtures/h200/models").glob("*cudagraphs*.json.gz")),
             *sorted((ROOT / "tests/fixtures/h200/models").glob("*compile*.json.gz"))]  # fmt: skip
    checked = {"graphs": 0, "compiled": 0}
    for path in paths:
        trace = load(path)
        shown, _ = findings.ranked(trace)
        fixes = " ".join(f.next or "" for f in shown)
        if graphs(trace):
            checked["graphs"] += 1
            assert "CUDA graphs" not in fixes.replace("CUDA graphs (torch.compile", ""), path.name
        if compiled(trace):
            checked["compiled"] += 1
            assert "launches: torch.compile" not in fixes, path.name
            assert "torch.compile alone" not in fixes, path.name
    assert checked["graphs"] >= 3 and checked["compiled"] >= 3
