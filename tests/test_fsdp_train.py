"""07_fsdp_train.py for real: FSDP2 on two gloo ranks under torchrun, tiny shapes. What a user
relies on: the step checked against a single-process step, one trace per rank with its
distributedInfo, the all-gathers and reduce-scatters FSDP issues per block counted from the
traces, rank 0's reading (by collective kind), rank 0 speaking for all; bad input, a failing
rank: one line from rank 0, every rank out, nothing left behind, nothing hung.

Two torchrun launches in all (each 10-30 s on a loaded 2-core machine): a whole run, and a
failing rank. --no-reshard-after-forward's difference runs in-process on torch's fake process
group (two ranks' worth of FSDP2 hooks and c10d calls in one process, no data moved): at one
rank FSDP2 issues no collective at all, so a 1-rank gloo group cannot show it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import tracereader
from common import torchrun
from modules.models import TinyLM
from tests.helpers import (
    EXTERNAL_TRACES,
    ROOT,
    inside,
    load_script,
    read_trace,
    steps,
    torchrun_in_process,
)
from tests.test_tp_mlp import alone, check
from tracereader.reading import read_run
from tracereader.render import ranks as ranks_text
from tracereader.trace import load as trace_reader
from tracereader.trace.runs import runs_at

SCRIPT = "07_fsdp_train.py"
LAYERS = 2
SMALL = ["--batch", "1", "--seq", "8", "--dim", "32", "--hidden", "64", "--heads", "2"]
SMALL += ["--layers", str(LAYERS), "--vocab", "64"]
STEM = "b1_s8_d32_h64_n2_l2_bf16_fsdp2_prefetch_eager_cpu"
LAUNCH_TIMEOUT_S = 240  # a hung launch fails the test instead of hanging CI
GROUPS = [f"blocks.{i}" for i in range(LAYERS)] + [""]  # FSDP groups: the blocks, the root

lesson = load_script("07_fsdp_train")


def torchrun_launch(tmp: Path, *argv: str, fault: str | None = None, nproc: int = 2):
    """gloo ranks to the end. Returns (process, {rank: (stdout, stderr)})."""
    command = check.launch_command(tmp / "logs", nproc, *argv, "--device", "cpu", script=SCRIPT)
    proc = subprocess.run(
        command, cwd=ROOT, env=check.launch_env(fault), capture_output=True, text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )  # fmt: skip
    return proc, check.rank_logs(tmp / "logs", nproc)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    argv = [*SMALL, "--prefetch", "--strict", "--traces-dir", str(tmp / "traces")]
    proc, logs = torchrun_launch(tmp, *argv)
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[0][1][-3000:]
    return tmp / "traces" / "07_fsdp_train", logs


def rank_trace(folder: Path, rank: int) -> Path:
    return folder / f"{STEM}_rank{rank}.json"


# --- a real run: two gloo ranks, --strict -------------------------------------------------


@pytest.mark.slow
def test_one_trace_per_rank_with_distributed_info_and_only_rank0_table(run):
    folder, _ = run
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{STEM}_rank0.txt", rank_trace(folder, 0).name, rank_trace(folder, 1).name]
    )  # and no temporary file or folder left
    for rank in range(2):
        info = json.loads(rank_trace(folder, rank).read_text())["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)


@pytest.mark.slow
def test_every_block_gathers_in_forward_and_backward_and_reduces_in_backward(run):
    """Counted from the raw events: per recorded step and rank, FSDP's all-gather annotation
    for each group in the forward and again in the backward, its reduce in the backward, each
    around the c10d op that issued the collective."""
    folder, _ = run
    for rank in range(2):
        events = read_trace(rank_trace(folder, rank))
        recorded = steps(events)
        assert [s["name"] for s in recorded] == [f"ProfilerStep#{i}" for i in (2, 3, 4)]
        for step in recorded:
            within = inside(step, events)
            phases = {e["name"]: e for e in within if e["name"] in lesson.PHASES}
            for phase, wanted in (
                ("forward", {"FSDP::all_gather": GROUPS, "c10d::_allgather_base_": [""] * 3}),
                ("backward", {"FSDP::all_gather": GROUPS, "c10d::_allgather_base_": [""] * 3,
                              "FSDP::post_backward_reduce": GROUPS,
                              "c10d::_reduce_scatter_base_": [""] * 3}),
            ):  # fmt: skip
                names = [e["name"] for e in inside(phases[phase], within)]
                for op, groups in wanted.items():
                    seen = [re.fullmatch(rf"{op}(?: \((.*)\))?", n) for n in names]
                    labels = sorted(m.group(1) or "" for m in seen if m)
                    assert labels == sorted(groups), (rank, phase, op, labels)
            optimizer = [e["name"] for e in inside(phases["optimizer"], within)]
            assert not any("c10d::" in n for n in optimizer)
        # gloo carries them out on threads of its own
        assert {"gloo:all_gather", "gloo:all_reduce"} <= {e["name"] for e in events}


@pytest.mark.slow
def test_rank0_speaks_and_the_others_are_silent(run):
    _, logs = run
    out = logs[0][0]
    assert re.search(r"correctness: loss \S+ vs float32 reference .*: ok", out)
    assert "Self CPU time total" in out and "FSDP::" in out  # the table
    for rank in range(2):
        block = out.split(f"rank {rank}: collectives per step, expected vs seen")[1]
        assert re.search(r"ok +forward +all-gather +3 per step +seen: 3", block)
        assert re.search(r"ok +backward +reduce-scatter +3 per step +seen: 3", block)
    assert "MISMATCH" not in out and "all as expected" in out
    assert "2 of 2 ranks, gloo" in out and "all-gather: 18 in all" in out  # the reading
    assert logs[1] == ("", "")


@pytest.mark.slow
def test_four_ranks_shard_gather_and_reduce_alike(tmp_path):
    """N > 2: four gloo ranks, resharding off (no all-gather in the backward): every rank
    checked, its trace published, its collectives counted; rank 0 reads all four."""
    argv = [*SMALL, "--no-reshard-after-forward", "--strict", "--traces-dir", str(tmp_path)]
    proc, logs = torchrun_launch(tmp_path, *argv, nproc=4)
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[0][1][-3000:]
    out = logs[0][0]
    for rank in range(4):
        block = out.split(f"rank {rank}: collectives per step, expected vs seen")[1]
        assert re.search(r"ok +forward +all-gather +3 per step +seen: 3", block)
        assert re.search(r"ok +backward +all-gather +0 per step +seen: 0", block)
        assert re.search(r"ok +backward +reduce-scatter +3 per step +seen: 3", block)
    assert "4 of 4 ranks, gloo" in out and "all as expected" in out
    traces = sorted((tmp_path / "07_fsdp_train").glob("*_rank*.json"))
    assert [json.loads(t.read_text())["distributedInfo"]["rank"] for t in traces] == [0, 1, 2, 3]


@pytest.mark.slow
def test_the_reading_tells_the_collectives_apart_and_sizes_them(run):
    """The reader on real gloo FSDP traces: collectives by kind (not all called all-reduces),
    each sized by its whole buffer: a block's reduce-scatter (fp32) moves twice the bytes of
    its all-gather (bf16), the mixed-precision policy at work."""
    folder, _ = run
    stem = folder / STEM
    result = read_run(stem, runs_at(stem)[stem])
    assert result["problems"] == [] and result["backend"] == "gloo" and result["world"] == 2
    kinds = {k["kind"]: k for k in result["by_kind"]}
    assert set(kinds) == {"all-gather", "reduce-scatter"}
    assert kinds["all-gather"]["count"] == 3 * 2 * 3  # 3 steps, forward and backward, 3 groups
    assert kinds["reduce-scatter"]["count"] == 3 * 3
    assert kinds["reduce-scatter"]["bytes"] == 2 * kinds["all-gather"]["bytes"]
    for row in result["per_rank"]:
        assert row["collectives_per_step"] == [9] and row["comm_us"] > 0
    text = ranks_text.text(result)
    assert "collectives: 9 per step, of 2 kinds" in text  # no size shared by both kinds
    assert "all-gather: 18 in all" in text and "reduce-scatter: 9 in all" in text
    for rank in range(2):  # the lesson's count by phase, through the reader
        trace = trace_reader.load(rank_trace(folder, rank))
        _, per_phase = lesson.expectation(LAYERS, reshard=True, world=2)
        assert tracereader.collectives_by_phase(trace, lesson.PHASES) == per_phase


# --- failures: one line from rank 0, every rank out, nothing left --------------------------


@pytest.mark.slow
def test_a_failing_rank_stops_every_rank_and_leaves_nothing(tmp_path):
    traces = tmp_path / "traces"
    proc, logs = torchrun_launch(tmp_path, *SMALL, "--traces-dir", str(traces), fault="1:init")
    assert proc.returncode != 0
    assert logs[0][1].splitlines() == [
        f"error: rank 1 of 2: InjectedFault: failure staged at 'init' by {torchrun.FAULT_ENV}"
    ]
    assert logs[1] == ("", "")
    codes = check.exit_codes(proc.stderr)
    assert sorted(codes) == [0, 1] and all(codes.values()), proc.stderr[-2000:]
    assert check.files_under(traces) == []


# --- in-process: the plan, the refusals, resharding ----------------------------------------


def _in_process(monkeypatch, *argv: str, rank: int | None, world: int = 2):
    return torchrun_in_process(monkeypatch, lesson.main, *argv, rank=rank, world=world)


@pytest.mark.parametrize(
    ("flags", "rank", "line"),
    [
        (["--dim", "30", "--heads", "2"], 0, "error: --dim 30 does not shard over 4 ranks"),
        (["--dim", "30", "--heads", "2"], 1, None),  # rank 0 says it for every rank
        (["--vocab", "66"], 0, "error: --vocab 66 does not shard over 4 ranks"),
        (["--dtype", "fp16"], 0, "error: 07_fsdp_train.py takes --dtype bf16 or fp32"),
        (["--heads", "3"], 0, "error: --heads 3 does not divide --dim 32"),
    ],
)
def test_bad_input_is_one_line_from_rank0(flags, rank, line, monkeypatch, tmp_path, capsys):
    argv = [*SMALL, *flags, "--traces-dir", str(tmp_path)]
    code, hidden = _in_process(monkeypatch, *argv, rank=rank, world=4)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    if line is None:
        assert captured.err == "" and hidden == ""
    else:
        assert captured.err.startswith(line) and len(captured.err.splitlines()) == 1
    assert check.files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("device", "gpus", "nproc", "what"),
    [("auto", 0, 2, "2 CPU ranks (gloo)"), ("auto", 1, 1, "1 GPU rank (NCCL)")],
)
def test_alone_the_lesson_decides_what_torchrun_to_start(device, gpus, nproc, what, monkeypatch):
    """No process started: run without torchrun, the lesson names its script and --device;
    one GPU is one rank (the N = 1 baseline), a CPU two gloo ranks."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    with pytest.raises(torchrun.NoLauncher) as missing:
        lesson.main([*SMALL, "--device", device])
    assert (missing.value.script, missing.value.device) == (SCRIPT, device)
    plan = torchrun.plan_self_launch(SCRIPT, SMALL, device=device, gpus=gpus, cores=2, env={})
    assert plan.what == what
    assert plan.shown.startswith(f"uv run torchrun --standalone --nproc-per-node {nproc} {SCRIPT}")
    assert plan.command[3:6] == ["--standalone", "--nproc-per-node", str(nproc)]
    assert plan.env == {"OMP_NUM_THREADS": str(2 // nproc)}


@pytest.mark.slow
def test_alone_it_starts_two_gloo_ranks_and_trains_on_them(tmp_path):
    proc = alone(tmp_path, *SMALL, "--prefetch", "--strict", script=SCRIPT)
    out, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    started = "no launcher: starting 2 CPU ranks (gloo): uv run torchrun --standalone "
    assert out.startswith(f"{started}--nproc-per-node 2 {SCRIPT} --batch 1")
    assert "OMP_NUM_THREADS" not in err  # torchrun's banner: the child's variable was set
    assert "correctness: loss" in out and "(2 of 2 ranks, gloo, CPU only" in out
    wanted = [f"{STEM}_rank0.json", f"{STEM}_rank0.txt", f"{STEM}_rank1.json"]
    assert check.files_under(tmp_path / "07_fsdp_train") == wanted


@pytest.mark.slow
def test_alone_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C as a terminal sends it, to the foreground process group: the lesson alone
    reaches torchrun (in a session of its own) and through it every rank, once each."""
    proc = alone(tmp_path, *SMALL, "--wait", "1000", script=SCRIPT)  # time to interrupt in
    try:
        while "correctness" not in (line := proc.stdout.readline()):
            assert line, proc.stderr.read()[-3000:]  # the run ended before Ctrl-C
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    # its own interrupt, or rank 1's when a broken collective reached rank 0 first
    assert re.fullmatch(r"error: (rank 1 of 2: )?interrupted \(Ctrl-C\)\n", err)
    assert check.files_under(tmp_path) == []


def test_more_processes_than_gpus_is_refused(monkeypatch, tmp_path, capsys):
    """Two processes on a machine with one GPU: one line from rank 0, before any work."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    argv = [*SMALL, "--device", "cuda", "--traces-dir", str(tmp_path)]
    code, _ = _in_process(monkeypatch, *argv, rank=0)
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: 2 processes on this machine but 1 GPU(s)")
    assert check.files_under(tmp_path) == []


@pytest.fixture
def fake_two_ranks():
    """torch's fake process group: this process is rank 0 of 2; collectives are issued (the
    c10d ops, FSDP's hooks) and move nothing."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("reshard", [True, False])
def test_no_reshard_after_forward_drops_the_backward_all_gathers(reshard, fake_two_ranks, tmp_path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.profiler import profile

    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = lesson.shard(
        TinyLM(64, 32, 64, 2, LAYERS), mesh, param_dtype=torch.bfloat16, reshard=reshard,
        prefetch=False,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters())
    tokens, targets = torch.randint(0, 64, (2, 1, 8))
    lesson.train_step(model, optimizer, tokens, targets)
    with profile() as prof:  # no schedule: the one step is the recorded window
        lesson.train_step(model, optimizer, tokens, targets)
    prof.export_chrome_trace(str(tmp_path / "rank0.json"))
    seen = tracereader.collectives_by_phase(
        trace_reader.load(tmp_path / "rank0.json"), lesson.PHASES
    )
    assert seen["forward"] == Counter({"all-gather": LAYERS + 1})
    assert seen["backward"]["reduce-scatter"] == LAYERS + 1
    assert seen["backward"]["all-gather"] == (LAYERS + 1 if reshard else 0)
    assert seen == lesson.expectation(LAYERS, reshard=reshard, world=2)[1]


def test_the_plan_shards_every_block_and_the_root_over_the_ranks(fake_two_ranks):
    """L + 1 FSDP groups, each parameter split in two along its first dim: what the
    collectives per phase (one all-gather and one reduce-scatter per group) follow from."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (2,))
    model = lesson.shard(
        TinyLM(64, 32, 64, 2, LAYERS), mesh, param_dtype=torch.bfloat16, reshard=True,
        prefetch=True,
    )  # fmt: skip
    assert isinstance(model, FSDPModule)
    assert all(isinstance(block, FSDPModule) for block in model.blocks)
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor) and p.placements == (Shard(0),), name
        assert p.to_local().shape[0] == -(-p.shape[0] // 2), name  # this rank's half


@pytest.mark.slow
def test_one_rank_says_fsdp2_skips_its_collectives_and_holds_to_it(tmp_path):
    """N = 1, the compute baseline: the lesson says FSDP2 gathers and reduces nothing, and
    --strict holds it to that on the trace (no c10d collective in any step)."""
    argv = [*SMALL, "--strict", "--traces-dir", str(tmp_path)]
    proc, logs = torchrun_launch(tmp_path, *argv, nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[0][1][-3000:]
    assert "one rank: FSDP2 skips its all-gathers and reduce-scatters" in logs[0][0]
    (trace,) = (tmp_path / "07_fsdp_train").glob("*_rank0.json")
    events = read_trace(trace)
    assert steps(events) and not [e for e in events if e["name"].startswith("c10d::")]


# --- the reader's collective kinds on another project's real FSDP-era trace -----------------

NEGATIVE_QUEUE = EXTERNAL_TRACES / "hta" / "negative_queue_rank0.json.gz"


@pytest.mark.slow  # another project's trace
@pytest.mark.skipif(not NEGATIVE_QUEUE.is_file(), reason="no ../shared/external-traces")
def test_collective_kinds_come_from_the_issuing_op_not_the_kernel_name():
    """HTA's 16-rank A100 trace: NCCL runs every collective there as ncclKernel_SendRecv_*;
    the ops that issued them (nccl:_all_gather_base, nccl:_reduce_scatter_base, ...) say what
    each one is, and the bus factor follows the kind."""
    result = read_run(NEGATIVE_QUEUE, {0: NEGATIVE_QUEUE})
    counts = {k["kind"]: k["count"] for k in result["by_kind"]}
    assert counts == {"all-gather": 10, "reduce-scatter": 10, "all-reduce": 10, "all-to-all": 45}


H100_ONE_RANK = ROOT / "tests/fixtures/h100/fsdp_train"


def test_one_rank_guess_holds_on_a_real_h100_run():
    """The one-rank guess against the compute baseline recorded on an H100 (fixture: 8 blocks,
    --batch 4 --seq 2048 --dim 2048 --hidden 5632 --heads 16 --vocab 32000, eager). On a GPU
    autograd runs the backward on a thread of its own, so FSDP's post-backward reduce is
    annotated there, not on the step's thread: the guess must find it all the same."""
    (path,) = H100_ONE_RANK.glob("*_fsdp1_eager_rank0.json.gz")
    trace = trace_reader.load(path)
    expect, want = lesson.expectation(8, reshard=True, world=1)
    ok, lines = lesson.check_rank(trace, expect, want)
    assert ok, lines
    step = trace.steps[-1]
    reduce = "FSDP::post_backward_reduce"
    assert reduce not in step.op_names()  # only another thread holds it, as recorded
    assert reduce in step.op_names_any_thread()
    assert trace.device is not None and not any(
        item.klass.cls == "collective" for s in trace.steps for item in s.gpu
    )
