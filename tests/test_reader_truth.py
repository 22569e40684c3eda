"""Every figure on the reader's screen true on real traces: the invariants a user relies on
without checking them, over every trace the tests can reach (the fixtures, the H200 model
recordings, and other projects' traces in ../shared/external-traces when present), and the
defects they caught, each on the trace that showed it.

- per step, GPU busy + its idle kinds = the step's GPU window, and the windows tile the GPU's
  timeline (no time counted twice, none lost);
- every share is at most 100% of a denominator that contains it;
- phases add up to the step's CPU time, and each kernel belongs to at most one phase;
- no finding has more time at stake than the step;
- compare's verdict agrees in direction with max(CPU, GPU) per step.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from functools import cache
from pathlib import Path

import pytest

from tests.helpers import EXTERNAL_TRACES, ROOT
from tracereader import read
from tracereader.analyses import breakdown, diff, idle, phases
from tracereader.judge import findings
from tracereader.judge.finding import step_time
from tracereader.render.trace import text
from tracereader.trace.load import TraceError, load

FIXTURES = ROOT / "tests/fixtures"
MODELS = FIXTURES / "h200/models"
LAG_COMPILE = MODELS / "llama_infer_l8_h2048_b4_s1024_bf16_compile_lag_w1-1-4.json.gz"
LAG_GRAPHS = MODELS / "llama_infer_l8_h2048_b4_s1024_bf16_cudagraphs_lag_w1-1-4.json.gz"
WRAPPED = MODELS / "llama_train_wrapped_l8_h2048_b4_s1024_bf16.json.gz"
FSDP_RANK = next((FIXTURES / "h100/fsdp_train").glob("*_fsdp1_eager_rank0.json.gz"))


def _traces() -> list[Path]:
    found = sorted(FIXTURES.rglob("*.json.gz")) + sorted(FIXTURES.rglob("*.json"))
    if EXTERNAL_TRACES.is_dir():
        found += sorted(p for p in EXTERNAL_TRACES.rglob("*.json*") if p.is_file())
    return [p for p in found if p.name != "provenance.json" and "provenance" not in p.name]


@cache
def _load(path: Path):
    try:
        return load(path)
    except TraceError:
        return None


ALL = _traces()
IDS = [str(p.relative_to(p.parents[2])) for p in ALL]
QUICK_BYTES = 100_000  # a larger trace (a real model's step, another project's run) is slow
SWEEP = [
    pytest.param(p, id=i, marks=() if p.stat().st_size < QUICK_BYTES else pytest.mark.slow)
    for p, i in zip(ALL, IDS, strict=True)
]


@pytest.mark.parametrize("path", SWEEP)
def test_busy_and_idle_fill_each_steps_gpu_window_and_the_windows_tile(path):
    trace = _load(path)
    if trace is None or not trace.steps or not trace.gpu_all:
        pytest.skip("no GPU side to account")
    bounds, parts = idle.windows(trace), idle.split(trace)
    for (lo, hi), p in zip(bounds, parts, strict=True):
        assert hi >= lo
        total = p["busy_us"] + p["host_wait_us"] + p["kernel_wait_us"] + p["other_us"]
        assert total == pytest.approx(p["window_us"], abs=4 * math.ulp(hi) * len(trace.gpu_all))
        assert p["window_us"] == pytest.approx(hi - lo)
    for (_, hi), (lo, _) in zip(bounds, bounds[1:], strict=False):
        assert hi == lo  # tiled: each window starts where the one before it ends


@pytest.mark.parametrize("path", SWEEP)
def test_no_share_on_screen_exceeds_its_whole_and_no_finding_exceeds_the_step(path):
    trace = _load(path)
    if trace is None or not trace.steps:
        pytest.skip("nothing read")
    reading = read(trace)
    screen = text(reading)
    for line in screen.splitlines():
        for word in line.split():
            if word.endswith("%") and word[:-1].replace(".", "", 1).isdigit():
                if "of its GPU window" in line or "% of GPU busy" in line:
                    assert float(word[:-1]) <= 100.0, line
    stake = step_time(trace)
    for f in [*reading.findings, *reading.hidden]:
        if f.us is not None:
            assert f.us <= stake * (1 + 1e-9), (f.topic, f.us, stake)
        if f.pct is not None:
            assert f.pct <= 100.0 + 1e-9, (f.topic, f.pct)
    if trace.gpu_all:
        for s in trace.steps:
            row = breakdown.step(s)
            for us in row["by_class_us"].values():
                assert us <= row["gpu_busy_us"] * (1 + 1e-9)


@pytest.mark.parametrize("path", SWEEP)
def test_phases_add_up_to_the_step_and_no_kernel_counts_twice(path):
    trace = _load(path)
    if trace is None or not trace.steps:
        pytest.skip("nothing read")
    for s in trace.steps:
        rows = phases.step(s)
        if not rows:
            continue
        # timestamps near 1e15 us (HTA's ns_resolution) are exact to a quarter of a microsecond
        assert sum(r["cpu_us"] for r in rows) == pytest.approx(s.dur, abs=8 * math.ulp(s.ts))
        # each interval's end (ts + dur) is rounded to the timestamps' precision
        slack = 2 * math.ulp(s.ts) * (len(s.gpu) + 1)
        assert sum(r["gpu_us"] for r in rows) <= s.gpu_sum + slack


# --- the defects, each on the trace that showed it --------------------------------------------


def test_a_gpu_that_lags_the_host_is_not_waiting_on_it():
    """FSDP at one rank on an H100: the GPU runs behind the host all the time. Before, each
    step's idle was taken from its CPU start, full of the previous step's kernels: 25 ms of
    "waiting on the host" on a GPU that never waited."""
    trace = load(FSDP_RANK)
    for p in idle.split(trace)[1:]:
        assert p["host_wait_us"] == 0.0
        assert p["busy_us"] > 0.95 * p["window_us"]
    bound = next(f for f in findings.read(trace) if f.topic == "bound")
    assert bound.message.startswith("GPU-bound") and bound.us is None


@pytest.mark.slow  # another project's ResNet-50 trace
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
def test_kernel_wait_is_htas_to_the_microsecond_on_kinetos_resnet50():
    """HTA's kernel wait on kineto's ResNet-50 samples: 10,243 us (run1) and 10,642 us (w4),
    and 1,469 us of other idle in w4; its threshold is 30 us in effect, not 30 ns."""
    for name, kernel, other in (
        ("resnet50_w0_run1.pt.trace.json.gz", 10243, 0),
        ("resnet50_w4.pt.trace.json.gz", 10642, 1469),
    ):
        parts = idle.split(load(EXTERNAL_TRACES / "kineto" / name))
        assert sum(p["kernel_wait_us"] for p in parts) == pytest.approx(kernel, abs=1)
        assert sum(p["other_us"] for p in parts) == pytest.approx(other, abs=1)


@pytest.mark.slow  # another project's trace
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
def test_htas_ns_resolution_trace_is_gpu_bound_with_no_host_wait():
    """Before: "GPU-bound, busy 99% of wall" beside "waiting on the host 89.5 ms"."""
    trace = load(EXTERNAL_TRACES / "hta/ns_resolution_rank0.json.gz")
    parts = idle.split(trace)
    assert statistics.median(p["host_wait_us"] for p in parts) < 100
    assert 1000 < statistics.median(p["kernel_wait_us"] for p in parts) < 1200
    assert "waiting on the host 0.000 us" in text(read(trace))


def test_phases_are_found_inside_a_wrapper_annotation():
    """A Llama training step wrapped in one record_function("train_step") (transformers,
    autocast, AdamW foreach; two H200 steps). Before, the wrapper was named after the first
    phase found one level down and the forward vanished. Now: forward, backward and the
    optimizer, each kernel in the phase of the op that launched it."""
    trace = load(WRAPPED)
    rows = {r["phase"]: r for r in phases.step(trace.steps[-1])}
    assert {"forward", "backward", "optimizer"} <= set(rows)
    assert rows["backward"]["gpu_us"] > rows["forward"]["gpu_us"] > 0
    step = trace.steps[-1]
    under_optimizer = [
        i for i in step.gpu
        if i.launcher is not None and any(
            a.name.startswith("Optimizer.") for a in _ancestors(i.launcher))
    ]  # fmt: skip
    union = breakdown.busy(under_optimizer)
    assert rows["optimizer"]["gpu_us"] == pytest.approx(union)


def _ancestors(op):
    while op is not None:
        yield op
        op = op.parent


def test_compare_does_not_follow_the_cpu_on_gpu_bound_runs():
    """Compiled vs CUDA-graph inference with the GPU lagging the host (H200): both GPU-bound,
    GPU busy within 1%. The verdict must not read a faster host as a faster step."""
    a, b = load(LAG_COMPILE), load(LAG_GRAPHS)
    result = diff.at_scale(a, b)
    assert result["bound"] == {"a": "GPU-bound", "b": "GPU-bound"}
    assert result["verdict"].startswith("B is not measurably different")
    ta, tb = (statistics.median(diff.step_times(t)) for t in (a, b))
    assert abs(tb / ta - 1) < 0.03


def test_a_users_annotation_named_compile_is_no_recompile(tmp_path):
    source = FIXTURES / "h200/02_linear/b8_in4_out6_bf16_compile.json.gz"
    events = json.loads(gzip.open(source).read())
    for e in events["traceEvents"]:
        if e.get("name") == "linear_fwd":
            e["name"] = "llama_compile_step"
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(events))
    assert not [f for f in findings.read(load(path)) if f.problem]


def test_a_sync_that_only_throttles_a_gpu_bound_loop_costs_nothing():
    """The lagging loops wait on an event each step while the GPU stays busy: no time at
    stake, and no advice to remove the sync."""
    for path in (LAG_COMPILE, LAG_GRAPHS):
        found = [f for f in findings.read(load(path), everything=True) if f.topic == "sync"]
        assert found and found[0].us < 1 and "at no cost" in found[0].message


def test_bf16_inference_shows_no_upcast():
    """bf16 end to end (GPT-2 and Llama inference): no [precision] finding shown, and no
    cast counted, though transformers makes casts while setting up (bf16 -> bf16, some of 0
    elements; the rotary embedding's tiny fp32 GEMM is left below 1% of the step)."""
    for path in (LAG_COMPILE, MODELS / "gpt2_infer_l12_h768_b8_s1024_bf16_v50304.json.gz"):
        found = [f for f in findings.read(load(path), everything=True) if f.topic == "precision"]
        assert not [f for f in found if "aten::_to_copy" in f.message]
        assert all(f.pct < 1 for f in found)


@pytest.mark.parametrize("path", SWEEP)
def test_the_summary_and_the_findings_fit_160_columns(path):
    """Lists of names (kernels, CPU ops gone) once made lines of 1,783 characters."""
    trace = _load(path)
    if trace is None or not trace.steps:
        pytest.skip("nothing read")
    reading = read(trace)
    screen = text(reading, kernels=False, ops=False)
    listing = _listing_start(screen)
    # the first line names the trace's path, as long as the user's path is
    assert all(len(line) <= 160 for line in screen.splitlines()[1:listing])


def _listing_start(screen: str) -> int:
    lines = screen.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("findings:")), len(lines))
    return next(
        (i for i in range(head + 1, len(lines)) if not lines[i].startswith(" ")), len(lines)
    )


def test_compare_lists_fit_160_columns():
    a, b = load(LAG_COMPILE), load(LAG_GRAPHS)
    from tracereader.render.compare import text as compare_text

    screen = compare_text(diff.compare(a, b))
    assert max(len(line) for line in screen.splitlines()) <= 160
    assert "triton_poi_fused__unsafe_view_mul_silu_7 x8" in screen.replace("\n", " ")


@pytest.mark.slow  # another project's trace
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
def test_a_closing_sync_that_drains_the_queue_is_the_gpus_time_not_the_profilers():
    """HTA's negative_queue trace: 880 kernels of the last step run during the 158 ms sync
    after it, the last ending just before it returns, with the GPU busy only 36% of it."""
    found = findings.read(load(EXTERNAL_TRACES / "hta/negative_queue_rank0.json.gz"))
    (sync,) = [f for f in found if f.topic == "profiler"]
    assert "880 GPU operations" in sync.message and "not the profiler's" in sync.message


@pytest.mark.slow  # another project's trace
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
def test_first_calls_read_as_warm_up_not_overhead():
    """kineto's resnet50_autograd_w0: no steps, the first calls (cuDNN timing its algorithms,
    the allocator growing): the advice is to profile after warm-up, not torch.compile."""
    trace = load(EXTERNAL_TRACES / "kineto/resnet50_autograd_w0.pt.trace.json.gz")
    (bound,) = [f for f in findings.read(trace) if f.topic == "bound"]
    assert bound.message.startswith("warm-up") and "cuDNN autotuning" in bound.message
    assert "schedule(" in bound.next and "torch.compile" not in bound.next


GPT2 = MODELS / "gpt2_infer_l12_h768_b8_s1024_bf16_v50257.json.gz"
GPT2_PADDED = MODELS / "gpt2_infer_l12_h768_b8_s1024_bf16_v50304.json.gz"
MIXTRAL = MODELS / "mixtral_train_l4_h1024_e8k2_b4_s1024_bf16.json.gz"


def test_an_unaligned_vocabulary_is_named_with_its_fix_and_the_fix_holds():
    """GPT-2's LM head, N = 50257 (no multiple of 8), on an H200: cuBLAS's unaligned sm75
    kernel at a fraction of the step's GEMM rate, the largest finding after the bound; padded
    to 50304 the finding is gone and the head's GEMM is several times faster (both recorded)."""
    found = findings.read(load(GPT2))
    (shape,) = [f for f in found if f.topic == "gemm shape"]
    assert "N = 50257" in shape.message and "align1" in shape.message
    assert "50304" in shape.next
    timed = [f for f in found if f.us is not None and f.topic != "bound"]
    assert max(timed, key=lambda f: f.us) is shape
    assert not [f for f in findings.read(load(GPT2_PADDED)) if f.topic == "gemm shape"]

    def head(path):
        step = load(path).steps[-1]
        return max(i.dur for i in step.gpu if i.klass.cls == "gemm")

    assert head(GPT2) > 5 * head(GPT2_PADDED)


def test_float32_gemms_in_a_mixed_precision_step_are_pointed_out():
    """A small Mixtral training step under autocast: the experts' GEMMs run in fp32 on CUDA
    cores beside bf16 ones."""
    (precision,) = [f for f in findings.read(load(MIXTRAL)) if f.topic == "precision"]
    assert "float32 GEMMs per step (193 on CUDA cores) beside 63 16-bit ones" in precision.message
    assert precision.us > 10_000  # tens of ms at stake per step


def test_the_optimizers_share_and_autocasts_weight_casts_are_pointed_out():
    """The wrapped Llama step (8 layers: 7 GEMM weights each and the head): the foreach
    optimizer's share, and autocast casting each of the 57 weights once per step (its aten::to
    holds an aten::_to_copy: one cast, not two)."""
    found = {f.topic: f for f in findings.read(load(WRAPPED), everything=True)}
    assert found["optimizer"].message.startswith("the optimizer (foreach) takes")
    assert "fused=True" in found["optimizer"].next
    assert "autocast casts 57 fp32 weights to 16 bits every step" in found["autocast"].message


def test_one_ranks_bandwidth_is_said_to_hold_its_wait():
    rank = next((FIXTURES / "h200x2/05_tp_mlp").glob("*_tp2_eager_rank0.json.gz"))
    assert "holds its wait for the other ranks" in text(read(load(rank))).replace("\n    ", " ")


def _pairs() -> list[tuple[Path, Path]]:
    """Every two traces of one lesson folder (or the model recordings) on one device."""
    out = []
    for folder in sorted({p.parent for p in FIXTURES.rglob("*.json.gz")}):
        files = sorted(folder.glob("*.json.gz"))[:6]
        out += [(a, b) for i, a in enumerate(files) for b in files[i + 1 :]]
    return out


@pytest.mark.slow  # every fixture folder's traces
def test_byte_estimates_are_lower_bounds_per_kind_of_kernel():
    """compare's HBM estimates over every pair of fixtures of one folder and device: none
    counted above what the device's datasheet bandwidth moves in the kernel's time; the few
    kernels that touch more than that (their inputs still in L2, just written) have their
    estimate withdrawn and are said so; and no embedding, gather or reduction is among them
    (before: a gather charged the whole table, a mean an input-sized output: 9-39% over)."""
    estimated = withdrawn = 0
    for a, b in _pairs():
        ta, tb = _load(a), _load(b)
        if ta is None or tb is None or ta.device != tb.device or not ta.steps or not tb.steps:
            continue
        result = diff.compare(ta, tb)
        for e in (*result["only_in_a"], *result["only_in_b"]):
            if e["bytes"] is not None and e["bytes_cap"] is not None:
                assert e["bytes"] <= e["bytes_cap"]
            if e["bytes_touched"] is not None and e["bytes_cap"] is not None:
                estimated += 1
                withdrawn += e["capped"]
                if e["capped"]:
                    op = e["launched_by"].removeprefix("aten::")
                    assert not diff.GATHERS.match(op) and not diff.REDUCTIONS.match(op), e
    assert estimated > 100 and withdrawn <= 0.1 * estimated, (withdrawn, estimated)


def test_without_a_known_device_each_estimate_says_its_cap_is_unknown(tmp_path):
    """The same H100 pair with its device left unrecorded (no deviceProperties): no cap to
    check against, and each estimate says so instead of standing unchecked."""
    from tracereader.render.compare import text as compare_text

    paths = []
    for mode in ("eager", "compile"):
        source = FIXTURES / f"h100/03_simple_mlp/b64_s128_d768_h3072_bf16_{mode}.json.gz"
        events = json.loads(gzip.open(source).read())
        events.pop("deviceProperties", None)
        paths.append(tmp_path / f"{mode}.json")
        paths[-1].write_text(json.dumps(events))
    screen = compare_text(diff.compare(load(paths[0]), load(paths[1])))
    rows = [line for line in screen.replace("\n    ", " ").splitlines() if "moves >=" in line]
    assert rows and all("cap unknown" in line for line in rows)


@pytest.mark.parametrize(
    "folder, stem",
    [("h200x4/07_fsdp_train", "b4_s2048_d2048_h5632_n16_l8_bf16_fsdp2_eager"),
     ("h200x4/07_fsdp_train", "b4_s2048_d2048_h5632_n16_l8_bf16_ddp2_eager"),
     ("h200x2/05_tp_mlp", "b64_s128_d768_h3072_bf16_tp2_eager")],
)  # fmt: skip
@pytest.mark.slow  # every rank of a 4-GPU run read twice: ~4 s on two busy cores
def test_the_folder_and_one_rank_read_the_same_communication(folder, stem):
    """The same rank read alone (explain TRACE) and among its peers (explain FOLDER): one
    definition of its communication, compute and exposed time (before: 52.5% against 46%
    overlap, the folder counting copies and memsets as compute and summing)."""
    from tracereader import read_run

    files = {r: FIXTURES / folder / f"{stem}_rank{r}.json.gz" for r in (0, 1)}
    run = read_run(FIXTURES / folder / stem, files)
    for row in run["per_rank"]:
        alone = read(load(files[row["rank"]])).summary["collectives"]
        assert row["comm_us"] == pytest.approx(alone["comm_us"]["median"])
        assert row["exposed_us"] == pytest.approx(alone["exposed_us"]["median"])


@pytest.mark.slow  # other projects' traces
@pytest.mark.skipif(not EXTERNAL_TRACES.is_dir(), reason="no ../shared/external-traces")
def test_a_gpu_idle_with_work_queued_is_stalled_not_gpu_bound():
    """HTA's negative_queue (16-rank A100 job, rank 0): the GPU is busy a third of its window
    and almost never waits on the host: the rest it waits with work queued (NCCL, copies from
    pageable memory). Not "GPU-bound"."""
    (bound,) = [f for f in findings.read(load(EXTERNAL_TRACES / "hta/negative_queue_rank0.json.gz"))
                if f.topic == "bound"]  # fmt: skip
    assert bound.message.startswith("stalled") and bound.us > 100_000


@pytest.mark.slow  # every pair of fixtures in a folder: ~5 s on two busy cores
def test_compares_verdict_agrees_in_direction_with_the_steps_time():
    """Over every pair of fixtures of one folder and device: "faster" only where B's median
    step (the longer of CPU and GPU) is shorter, "slower" only where it is longer."""
    seen = 0
    for a, b in _pairs():
        ta, tb = _load(a), _load(b)
        if ta is None or tb is None or ta.device != tb.device or not ta.steps or not tb.steps:
            continue
        result = diff.at_scale(ta, tb)
        ma, mb = (statistics.median(diff.step_times(t)) for t in (ta, tb))
        if result["verdict"].startswith("B is faster"):
            assert mb < ma, (a.name, b.name)
        elif result["verdict"].startswith("B is slower"):
            assert mb > ma, (a.name, b.name)
        seen += 1
    assert seen > 50
