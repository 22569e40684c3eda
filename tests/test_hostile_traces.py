"""Hostile input (tests/hostile.py says the rules) against the reader's commands: folder
walks, world sizes and ranks no job has, traces that cannot be one job, numbers Python will not
convert, and the commands' own exits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.hostile import (
    default_signals,
    events,
    files,
    outcome,
    rank_files,
    run_process,
    said_once,
    time_bound,  # noqa: F401  (autouse: a hang fails, never blocks)
    trace_file,
)
from tracereader.commands import compare, explain

# --- 1. the folder walk: links, loops, depth, huge trees -------------------------------------


def loop_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "a").symlink_to(".")
    (folder / "b").symlink_to(".")
    (folder / "up").symlink_to("..")
    return folder


def outside_link(tmp_path: Path) -> Path:
    """A folder whose only runs are behind a link to a folder outside it."""
    rank_files(tmp_path / "elsewhere" / "iteration_1")
    folder = tmp_path / "tree"
    folder.mkdir()
    (folder / "iteration_1").symlink_to(tmp_path / "elsewhere" / "iteration_1")
    return folder


def too_deep(tmp_path: Path) -> Path:
    rank_files(tmp_path / "deep" / "a" / "b")
    return tmp_path / "deep"


def dangling(tmp_path: Path) -> Path:
    folder = tmp_path / "dangling"
    folder.mkdir()
    (folder / "x_rank0.json").symlink_to(tmp_path / "nowhere")
    return folder


def fifo(tmp_path: Path) -> Path:
    folder = tmp_path / "fifo"
    folder.mkdir()
    os.mkfifo(folder / "x_rank0.json")
    os.mkfifo(folder / "x_rank1.json")
    return folder


def many_names(tmp_path: Path) -> Path:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(FEW_ENTRIES + 1):
        (folder / f"f{i}").touch()
    return folder


def duplicate_ranks(tmp_path: Path) -> Path:
    folder = tmp_path / "dup"
    rank_files(folder, "x")
    (folder / "x_rank00.json").write_text((folder / "x_rank0.json").read_text())
    return folder


FEW_ENTRIES = 64

WALKS = {
    "link loop": (loop_folder, "is a folder without rank traces"),
    "link out of the tree": (outside_link, "is a folder without rank traces"),
    "three levels down": (too_deep, "is a folder without rank traces"),
    "dangling rank link": (dangling, "is a folder without rank traces"),
    "FIFOs named as ranks": (fifo, "is a folder without rank traces"),
    "too many names": (many_names, "is a folder without rank traces"),
    "rank0 beside rank00": (duplicate_ranks, "both name rank 0"),
}


@pytest.mark.parametrize("case", list(WALKS))
@pytest.mark.parametrize("command", ["explain", "explain --json", "compare A DIR", "compare DIR A"])
def test_folder_walks_are_bounded_and_refused_in_one_line(
    case, command, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("tracereader.trace.runs.MAX_ENTRIES", FEW_ENTRIES)  # the bound, smaller
    make, words = WALKS[case]
    folder = make(tmp_path)
    other = trace_file(tmp_path / "a.json")
    before = files(tmp_path)
    argv = {
        "explain": [str(folder)],
        "explain --json": [str(folder), "--json"],
        "compare A DIR": [str(other), str(folder)],
        "compare DIR A": [str(folder), str(other)],
    }[command]
    main = explain.main if command.startswith("explain") else compare.main
    started = time.monotonic()
    code, out, err = outcome(main, argv, capsys)
    if words == "is a folder without rank traces" and command.startswith("compare"):
        words = str(folder)  # compare names the folder it could not use
    said_once(code, err, words=words)
    assert out == ""
    assert time.monotonic() - started < 10
    assert files(tmp_path) == before


def test_a_huge_tree_is_answered_at_once(capsys):
    started = time.monotonic()
    code, _, err = outcome(explain.main, ["/usr"], capsys)
    said_once(code, err, words="is a folder without rank traces")
    assert time.monotonic() - started < 5


def test_iteration_folders_one_level_down_are_still_read(tmp_path, capsys):
    rank_files(tmp_path / "iteration_4")
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and "2 of 2 ranks" in out, err


# --- 1. world sizes no job has ----------------------------------------------------------------

WORLDS = [10**12, -5, 0, -(10**12), 2**64, True, "2", 2.0, None, [2]]


@pytest.mark.parametrize("world", WORLDS, ids=repr)
def test_a_world_size_no_job_has_is_said_not_built(world, tmp_path, capsys):
    trace_file(tmp_path / "x_rank0.json", {"rank": 0, "world_size": world, "backend": "gloo"})
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and err == "" and "Traceback" not in out
    assert "1 of 1 ranks" in out  # the world taken as unknown, the rank read
    if world is not None:
        assert f"records world_size {world!r}"[:40] in out and "taken as unknown" in out
    assert f"of {world} ranks" not in out or world in (None,)


@pytest.mark.parametrize("rank", [-1, 7, 10**15, "0"], ids=repr)
def test_a_rank_that_cannot_be_is_said(rank, tmp_path, capsys):
    trace_file(tmp_path / "x_rank0.json", {"rank": rank, "world_size": 2, "backend": "gloo"})
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "gloo"})
    code, out, err = outcome(explain.main, [str(tmp_path)], capsys)
    assert code == 0 and err == ""
    said = " ".join(out.split())  # explain wraps its lines at 100 characters
    assert f"records rank {rank!r}" in said and "rank taken from the file name" in said


# --- 4. traces that cannot be ranks of one job ------------------------------------------------


def two_launches(tmp_path: Path) -> Path:
    trace_file(tmp_path / "x_rank0.json", {"rank": 0, "world_size": 2, "backend": "gloo"},
               collective=True)  # fmt: skip
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "nccl"},
               collective=True)  # fmt: skip
    return tmp_path / "x"


def hours_apart(tmp_path: Path) -> Path:
    rank_files(tmp_path, "x", world=1)
    trace_file(tmp_path / "x_rank1.json", {"rank": 1, "world_size": 2, "backend": "gloo"},
               collective=True, start=3 * 3600e6)  # fmt: skip
    info = {"rank": 0, "world_size": 2, "backend": "gloo"}
    trace_file(tmp_path / "x_rank0.json", info, collective=True)
    return tmp_path / "x"


def no_collectives(tmp_path: Path) -> Path:
    trace_file(tmp_path / "l" / "b1_eager.json")  # a lesson's eager and compiled traces
    trace_file(tmp_path / "l" / "b1_compile.json")
    return tmp_path / "l"


NOT_ONE_JOB = {
    "different distributedInfo": (two_launches, "different distributedInfo"),
    "first steps hours apart": (hours_apart, "10,800 s apart"),
    "no collective at all": (no_collectives, "no rank issued a collective"),
}


@pytest.mark.parametrize("case", list(NOT_ONE_JOB))
@pytest.mark.parametrize("as_json", [False, True])
def test_traces_that_cannot_be_one_job_are_said_so(case, as_json, tmp_path, capsys):
    make, words = NOT_ONE_JOB[case]
    path = make(tmp_path)
    code, out, err = outcome(explain.main, [str(path)] + (["--json"] if as_json else []), capsys)
    assert code == 0 and err == ""
    assert words in out


def test_ranks_of_one_job_are_not_doubted(tmp_path, capsys):
    code, out, _ = outcome(explain.main, [str(rank_files(tmp_path))], capsys)
    assert code == 0 and "PROBLEM" not in out


# --- 2. numbers Python will not convert --------------------------------------------------------

HUGE = "9" * 5000


@pytest.mark.parametrize(
    "where",
    ["ts", "dur", "pid", "tid", "baseTimeNanoseconds", "args", "world_size"],
)
def test_a_number_past_the_int_digit_limit_is_a_malformed_event(where, tmp_path, capsys):
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events()}
    mm = doc["traceEvents"][1]
    if where == "baseTimeNanoseconds":
        doc[where] = "@HUGE@"
    elif where == "world_size":
        doc["distributedInfo"][where] = "@HUGE@"
    elif where == "args":
        mm["args"] = {"n": "@HUGE@"}
    else:
        mm[where] = "@HUGE@"
    text = json.dumps(doc).replace('"@HUGE@"', HUGE)
    path = tmp_path / "x_rank0.json"
    path.write_text(text)
    for argv in ([str(path)], [str(path), "--json"], [str(tmp_path)]):
        code, out, err = outcome(explain.main, argv, capsys)
        assert code == 0 and err == "" and "Traceback" not in out, err


# --- 2. the commands' own exits: Ctrl-C, a full disk, a closed pipe ---------------------------


@pytest.mark.parametrize("command", [explain, compare])
@pytest.mark.parametrize(
    ("raised", "want", "words"),
    [
        (KeyboardInterrupt, 130, "interrupted (Ctrl-C)"),
        (OSError(28, "No space left on device"), 2, "cannot write the output"),
        (OSError(5, "Input/output error"), 2, "cannot write the output"),
    ],
    ids=["ctrl-c", "disk full", "io error"],
)
def test_the_console_command_says_an_interrupt_or_a_failed_write_in_one_line(
    command, raised, want, words, monkeypatch, capsys
):
    def main():
        raise raised

    monkeypatch.setattr(command, "main", main)
    monkeypatch.setattr("tracereader.commands.shared.stdout_closed", lambda: 1)
    with pytest.raises(SystemExit) as exit_:
        command.cli()
    said_once(exit_.value.code, capsys.readouterr().err, want=want, words=words)


FIXTURE = "tests/fixtures/h100/02_linear/b1024_in32_out64_bf16_compile.json.gz"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["explain", "compare"])
def test_stdout_to_dev_full_is_one_line_exit_2(command):
    argv = ["-m", f"tracereader.commands.{command}", FIXTURE] + [FIXTURE] * (command == "compare")
    with open("/dev/full", "w") as full:
        proc = run_process(argv, stdout=full, timeout=60)
    said_once(proc.returncode, proc.stderr, words="No space left on device")


@pytest.mark.slow
def test_ctrl_c_in_explain_is_exit_130_and_one_line(tmp_path):
    """A real SIGINT while explain reads: a trace large enough to still be reading."""
    big = tmp_path / "big.json"
    step = events()
    many = [dict(e, ts=e["ts"] + i * 200) for i in range(60_000) for e in step]
    big.write_text(json.dumps({"traceEvents": many}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracereader.commands.explain", str(big)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=default_signals,  # Ctrl-C as in a terminal, whatever this run inherited
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.6)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("explain finished before the signal came")
    said_once(proc.returncode, err, want=130, words="interrupted")


# --- 1. ops nested thousands deep -----------------------------------------------------------


def nested_ops(path: Path, depth: int, kernel_each: bool = False) -> Path:
    """One step holding `depth` ops, each inside the one before it, and a kernel the innermost
    launched: a recursion traced op by op (aten::linear: the backward's recomputation is
    looked for above each of them too). With `kernel_each`, every op launches a kernel of its
    own (a launch just after it starts, before the next op does): every rule that reads a
    kernel's launcher and what is above or below it meets the whole depth."""
    if kernel_each:
        return _nested_launching(path, depth)
    found = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
         "dur": 10 * depth + 1000, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": depth + 5, "dur": 5,
         "pid": 1, "tid": 1, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": depth + 20, "dur": 100, "pid": 0,
         "tid": 7, "args": {"stream": 7, "device": 0, "correlation": 1}},
    ]  # fmt: skip
    found += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 1 + i, "dur": 10 * depth - 2 * i,
         "pid": 1, "tid": 1}
        for i in range(depth)
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": found}))
    return path


ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>()"
LAUNCHING = ("aten::linear", "aten::add", "aten::clone")  # round and round, all the way down


def _nested_launching(path: Path, depth: int) -> Path:
    """Op i opens at 4i + 1 and launches at 4i + 2 (op i + 1 opens at 4i + 5); its GPU work
    runs at 4i + 10 for 3 us, one item after another on one stream: an elementwise kernel (a
    clone's: a copy), all under a backward node, so that the recompute, unfused-chain, clone
    and library rules each ask about every launcher."""
    found = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0,
         "dur": 40 * depth + 1000, "pid": 1, "tid": 1},
    ]  # fmt: skip
    for i in range(depth):
        name = "autograd::engine::evaluate_function: AddBackward0" if i == 0 else LAUNCHING[i % 3]
        copy = name == "aten::clone"
        found += [
            {"ph": "X", "cat": "cpu_op", "name": name, "ts": 4 * i + 1, "dur": 40 * depth - 8 * i,
             "pid": 1, "tid": 1, "args": {"Input Dims": [[64, 64]], "Input type": ["float"]}},
            {"ph": "X", "cat": "cuda_runtime", "ts": 4 * i + 2, "dur": 2, "pid": 1, "tid": 1,
             "name": "cudaMemcpyAsync" if copy else "cudaLaunchKernel",
             "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "gpu_memcpy" if copy else "kernel", "ts": 4 * i + 10, "dur": 3,
             "name": "Memcpy DtoD (Device -> Device)" if copy else ADD, "pid": 0, "tid": 7,
             "args": {"stream": 7, "device": 0, "correlation": i + 1, "bytes": 16384}},
        ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": found}))
    return path


@pytest.mark.parametrize("flags", [[], ["--json"], ["--ops", "--all-steps"]], ids=" ".join)
@pytest.mark.parametrize(
    "kernel_each, shown", [(False, "aten::linear"), (True, "aten::clone")],
    ids=["one launch", "each launching"],
)  # fmt: skip
def test_ops_nested_thirty_thousand_deep_are_read(kernel_each, shown, flags, tmp_path, capsys):
    """Each op's phase (and any backward node above it) was found by walking all its
    ancestors: quadratic in the depth (over 40 s at this depth, a hang to the time bound).
    Where every op of the nest launches, the rules that ask what is around a launcher (the
    backward node, the recomputed forward op, an optimizer, a clone, an item()) or under an
    op (a library's own work) walked the nest once per op too (about 30 s at 8,000 deep, a
    quarter of an hour at this depth). Now each op is walked once per question."""
    path = nested_ops(tmp_path / "deep.json", 30_000, kernel_each=kernel_each)
    code, out, err = outcome(explain.main, [str(path), *flags], capsys)
    assert code == 0 and err == "", err
    if flags == ["--json"]:
        assert json.loads(out)["traces"][0]["steps"]
    else:
        assert shown in out and "1 recorded steps" in out


def test_a_cpu_only_checkpointed_step_is_read(tmp_path, capsys):
    """Gradient checkpointing on the CPU: the recomputed forward launched no GPU work, so its
    cost is the host's time alone (it was a KeyError)."""
    path = tmp_path / "ck.json"
    found = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000,
         "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 10, "dur": 200, "pid": 1,
         "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: "
         "CheckpointFunctionBackward", "ts": 300, "dur": 600, "pid": 1, "tid": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 310, "dur": 400, "pid": 1,
         "tid": 2},
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": found}))
    code, out, err = outcome(explain.main, [str(path)], capsys)
    assert code == 0 and err == "", err
    assert "recomputation: gradient checkpointing" in out and "of the host's time a step" in out


# --- 2. a shape, a grid or a byte count no GPU has --------------------------------------------

BEYOND_FLOAT = 10**400  # an int float() refuses (OverflowError), within the int digit limit


def huge_shapes(path: Path) -> Path:
    found = events()
    mm = found[1]
    mm["args"] = {"Input Dims": [[BEYOND_FLOAT, 2], [2, BEYOND_FLOAT]],
                  "Input type": ["float", "float"]}  # fmt: skip
    for corr, (cat, name, args) in enumerate(
        [
            ("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32",
             {"grid": [BEYOND_FLOAT, 1, 1], "block": [128, 1, 1],
              "registers per thread": BEYOND_FLOAT}),
            ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", {"bytes": BEYOND_FLOAT}),
        ],
        start=1,
    ):  # fmt: skip
        found.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                      "ts": 2 + corr, "dur": 1, "pid": 1, "tid": 1,
                      "args": {"correlation": corr}})  # fmt: skip
        found.append({"ph": "X", "cat": cat, "name": name, "ts": 30 * corr, "dur": 10,
                      "pid": 0, "tid": 7,
                      "args": {"correlation": corr, "stream": 7, "device": 0, **args}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": found}))
    return path


@pytest.mark.parametrize("command", ["explain", "explain --json", "explain --kernels", "compare"])
def test_shapes_and_sizes_past_int64_are_left_out_not_a_traceback(command, tmp_path, capsys):
    path = str(huge_shapes(tmp_path / "huge.json"))
    other = str(trace_file(tmp_path / "plain.json"))
    argv = {
        "explain": [path],
        "explain --json": [path, "--json"],
        "explain --kernels": [path, "--kernels"],
        "compare": [other, path],
    }[command]
    main = compare.main if command == "compare" else explain.main
    code, out, err = outcome(main, argv, capsys)
    assert code == 0 and err == "", err
    assert "sm90_xmma_gemm" in out  # the kernel is read; its impossible numbers are not


# --- 3. the link-curve cache: not what we wrote -----------------------------------------------


def deep_json(file: Path) -> None:
    file.write_text("[" * 100_000 + "]" * 100_000)


def long_csv_field(file: Path) -> None:
    key = "NVIDIA H200 | gloo | 2 ranks | curve"
    curve = f"# {key[:-8]} | x\nkind,bytes,bus_GBps\nall-reduce,{'1' * 200_000},3\n"
    file.write_text(json.dumps({key: curve}))


def fifo_cache(file: Path) -> None:
    os.mkfifo(file)


def endless_cache(file: Path) -> None:
    file.symlink_to("/dev/zero")


CACHES = {
    "nested 100,000 deep": (deep_json, "nested deeper than"),
    "a 200 KB CSV field": (long_csv_field, "field larger than field limit"),
    "a FIFO": (fifo_cache, "a FIFO"),
    "a link to /dev/zero": (endless_cache, "a device"),
}


@pytest.mark.parametrize("case", list(CACHES))
def test_a_link_cache_not_ours_is_a_note_and_ignored(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    make, words = CACHES[case]
    cache = tmp_path / "cache" / "profiling-pytorch" / "links.json"
    cache.parent.mkdir(parents=True)
    make(cache)
    stem = rank_files(tmp_path / "run")
    for rank in (0, 1):  # the device named: the run's link is looked up in the cache
        file = tmp_path / "run" / f"run_rank{rank}.json"
        doc = json.loads(file.read_text())
        doc["deviceProperties"] = [{"id": rank, "name": "NVIDIA H200"}]
        file.write_text(json.dumps(doc))
    code, out, err = outcome(explain.main, [str(stem)], capsys)
    assert code == 0 and "2 of 2 ranks" in out and "NVIDIA H200" in out, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"note: the cache {cache} is ignored"), err
    assert words in lines[0]


# --- 4. malformed allocator events -----------------------------------------------------------


def memory_event(ts: float = 5.0, tid: object = 1, **args) -> dict:
    fields = {"Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048, "Addr": 4096,
              "Device Type": 1, "Device Id": 0, **args}  # fmt: skip
    return {"ph": "i", "s": "t", "name": "[memory]", "ts": ts, "pid": 1, "tid": tid,
            "args": fields}  # fmt: skip


MEMORY = {  # what the trace adds to a step, made when the case runs; what the reading says
    "NaN timestamps": (lambda: [memory_event(ts=float("nan"))] * 3, "ts: 3"),
    "bytes as strings": (lambda: [memory_event(Bytes="512")] * 3, "Bytes: 3"),
    "totals past int64": (
        lambda: [memory_event(**{"Total Allocated": 2**64})] * 3,
        "Total Allocated: 3",
    ),
    "70,000 devices": (
        lambda: [memory_event(**{"Device Id": i, "Addr": i}) for i in range(70_000)],
        "Device Type/Device Id (past 2 devices): 69,998",
    ),
    "70,000 threads": (  # past the 16-bit thread index
        lambda: [memory_event(tid=i, Addr=i) for i in range(70_000)],
        "pid/tid (past 65536 threads): 4,464",
    ),
    "a thread id that is a list": (lambda: [memory_event(tid=[1])], "pid/tid: 1"),
}


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=[pytest.mark.slow] * c.startswith("70,000")) for c in MEMORY]
)
def test_malformed_memory_events_are_said_malformed(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("tracereader.trace.memory.MAX_DEVICES", 2)  # the bound, smaller
    added, words = MEMORY[case]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"traceEvents": events() + added()}))
    argv = [str(path), "--memory", "--memory-png", str(tmp_path / "m.png")]
    code, out, err = outcome(explain.main, argv, capsys)
    assert "Traceback" not in err and "has no memory events" not in err
    said = err if code == 2 else out
    assert code in (0, 2) and "malformed [memory] events left out" in said, (code, err)
    assert words in said


def test_an_event_order_past_int64_falls_back_to_the_file_order(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"traceEvents": events() + [memory_event(**{"Ev Idx": 2**70})]}))
    argv = [str(path), "--memory", "--memory-png", str(tmp_path / "m.png")]
    code, out, err = outcome(explain.main, argv, capsys)
    assert code == 0 and err == "", err
    assert "cuda:0: 1 events (1 allocations, 0 frees)" in out and "malformed" not in out


# --- 5. kernels overlapping on one stream ----------------------------------------------------


def one_stream(path: Path, spans: list[tuple[float, float]]) -> Path:
    found = events()
    for corr, (ts, dur) in enumerate(spans, start=1):
        found.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                      "ts": 2 + corr, "dur": 1, "pid": 1, "tid": 1,
                      "args": {"correlation": corr}})  # fmt: skip
        found.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32",
                      "ts": ts, "dur": dur, "pid": 0, "tid": 7,
                      "args": {"correlation": corr, "stream": 7, "device": 0}})  # fmt: skip
    path.write_text(json.dumps({"traceEvents": found}))
    return path


def test_kernels_inside_each_other_on_one_stream_are_a_health_problem(tmp_path, capsys):
    path = one_stream(tmp_path / "x.json", [(10, 60), (20, 10), (30, 5), (80, 10)])
    code, out, err = outcome(explain.main, [str(path)], capsys)
    assert code == 0 and err == ""
    assert "PROBLEM: [health] kernels overlap on stream 7: 2 start after another" in out


def test_a_dependent_launch_starting_early_on_its_stream_is_no_problem(tmp_path, capsys):
    """Programmatic dependent launch: the next kernel starts in the tail of the one before it
    and ends after it, on one stream; real H100 and H200 traces show it."""
    path = one_stream(tmp_path / "x.json", [(10, 30), (38, 20), (56, 10)])
    code, out, err = outcome(explain.main, [str(path)], capsys)
    assert code == 0 and err == ""
    assert "kernels overlap" not in out and "PROBLEM" not in out
