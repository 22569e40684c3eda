"""The reader on traces nobody here wrote and at model scale (issue 15): any trace reads, time is
unioned, the summary fits one screen, findings are about the time at stake. Other projects'
traces are read from ../shared/external-traces (never committed): those tests skip without it."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers import EXTERNAL_TRACES
from tracereader.analyses import breakdown, collectives
from tracereader.commands import explain
from tracereader.judge import findings
from tracereader.reading import read_run
from tracereader.trace import intervals
from tracereader.trace import load as trace_reader
from tracereader.trace.runs import runs_at

ROOT = Path(__file__).resolve().parent.parent
EXTERNAL = EXTERNAL_TRACES
FIXTURES = Path(__file__).parent / "fixtures"
CONTRACT = {"span_us", "gpu_busy_us", "idle_pct", "compute_pct", "non_compute_pct", "comm_us"}


def external(name: str) -> Path:
    path = EXTERNAL / name
    if not path.exists():
        pytest.skip(f"{path} is absent (other projects' traces, not committed)")
    return path


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data if isinstance(data, list) else data["traceEvents"]


def raw_gpu_union(path: Path) -> float:
    """Ground truth, naively: the union of every GPU event's interval in the file."""
    cats = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
    spans = [
        (e["ts"], e["ts"] + e["dur"])
        for e in raw_events(path)
        if e.get("ph") == "X" and e.get("cat") in cats
    ]
    return intervals.length(intervals.union(spans))


def explained(path: Path, *argv: str, capsys) -> str:
    assert explain.main([str(path), *argv]) == 0
    return capsys.readouterr().out


# --- time is unioned, not summed ----------------------------------------------------------


def test_gpu_busy_is_the_union_of_three_overlapping_streams():
    path = external("deepseek/train.json.gz")
    trace = trace_reader.load(path)
    (step,) = trace.steps
    busy = breakdown.busy(step.gpu)
    assert step.gpu_sum > 1.8 * busy  # summed, the overlapping streams count twice
    assert breakdown.window(trace)["gpu_busy_us"] == pytest.approx(raw_gpu_union(path), rel=5e-3)
    # busy 128.5 of 112.2 ms CPU time: GPU-bound, not "balanced"
    bound = next(f for f in findings.read(trace) if f.topic == "bound")
    assert bound.message.startswith("GPU-bound")


def test_window_has_the_contract_keys_and_adds_up():
    trace = trace_reader.load(external("hta/nccl_data.json.gz"))
    window = breakdown.window(trace)
    assert CONTRACT <= window.keys()
    total = window["idle_pct"] + window["compute_pct"] + window["non_compute_pct"]
    assert total == pytest.approx(100)
    assert 0 < window["comm_overlap_pct"] < 100


# --- any trace reads ------------------------------------------------------------------------


def test_gpu_trace_without_device_properties_is_a_gpu_trace(capsys):
    path = external("hta/vit_sampled_2ranks/rank-0.json.gz")
    trace = trace_reader.load(path)
    assert trace.on_gpu and trace.device_source == "GPU events"
    assert "from its GPU events: no deviceProperties" in explained(path, capsys=capsys)


def test_a_rank_folder_named_as_hta_names_it_reads_its_communication():
    folder = external("hta/vit_sampled_2ranks")
    (stem, files), *_ = runs_at(folder).items()
    assert sorted(files) == [0, 1]
    result = read_run(stem, files)
    shares = [r["comm_us"] / (r["comm_us"] + r["compute_us"]) for r in result["per_rank"]]
    assert min(shares) > 0.5  # it read 0% when the traces were taken for CPU-only ones


def test_torchtitan_iteration_folders_and_plain_rank_names(tmp_path, capsys):
    source = external("hta/vit_sampled_2ranks")
    for rank in (0, 1):
        (tmp_path / "iteration_10").mkdir(exist_ok=True)
        data = (source / f"rank-{rank}.json.gz").read_bytes()
        (tmp_path / "iteration_10" / f"rank{rank}_trace.json.gz").write_bytes(data)
    runs = runs_at(tmp_path)
    assert list(runs) == [tmp_path / "iteration_10"] and sorted(runs[tmp_path / "iteration_10"])
    assert "2 of 128 ranks" in explained(tmp_path, capsys=capsys)


@pytest.mark.slow  # another project's ResNet-50 trace
def test_the_2021_kineto_format_reads_its_steps(capsys):
    path = external("kineto/resnet50_w0_run1.pt.trace.json.gz")
    trace = trace_reader.load(path)
    assert (
        len(trace.steps) == 6
        and sum(i.kind == "kernel" for s in trace.steps for i in s.gpu) == 8772
    )
    assert trace.device == "Tesla V100-DGXS-32GB"
    out = explained(path, capsys=capsys)
    assert len(out.splitlines()) <= 80 and "phases" in out


@pytest.mark.slow  # another project's trace of a whole run
def test_a_trace_profiled_without_a_schedule_is_one_window(capsys):
    path = external("kineto/resnet50_autograd_w0.pt.trace.json.gz")
    trace = trace_reader.load(path)
    assert trace.unit == "window" and len(trace.steps) == 1
    said = " ".join(explained(path, capsys=capsys).split())  # as printed, lines wrapped at 100
    assert "no ProfilerStep: the recorded window is one unit" in said


# --- the summary fits one screen ----------------------------------------------------------


@pytest.mark.slow  # other projects' traces of whole runs: ~4 s on two busy cores
@pytest.mark.parametrize(
    "name",
    [
        "deepseek/train.json.gz",
        "hta/trace_diff/control.json.gz",
        "hta/df_index_resolver.json.gz",
        "hta/nccl_data.json.gz",
    ],
)
def test_the_summary_of_a_model_scale_trace_fits_one_screen(name, capsys):
    out = explained(external(name), capsys=capsys)
    assert len(out.splitlines()) <= 80
    assert "time by class" in out and "top kernels" in out and "findings:" in out


def test_json_carries_the_contract(capsys):
    out = explained(external("hta/nccl_data.json.gz"), "--json", capsys=capsys)
    data = json.loads(out)
    (trace,) = data["traces"]
    assert data["schema_version"] == 2
    assert {"path", "rank", "device", "unit", "window", "steps", "findings"} <= trace.keys()
    assert trace["device"] == {"name": "NVIDIA A100-PG509-200", "source": "deviceProperties"}
    assert trace["rank"] == 0 and trace["unit"] == "step" and len(trace["steps"]) == 3


# --- collectives ------------------------------------------------------------------------------


def test_collectives_read_their_kind_size_and_group_from_the_kernels_args():
    trace = trace_reader.load(external("hta/nccl_data.json.gz"))
    calls = [c for s in trace.steps for c in collectives.step(s, trace)["collectives"]]
    kinds = {c["kind"] for c in calls}
    assert kinds == {"all-reduce", "broadcast"}
    assert all(c["bytes"] and c["group"] == 2 for c in calls)
    first = next(c for c in calls if c["kind"] == "all-reduce")
    assert first["shape"].startswith("Float x")


def test_the_process_group_size_not_the_world_size():
    trace = trace_reader.load(
        FIXTURES / "h200x2/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager_rank0.json.gz"
    )
    (item,) = [i for i in trace.steps[0].gpu if collectives.is_comm(i)]
    assert collectives.kind(item) == "all-reduce" and collectives.group_size(item, trace) == 2


def test_a_collective_without_its_own_record_is_sized_by_its_whole_buffer():
    """Traces without the kernel's message size fall back on the issuing op's inputs. c10d's
    reduce-scatter takes (output, input): the first input is the shard, the buffer is the
    largest; an all-gather, (output, input), likewise."""
    op = SimpleNamespace(
        name="c10d::_reduce_scatter_base_",
        args={"Input Dims": [[8, 16], [16, 16], []], "Input type": ["float", "float", "int"]},
    )
    assert collectives.largest_input(op) == (16 * 16 * 4, "float [16, 16]")


# --- findings: the time at stake ------------------------------------------------------------


def _rewrite(tmp_path: Path, source: Path, change) -> Path:
    data = json.loads(gzip.decompress(source.read_bytes()))
    data["traceEvents"] = change(copy.deepcopy(data["traceEvents"]))
    out = tmp_path / source.name.replace(".gz", "")
    out.write_text(json.dumps(data))
    return out


MLP = FIXTURES / "h200/03_simple_mlp/b64_s128_d768_h3072_bf16_eager.json.gz"


def test_variation_compares_the_same_kernel_not_the_same_launch_position(tmp_path):
    """One extra small kernel at the start of a step shifts every later launch by one: by
    position, each kernel was compared with its neighbour's duration."""

    def one_more_launch(ev):
        steps = sorted(
            (e for e in ev if str(e.get("name")).startswith("ProfilerStep")), key=lambda e: e["ts"]
        )
        kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        runtime = {
            e["args"]["correlation"]: e
            for e in ev
            if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and "correlation" in e.get("args", {})
        }
        first = next(k for k in kernels if k["ts"] > steps[1]["ts"])
        call = runtime[first["args"]["correlation"]]
        extra, extra_call = copy.deepcopy(first), copy.deepcopy(call)
        extra["name"] = "void tiny_kernel()"
        extra["dur"] = 1.0
        extra["args"]["correlation"] = extra_call["args"]["correlation"] = 99_999_999
        extra_call["ts"] -= 0.5
        return [*ev, extra, extra_call]

    trace = trace_reader.load(_rewrite(tmp_path, MLP, one_more_launch))
    assert len(trace.steps[1].gpu) == len(trace.steps[0].gpu) + 1
    assert not [f for f in findings.read(trace, everything=True) if f.topic == "variation"]


@pytest.mark.parametrize(
    "name", ["hta/cpu_only_rank34.json.gz", "hta/distributed_info_not_found.json.gz"]
)
def test_a_trace_with_no_gpu_event_is_not_overhead_bound(name):
    trace = trace_reader.load(external(name))
    bound = next(f for f in findings.read(trace) if f.topic == "bound")
    assert "overhead-bound" not in bound.message and "no GPU side" in bound.message


def test_a_closing_sync_that_drains_queued_work_is_not_blamed_on_the_profiler():
    trace = trace_reader.load(external("deepseek/train.json.gz"))
    (sync,) = [f for f in findings.read(trace) if f.topic == "profiler"]
    assert "waits for the GPU to finish work still queued" in sync.message
    assert "flushing" not in sync.message


def test_no_cold_start_where_only_the_cpu_side_of_the_first_step_is_wider():
    """Every 01 fixture, cold and warm, has a first step 2-3x wider on the CPU (the
    profiler's own start) and the same GPU work: none is a cold start."""
    for path in sorted(FIXTURES.glob("h*/01_matmul_add/*.json.gz")):
        trace = trace_reader.load(path)
        assert not [f for f in findings.read(trace, everything=True) if f.topic == "cold start"]


def test_cold_start_where_the_first_steps_gpu_work_is_wider(tmp_path):
    source = FIXTURES / "h100/01_matmul_add/64_bf16_cold_eager.json.gz"

    def slow_first_step(ev):
        first = min(
            (e for e in ev if str(e.get("name")).startswith("ProfilerStep")), key=lambda e: e["ts"]
        )
        end = first["ts"] + first["dur"]
        for e in ev:
            if e.get("cat") == "kernel" and first["ts"] <= e["ts"] <= end:
                e["dur"] *= 4
        return ev

    trace = trace_reader.load(_rewrite(tmp_path, source, slow_first_step))
    (cold,) = [f for f in findings.read(trace) if f.topic == "cold start"]
    assert "its GPU work" in cold.message and cold.us > 0


def test_findings_carry_their_time_at_stake_and_small_ones_are_left_out():
    trace = trace_reader.load(external("kineto/resnet50_w0_run1.pt.trace.json.gz"))
    shown, hidden = findings.ranked(trace)
    timed = [f for f in shown if f.us is not None and f.topic != "bound"]
    assert timed == sorted(timed, key=lambda f: -f.us)
    assert all(f.pct >= 1 for f in timed) and all(f.pct < 1 for f in hidden)
    assert len({f.topic for f in shown if f.topic == "variation"}) <= 1  # merged by kind


# --- our own real traces of real models (tests/fixtures/h100/models, see its README) -------

MODELS = sorted((FIXTURES / "h100" / "models").glob("*.json.gz"))


@pytest.mark.slow  # four real model steps of 3-10 MB: ~5 s on two busy cores
@pytest.mark.parametrize("path", MODELS, ids=[p.name.split(".")[0] for p in MODELS])
def test_a_real_model_step_fits_one_screen_and_its_busy_time_is_the_union(path, capsys):
    """transformers' Llama (training, and inference compiled with and without CUDA graphs) and
    timm's ResNet-50 training, recorded on an H100: one screen each, and the whole trace's GPU
    busy time is the union of its raw GPU events within 0.5%."""
    out = explained(path, capsys=capsys)
    assert len(out.splitlines()) <= 80
    assert "time by class" in out and "top kernels" in out and "findings:" in out
    assert explain.main([str(path), "--json"]) == 0
    (trace,) = json.loads(capsys.readouterr().out)["traces"]
    raw = raw_gpu_union(path)
    assert abs(trace["window"]["gpu_busy_us"] - raw) <= 0.005 * raw


def test_a_training_step_reads_its_phases_and_the_optimizers_launches(capsys):
    """The Llama training step: forward, backward (on the autograd thread) and AdamW's
    optimizer step all named, and the per-kernel listing left behind a flag at this size."""
    out = explained(FIXTURES / "h100" / "models" / "llama_train_l8_h2048_b4_s1024_bf16.json.gz",
                    capsys=capsys)  # fmt: skip
    phases = out[out.index("phases") :].splitlines()[1:4]
    assert sorted(line.split()[0] for line in phases) == ["backward", "forward", "optimizer"]
    assert "GPU work, in launch order" not in out and "--kernels" in out


def test_a_run_read_with_a_rank_already_loaded_reads_the_same_and_skips_its_file(tmp_path):
    """A lesson's rank 0 has read its own trace: read_run takes it instead of reading the file
    again (here the file is gone), and the reading is the same."""
    stem = Path(__file__).parent / "fixtures/h200x2/05_tp_mlp/b64_s128_d768_h3072_bf16_tp2_eager"
    (found, files), *_ = runs_at(stem).items()
    assert found == stem and sorted(files) == [0, 1]
    rank0 = trace_reader.load(files[0])
    moved = {0: tmp_path / "rank0_not_there.json.gz", 1: files[1]}
    assert read_run(stem, moved, loaded={0: rank0}) == read_run(stem, files)


def test_a_read_trace_is_freed_once_dropped():
    """A process that reads trace after trace (a lesson's read-back, a sweep, the tests) keeps
    none of them: the answers remembered per step go with their step."""
    import gc
    import weakref

    from tracereader.reading import Reading

    mixtral = "h200/models/mixtral_train_l4_h1024_e8k2_b4_s1024_bf16.json.gz"
    trace = trace_reader.load(FIXTURES / mixtral)
    Reading(trace)  # every analysis, its per-step answers remembered
    steps = [weakref.ref(s) for s in trace.steps]
    del trace
    gc.collect()
    assert [s() for s in steps] == [None] * len(steps)
