"""05_tp_mlp.py for real: gloo ranks under torchrun on the CPU, small shapes. What a user relies
on: one trace per rank with the profiler's distributedInfo, the all-reduce in every recorded
step, rank 0 speaking for all, and the multi-rank reading, at N = 2 and N = 4; a failure on any
rank, or Ctrl-C, is one line from rank 0, every rank exits non-zero, nothing is left behind,
nothing hangs.

Each torchrun launch costs 10-30 s on a 2-core machine (every rank imports torch), so the
launches are few, shared, and marked slow; the rest runs in-process. The reader's GPU side is
checked on a synthetic 2-rank GPU trace pair built here and on real H200 ranks (tests/fixtures/).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from common import outputs, torchrun
from tests.helpers import (
    ROOT,
    inside,
    load_script,
    read_trace,
    steps,
    torchrun_in_process,
)
from tools import tp_scaling
from tools.dev.ranks import torchrun_check
from tracereader import caches
from tracereader.analyses.linkcurve import LinkCurve
from tracereader.commands import compare, explain
from tracereader.judge import expectations
from tracereader.reading import read_run
from tracereader.render import ranks as ranks_text
from tracereader.trace import load as trace_reader
from tracereader.trace.runs import runs_at

SMALL = ["--batch", "2", "--seq", "4", "--dim", "16", "--hidden", "32"]
RANKS = {"eager": 4, "compile": 2}  # N > 2 eager, N = 2 compiled: every launch costs
LAUNCH_TIMEOUT_S = 240  # a hung launch fails the test instead of hanging CI


check = torchrun_check  # launching, and reading what a launch left: as on the GPUs
files_under, exit_codes = check.files_under, check.exit_codes


def launch_command(tmp: Path, *argv: str, nproc: int = 2) -> list[str]:
    # gloo on the CPU, also on a machine with GPUs: the same traces everywhere
    return check.launch_command(tmp / "logs", nproc, *argv, "--device", "cpu")


def torchrun_launch(tmp: Path, *argv: str, nproc: int = 2, fault: str | None = None):
    """Run a launch to its end. Returns (process, {rank: (stdout, stderr)})."""
    proc = subprocess.run(
        launch_command(tmp, *argv, nproc=nproc),
        cwd=ROOT,
        env=check.launch_env(fault),
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    return proc, check.rank_logs(tmp / "logs", nproc)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """The link cache a test reads or writes is its own, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def launched(tmp: Path, mode: str, *flags: str):
    argv = [*SMALL, *flags, "--traces-dir", str(tmp / "traces")]
    proc, logs = torchrun_launch(tmp, *argv, nproc=RANKS[mode])
    assert proc.returncode == 0, proc.stderr[-3000:] + logs[0][1][-3000:]
    return tmp / "traces" / "05_tp_mlp", logs


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return launched(tmp_path_factory.mktemp("tp_eager"), "eager", "--bench")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return launched(tmp_path_factory.mktemp("tp_compile"), "compile", "--compile")


def stem(mode: str) -> str:
    return f"b2_s4_d16_h32_bf16_tp{RANKS[mode]}_{mode}_cpu"


def rank_trace(folder: Path, mode: str, rank: int) -> Path:
    return folder / f"{stem(mode)}_rank{rank}.json"


# --- a real run: four ranks eager, two compiled ---------------------------------------------


@pytest.mark.slow
def test_one_trace_per_rank_with_distributed_info_and_only_rank0_table(eager):
    folder, _ = eager
    n = RANKS["eager"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"{stem('eager')}_rank0.txt"] + [rank_trace(folder, "eager", r).name for r in range(n)]
    )  # and no temporary file or folder left
    for rank in range(n):
        info = json.loads(rank_trace(folder, "eager", rank).read_text())["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, n)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_every_recorded_step_holds_the_all_reduce(mode, eager, compiled):
    folder = {"eager": eager, "compile": compiled}[mode][0]
    issue = "_c10d_functional::all_reduce" if mode == "eager" else "_c10d_functional::all_reduce_"
    for rank in range(RANKS[mode]):
        events = read_trace(rank_trace(folder, mode, rank))
        recorded = steps(events)
        assert [s["name"] for s in recorded] == [f"ProfilerStep#{i}" for i in (2, 3, 4)]
        for step in recorded:
            names = [e["name"] for e in inside(step, events)]
            assert "tp_mlp_fwd" in names
            assert names.index(issue) < names.index("c10d::allreduce_")
            assert names.index("c10d::allreduce_") < names.index("_c10d_functional::wait_tensor")
            # eager: three aten::linear, each an aten::mm on DTensors around one on the shards
            count = ("aten::linear", 3) if mode == "eager" else ("aten::mm", 3)
            assert names.count(count[0]) == count[1]
        # gloo reduces on a thread of its own: its annotation sits beside the steps
        assert any(e["name"] == "gloo:all_reduce" for e in events)


@pytest.mark.slow
def test_rank0_speaks_and_the_others_are_silent(eager):
    _, logs = eager
    out = logs[0][0]
    assert "correctness: relative error vs float32 reference" in out and ": ok" in out
    assert "tp_mlp_fwd" in out and "c10d::allreduce_" in out  # the table
    assert "all as expected" in out
    assert "4 of 4 ranks, gloo" in out and "skew of the step starts" in out  # the reading
    assert all(logs[r] == ("", "") for r in range(1, RANKS["eager"]))
    # what tools/tp_scaling.py takes from each run: --bench's line, the traces' reading
    scaling = tp_scaling
    summary = scaling.parse_summary(out)
    assert summary["ranks"] == 4 and summary["forward_us"] > 0 and summary["allreduce_us"] > 0
    traced = scaling.traced(out)
    assert traced["comm_us"] > 0 and traced["exposed_us"] > 0


@pytest.mark.slow
def test_compiled_run_is_as_expected(compiled):
    _, logs = compiled
    out = logs[0][0]
    assert "compile: first call took" in out and "all as expected" in out
    assert "ok        CPU op _c10d_functional::all_reduce_" in out
    assert logs[1] == ("", "")


@pytest.mark.slow
def test_the_multi_rank_reading_of_cpu_traces(eager):
    folder, _ = eager
    n = RANKS["eager"]
    runs = runs_at(folder)
    (found,) = runs
    assert found.name == stem("eager") and sorted(runs[found]) == list(range(n))
    result = read_run(found, runs[found])
    assert result["world"] == n and result["backend"] == "gloo" and result["device"] is None
    assert result["problems"] == [] and result["steps_matched"] == 3
    assert len(result["per_rank"]) == n
    for row in result["per_rank"]:
        assert row["comm_us"] > 0 and row["compute_us"] > 0
        assert row["exposed_us"] == row["comm_us"]  # on a CPU trace the thread waits in it
        assert row["collectives_per_step"] == [1]
    assert result["skew_us"]["median"] >= 0 and result["straggler"]["rank"] in range(n)
    coll = result["collective"]
    assert coll["bytes"] == 2 * 4 * 16 * 2 and coll["bus_GBps"] is None  # bf16 [2, 4, 16]
    reading = ranks_text.text(result)
    assert "skew of the step starts" in reading and "no bandwidth from a CPU trace" in reading


@pytest.mark.slow
def test_explain_and_compare_take_rank_folders(eager, compiled, capsys):
    folder, _ = eager
    assert explain.main([str(folder)]) == 0
    assert "4 of 4 ranks, gloo" in capsys.readouterr().out
    assert explain.main([str(folder), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"][0]["world"] == 4
    assert sorted(t["rank"] for t in data["traces"]) == [0, 1, 2, 3]
    a = folder / stem("eager")
    b = compiled[0] / stem("compile")
    assert compare.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "exposed communication" in out and "kernel by kernel, rank 0" in out
    assert compare.main([str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["b"]["ranks"] == 2
    # a single trace still goes the usual way
    assert explain.main([str(rank_trace(folder, "eager", 0))]) == 0
    assert "CPU dispatch chain" in capsys.readouterr().out


def test_scaling_tool_plans_any_n_the_shapes_split_over(capsys):
    scaling = tp_scaling
    assert scaling.main(["out", "--dry-run", "--ranks", "1,2"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert len(commands) == 8  # 2 shapes x 2 modes x 2 rank counts
    assert all("torch.distributed.run --standalone --nproc-per-node" in c for c in commands)
    assert any("--dim 2048 --hidden 9216" in c and "--compile" in c for c in commands)
    assert scaling.main(["out", "--dry-run", "--ranks", "6,3", "--modes", "eager"]) == 0
    commands = capsys.readouterr().out.splitlines()
    assert [c.split("--nproc-per-node ")[1].split()[0] for c in commands] == ["3", "6"] * 2
    for ranks_flag, refusal in [("5", "does not split over 5"), ("0", "at least 1")]:
        with pytest.raises(SystemExit) as exit_:
            scaling.main(["out", "--dry-run", "--ranks", ranks_flag])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and refusal in err and len(err.splitlines()) == 1


# --- failures: one line from rank 0, every rank out, nothing left --------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nproc", "fault"),
    [(2, "1:init"), (4, "2:export")],
    ids=["rank1-of-2-fails-while-rank0-is-in-a-collective", "rank2-of-4-fails-after-others-wrote"],
)
def test_a_failing_rank_stops_every_rank_and_leaves_nothing(nproc, fault, tmp_path):
    traces = tmp_path / "traces"
    args = ["--batch", "2", "--seq", "4", "--dim", "16", "--hidden", "32"]
    proc, logs = torchrun_launch(
        tmp_path, *args, "--traces-dir", str(traces), nproc=nproc, fault=fault
    )
    assert proc.returncode != 0
    failing, where = fault.split(":")
    assert logs[0][1].splitlines() == [
        f"error: rank {failing} of {nproc}: InjectedFault: failure staged at '{where}' by "
        f"{torchrun.FAULT_ENV}"
    ]
    assert all(logs[r] == ("", "") for r in range(1, nproc))  # rank 0 speaks for every rank
    codes = exit_codes(proc.stderr)
    assert sorted(codes) == list(range(nproc)) and all(codes.values()), proc.stderr[-2000:]
    # torchrun's closing report names the rank that failed first, with its traceback
    root = re.search(r"Root Cause.*?rank\s*:\s*(\d+).*?=====", proc.stderr, re.S)
    assert root and root.group(1) == failing and "InjectedFault" in root.group(0)
    assert files_under(traces) == []  # no trace, no temporary folder, no empty folder


@pytest.mark.slow
def test_a_hung_rank_holds_the_others_only_until_the_timeout(tmp_path):
    """Rank 1 stops answering once it has written its trace: rank 0 gives up at --timeout,
    says so in one line, and torchrun stops rank 1; nothing is published, nothing is left."""
    traces = tmp_path / "traces"
    argv = [*SMALL, "--timeout", "5", "--traces-dir", str(traces)]
    start = time.monotonic()
    proc, logs = torchrun_launch(tmp_path, *argv, fault="1:export:hang")
    assert proc.returncode != 0
    assert re.fullmatch(r"error: a rank did not answer within --timeout: .*\n", logs[0][1])
    assert logs[1] == ("", "")
    codes = exit_codes(proc.stderr)
    assert sorted(codes) == [0, 1] and all(codes.values()), proc.stderr[-2000:]
    assert files_under(traces) == []
    assert time.monotonic() - start < LAUNCH_TIMEOUT_S / 2  # the timeout, not the test's


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_with_one_line_and_leaves_nothing(tmp_path):
    """Ctrl-C in a terminal reaches torchrun, which passes SIGINT on to every rank: here while
    they profile (a long schedule), once rank 0 has printed its correctness line."""
    traces = tmp_path / "traces"
    argv = launch_command(tmp_path, *SMALL, "--active", "2000", "--traces-dir", str(traces))
    code, report, after = check.interrupted(argv, check.launch_env(), tmp_path / "logs")
    assert code != 0
    assert after < 25, report[-2000:]  # every rank stopped by itself: torchrun kills at 30 s
    logs = check.rank_logs(tmp_path / "logs", 2)
    # its own interrupt, or rank 1's when a broken collective reached rank 0 first
    assert re.fullmatch(r"error: (rank 1 of 2: )?interrupted \(Ctrl-C\)\n", logs[0][1])
    assert logs[1] == ("", "")
    assert files_under(traces) == []


def _in_process(monkeypatch, *argv: str, rank: int | None, world: int = 2):
    return torchrun_in_process(
        monkeypatch, load_script("05_tp_mlp").main, *argv, rank=rank, world=world
    )


def alone(tmp: Path, *argv: str, script: str = "05_tp_mlp.py") -> subprocess.Popen:
    """`python 05_tp_mlp.py ...` with no launcher, as `uv run 05_tp_mlp.py` starts it, in a
    session of its own (as in a terminal); no OMP_NUM_THREADS (the self-launch sets it), stdout
    unbuffered."""
    env = {k: v for k, v in check.launch_env().items() if k != "OMP_NUM_THREADS"}
    return subprocess.Popen(
        [sys.executable, script, *argv, "--device", "cpu", "--traces-dir", str(tmp)],
        cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=check.default_signals,
    )  # fmt: skip


STARTED = "no launcher: starting 2 CPU ranks (gloo): uv run torchrun --standalone "
STARTED += "--nproc-per-node 2 05_tp_mlp.py --batch 2 --seq 4"


@pytest.mark.slow
def test_alone_it_starts_two_gloo_ranks_and_runs_them_to_the_end(tmp_path):
    proc = alone(tmp_path, *SMALL)
    out, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    assert proc.returncode == 0, err[-3000:]
    assert out.splitlines()[0].startswith(STARTED)  # the real command, said first
    assert "OMP_NUM_THREADS" not in err  # torchrun's banner: the child's variable was set
    assert "(2 of 2 ranks, gloo, CPU only" in out and "all as expected" in out
    tag = "b2_s4_d16_h32_bf16_tp2_eager_cpu"
    wanted = [f"{tag}_rank0.json", f"{tag}_rank0.txt", f"{tag}_rank1.json"]
    assert files_under(tmp_path / "05_tp_mlp") == wanted  # one trace per rank, rank 0's table


@pytest.mark.slow
def test_alone_bad_input_found_by_the_ranks_keeps_its_exit_code_and_one_line(tmp_path):
    """torchrun's own exit code is 1 for any failed rank: the self-launch passes on rank 0's
    (2, bad input) and none of torchrun's report."""
    proc = alone(tmp_path, "--batch", "2", "--seq", "4", "--dim", "16", "--hidden", "33")
    out, err = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    assert proc.returncode == 2 and out.startswith("no launcher: starting 2 CPU ranks")
    assert err == "error: --hidden 33 does not split over 2 ranks: choose a multiple of 2 " \
        "(each rank keeps hidden/N columns of gate and up)\n"  # fmt: skip
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("device", "gpus", "nproc", "what"),
    [
        ("auto", 0, 2, "2 CPU ranks (gloo)"),
        ("cpu", 4, 2, "2 CPU ranks (gloo)"),
        ("auto", 1, 1, "1 GPU rank (NCCL)"),
        ("cuda", 2, 2, "2 GPU ranks (NCCL)"),
        ("auto", 8, 2, "2 GPU ranks (NCCL)"),
    ],
)
def test_alone_the_lesson_decides_what_torchrun_to_start(device, gpus, nproc, what, monkeypatch):
    """No process started: the lesson's main, run without torchrun, names its script and
    --device; plan_self_launch turns them into the torchrun command for this machine."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT)
    argv = [*SMALL, "--device", device]
    with pytest.raises(torchrun.NoLauncher) as missing:
        load_script("05_tp_mlp").main(argv)
    assert (missing.value.script, missing.value.device) == ("05_tp_mlp.py", device)
    plan = torchrun.plan_self_launch(
        "05_tp_mlp.py", argv, device=device, gpus=gpus, cores=8, env={"PATH": "/bin"}
    )
    flags = ["--standalone", "--nproc-per-node", str(nproc)]
    assert plan.what == what
    assert plan.command[:2] == [sys.executable, "-c"]
    assert plan.command[3:] == [*flags, str(ROOT / "05_tp_mlp.py"), *argv]
    assert plan.shown == " ".join(["uv run torchrun", *flags, "05_tp_mlp.py", *argv])
    assert plan.env == {"PATH": "/bin", "OMP_NUM_THREADS": str(8 // nproc)}
    mine = {"OMP_NUM_THREADS": "3"}
    kept = torchrun.plan_self_launch(
        "05_tp_mlp.py", [], device=device, gpus=gpus, cores=8, env=mine
    )
    assert kept.env == {"OMP_NUM_THREADS": "3"}  # the user's own is left alone


def test_alone_cuda_without_a_gpu_is_refused_before_starting_anything():
    with pytest.raises(torchrun.UsageError, match="--device cuda was asked for, but PyTorch"):
        torchrun.plan_self_launch("05_tp_mlp.py", [], device="cuda", gpus=0, cores=2, env={})


@pytest.mark.parametrize("rank", [0, 1])
def test_hidden_that_does_not_split_over_the_ranks(rank, monkeypatch, tmp_path, capsys):
    argv = ["--batch", "2", "--seq", "4", "--dim", "16", "--hidden", "33"]
    code, hidden = _in_process(monkeypatch, *argv, "--traces-dir", str(tmp_path), rank=rank)
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    line = "error: --hidden 33 does not split over 2 ranks: choose a multiple of 2"
    if rank == 0:
        assert captured.err.startswith(line) and len(captured.err.splitlines()) == 1
    else:
        assert captured.err == "" and hidden == ""  # rank 0 says it for every rank
    assert files_under(tmp_path) == []


def test_more_processes_than_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    args = load_script("05_tp_mlp").parse([*SMALL])
    launch = torchrun.Launch(rank=0, world=2, local_rank=0, local_world=2)
    with pytest.raises(torchrun.UsageError, match="2 processes on this machine but 1 GPU"):
        torchrun.resolve(args, launch)


def test_agreeing_publish_renames_nothing_unless_every_rank_wrote(tmp_path):
    final = tmp_path / "run" / "t_rank0.json"
    told = []

    def refuse(err):
        told.append(err)
        if err is None:
            raise torchrun.RankFailed("rank 1 failed: OSError: disk full")

    with pytest.raises(torchrun.RankFailed), outputs.publishing(final, agree=refuse) as (tmp,):
        tmp.write_text("{}")
    assert told == [None] and files_under(tmp_path) == []

    with pytest.raises(OSError), outputs.publishing(final, agree=told.append) as (tmp,):
        raise OSError("export failed")
    assert isinstance(told[-1], OSError) and files_under(tmp_path) == []

    with outputs.publishing(final, agree=lambda err: None) as (tmp,):
        tmp.write_text("{}")
    assert json.loads(final.read_text()) == {"torch_version": torch.__version__}  # stamped


def test_the_plan_splits_gate_and_up_by_columns_and_down_by_rows():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    lesson = load_script("05_tp_mlp")
    plan = {name: type(style) for name, style in lesson.PLAN.items()}
    assert plan == {
        "gate_proj": ColwiseParallel,
        "up_proj": ColwiseParallel,
        "down_proj": RowwiseParallel,
    }
    one = lesson.expectation("eager", "gloo", 1)
    assert "c10d::allreduce_" in one.cpu_absent and one.gpu["collective"] == 0
    nccl = lesson.expectation("eager", "nccl", 2)
    assert "record_param_comms" in nccl.cpu_present and nccl.gpu["collective"] == 1


# --- the reader's GPU side, on a synthetic 2-rank GPU pair ---------------------------------

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_coopA_NNT"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
TOKENS, DIM = 8192, 768


def gpu_rank_trace(path: Path, rank: int, *, late_us: float) -> None:
    """Two recorded steps of one rank: 3 GEMMs and a GeLU on stream 7, then the all-reduce on
    NCCL's stream 20, launched under nccl:all_reduce (which recorded its input). This rank
    starts each step `late_us` after t0; the all-reduce ends when the later rank arrives."""
    events, corr = [], 0

    def cpu(name, ts, dur, cat="cpu_op", **args):
        events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
             "args": args}
        )  # fmt: skip

    def launch(ts, kernel, start, dur, stream=7, runtime="cudaLaunchKernel"):
        nonlocal corr
        corr += 1
        cat = "cuda_driver" if runtime.startswith("cu") and "Ex" in runtime else "cuda_runtime"
        events.append(
            {"ph": "X", "cat": cat, "name": runtime, "pid": 1, "tid": 1, "ts": ts, "dur": 4,
             "args": {"correlation": corr}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": stream, "ts": start,
             "dur": dur, "args": {"correlation": corr, "device": rank, "stream": stream}}
        )  # fmt: skip

    for k, t0 in enumerate((1000.0, 3000.0)):
        s = t0 + late_us
        cpu(f"ProfilerStep#{k + 2}", s, 900, cat="user_annotation")
        for i in range(3):
            cpu("aten::mm", s + 10 + 20 * i, 15)
            launch(s + 12 + 20 * i, GEMM, s + 100 + 40 * i, 40)
        cpu("aten::gelu", s + 80, 10)
        launch(s + 82, GELU, s + 220, 30)
        reduced = {"Input Dims": [[TOKENS, DIM]], "Input type": ["c10::BFloat16"]}
        cpu("_c10d_functional::all_reduce", s + 100, 60, **reduced)
        cpu("c10d::allreduce_", s + 110, 45)
        cpu("record_param_comms", s + 112, 40)
        cpu("nccl:all_reduce", s + 114, 30, cat="user_annotation", **reduced)
        # NCCL starts when GeLU is half done (overlap 15 us); both ranks finish at t0 + 330.
        start = s + 235
        launch(s + 120, NCCL, start, t0 + 330 - start, stream=20, runtime="cuLaunchKernelEx")
        cpu("_c10d_functional::wait_tensor", s + 170, 5)
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": "NVIDIA H200"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))


def test_gpu_reading_comm_exposed_waits_and_bus_bandwidth(tmp_path):
    gpu_rank_trace(tmp_path / "run_rank0.json.gz", 0, late_us=0)
    gpu_rank_trace(tmp_path / "run_rank1.json.gz", 1, late_us=50)  # the straggler
    runs = runs_at(tmp_path / "run")
    result = read_run(tmp_path / "run", runs[tmp_path / "run"])
    assert result["problems"] == [] and result["device"] == "NVIDIA H200"
    r0, r1 = result["per_rank"]
    assert r0["compute_us"] == pytest.approx(3 * 40 + 30)
    assert r0["comm_us"] == pytest.approx(95) and r1["comm_us"] == pytest.approx(45)
    assert r0["exposed_us"] == pytest.approx(95 - 15) and r1["exposed_us"] == pytest.approx(30)
    assert r0["wait_us"] == pytest.approx(50) and r1["wait_us"] == pytest.approx(0)
    assert result["skew_us"]["max"] == pytest.approx(50)
    # rank 1's host started everything 50 us late: its host, not its GPU, is the late one
    assert result["straggler"] == {"rank": 1, "steps": 2, "late": "host"}
    coll = result["collective"]
    assert coll["bytes"] == TOKENS * DIM * 2 and coll["transfer_us"] == pytest.approx(45)
    busbw = 2 * (2 - 1) / 2 * TOKENS * DIM * 2 / 45e-6 / 1e9
    assert coll["bus_GBps"] == pytest.approx(busbw) and coll["link_GBps"] is None
    assert "not measured at this size on this machine yet" in ranks_text.text(result)
    # with the link's curve measured, the reading compares against it at the message's size
    again = read_run(tmp_path / "run", runs[tmp_path / "run"], link=FLAT_400)
    assert again["collective"]["share_of_link"] == pytest.approx(busbw / 400)
    assert "of the link's ceiling at its size and kind" in ranks_text.text(again)


# a link that gives every all-reduce from 1 MiB to 1 GiB 400 GB/s of bus bandwidth
FLAT_400 = LinkCurve("NVIDIA H200", "nccl", 2, "test",
                     {"all-reduce": ((2**20, 400e9), (2**30, 400e9))})  # fmt: skip


def test_the_link_a_bench_run_cached_reaches_the_command_not_the_reading(tmp_path, capsys):
    gpu_rank_trace(tmp_path / "run_rank0.json.gz", 0, late_us=0)
    gpu_rank_trace(tmp_path / "run_rank1.json.gz", 1, late_us=50)
    key = caches.link_curve_key("NVIDIA H200", "nccl", 2)
    caches.store_link_curve(key, FLAT_400.to_csv())
    # one trace reads the same on every machine: the reading opens no cache ...
    files = {r: tmp_path / f"run_rank{r}.json.gz" for r in (0, 1)}
    reading = read_run(tmp_path / "run", files)
    assert reading["collective"]["bus_GBps"] and reading["collective"]["link_GBps"] is None
    # ... the command looks the link up and hands it over
    assert explain.main([str(tmp_path / "run")]) == 0
    assert "the link at this size and kind: 400 GB/s (test):" in capsys.readouterr().out


def test_a_missing_rank_is_a_problem_not_a_crash(tmp_path):
    gpu_rank_trace(tmp_path / "run_rank1.json.gz", 1, late_us=0)
    result = read_run(tmp_path / "run", {1: tmp_path / "run_rank1.json.gz"})
    assert result["problems"] == ["1 rank(s) of 2 missing (0): the reading covers 1 rank(s)"]
    assert "PROBLEM" in ranks_text.text(result)


def test_a_damaged_rank_trace_is_one_line_exit_2(tmp_path, capsys):
    gpu_rank_trace(tmp_path / "run_rank0.json.gz", 0, late_us=0)
    (tmp_path / "run_rank1.json").write_text('{"traceEvents": [')
    assert explain.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1


REAL = Path(__file__).parent / "fixtures" / "h200x2" / "05_tp_mlp"


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_real_two_gpu_rank_traces(mode):
    """Recorded on 2 H200s (NCCL, NVLink; see tests/fixtures/README.md): every rank holds the
    declared expectation, and the multi-rank reading finds the all-reduce and its bandwidth."""
    stem = REAL / f"b64_s128_d768_h3072_bf16_tp2_{mode}"
    lesson = load_script("05_tp_mlp")
    runs = runs_at(stem)
    (paths,) = runs.values()
    assert sorted(paths) == [0, 1]
    for path in paths.values():
        trace = trace_reader.load(path)
        assert trace.meta["distributedInfo"]["world_size"] == 2
        verdict = expectations.check(trace, lesson.expectation(mode, "nccl", 2))
        assert verdict.ok, verdict.mismatches
        for step in trace.steps:
            (nccl,) = [i for i in step.gpu if i.klass.cls == "collective"]
            assert nccl.klass.detail.startswith("AllReduce Sum bf16")
    result = read_run(stem, paths)
    assert result["problems"] == [] and result["device"] == "NVIDIA H200"
    coll = result["collective"]
    assert coll["bytes"] == 64 * 128 * 768 * 2  # the [64, 128, 768] bf16 output, 12.6 MB
    assert 50 < coll["bus_GBps"] < 1000  # NVLink between the two H200s
    assert all(r["comm_us"] > 0 and r["compute_us"] > 0 for r in result["per_rank"])
