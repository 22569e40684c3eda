"""Every failure is one clear line and leaves nothing behind: files, folders, the profiler's own
temporary files. The lessons run for real on the CPU; only the failure is staged."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from common import check, cli, outputs, share
from tests.helpers import ROOT, load_script, run_script

LINEAR = ["--batch", "8", "--in_dim", "4", "--out_dim", "6"]


def files_under(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


ATTENTION = ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"]
CPU_LESSONS = {  # the lessons that run in this process on a CPU, at a tiny shape
    "01_matmul_add": ["--size", "8"],
    "02_linear": LINEAR,
    "03_simple_mlp": ["--batch", "2", "--seq", "3", "--dim", "8", "--hidden", "16"],
    "04_a_naive_attention": ATTENTION,
    "04_b_inplace_ops_attention": ATTENTION,
    "04_c_sdpa_attention": [*ATTENTION, "--backend", "math"],
    "06_train_step": [],
}


SLOW = pytest.mark.slow  # 06's training step: ~9 s on two busy cores


@pytest.mark.parametrize(
    "lesson", [pytest.param(n, marks=SLOW) if n == "06_train_step" else n for n in CPU_LESSONS]
)
def test_the_lesson_itself_drives_the_profiler_as_the_posts_teach(lesson, tmp_path, monkeypatch):
    """The calls the posts teach are the lesson's own, not hidden in common/: its `profile`
    with an explicit schedule, a record_function per step, prof.step() for every step the
    schedule runs, the trace exported and the table printed from key_averages."""
    module, calls = load_script(lesson), []
    real_schedule = module.schedule

    class Recorded(module.profile):
        def step(self):
            calls.append("step")
            super().step()

        def export_chrome_trace(self, path):
            calls.append("export_chrome_trace")
            return super().export_chrome_trace(path)

        def key_averages(self, *args, **kwargs):
            calls.append("key_averages")
            return super().key_averages(*args, **kwargs)

    def schedule(**kwargs):
        calls.append(("schedule", kwargs["wait"] + kwargs["warmup"] + kwargs["active"]))
        return real_schedule(**kwargs)

    def record_function(name, *args):
        calls.append(("record_function", name))
        return torch.profiler.record_function(name, *args)

    monkeypatch.setattr(module, "profile", Recorded)
    monkeypatch.setattr(module, "schedule", schedule)
    monkeypatch.setattr(module, "record_function", record_function)
    argv = [*CPU_LESSONS[lesson], "--traces-dir", str(tmp_path)]
    assert run_script(lesson, *argv) == 0
    (_, steps_run), *_ = [c for c in calls if c[0] == "schedule"]
    assert calls.count("step") == steps_run  # one prof.step() per step the schedule runs
    annotations = getattr(module, "PHASES", None) or (module.ANNOTATION,)  # 06: one per phase
    assert {("record_function", name) for name in annotations} <= set(calls)
    assert calls.count("export_chrome_trace") == calls.count("key_averages") >= 1


def test_matmul_add_keeps_only_the_last_output_alive(tmp_path, monkeypatch):
    """Keeping every step's output made the caching allocator grow inside the recorded
    steps (cudaMalloc in the trace): at most one earlier output may be alive per call."""
    import weakref

    lesson = load_script("01_matmul_add")
    real, alive_at_call, made = lesson.matmul_add, [], []

    def tracking(x, w, b):
        alive_at_call.append(sum(ref() is not None for ref in made))
        out = real(x, w, b)
        made.append(weakref.ref(out))
        return out

    monkeypatch.setattr(lesson, "matmul_add", tracking)
    argv = ["--size", "8", "--warmup", "--traces-dir", str(tmp_path)]
    assert run_script("01_matmul_add", *argv) == 0
    # 3 warm-up calls, then wait + warmup + active = 5 steps; the reference check calls it too
    profiled = alive_at_call[3:8]
    assert len(profiled) == 5 and max(profiled) <= 1


def test_profiler_tmp_file_and_folder_are_removed_when_export_fails(tmp_path, monkeypatch):
    def export_tmp_then_fail(self, path):
        with open(f"{path}.tmp", "w") as f:  # what Kineto writes before renaming
            f.write('{"traceEvents": [')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export_tmp_then_fail)
    # a full disk is the machine's answer, not a bug: one line, exit 2 (test_hostile_lessons.py)
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path / "new" / "traces")) == 2
    assert files_under(tmp_path) == []  # not even the folders the run would have created


def test_an_export_that_silently_writes_nothing_is_an_error(tmp_path, monkeypatch):
    # Kineto reports a failed rename of its .tmp file only in its log, not as an exception.
    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", lambda self, path: None)
    with pytest.raises(OSError, match="was not written"):
        run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path))
    assert files_under(tmp_path) == []


def test_trace_is_not_published_without_its_table(tmp_path, monkeypatch):
    real_replace, calls = os.replace, []

    def second_rename_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(outputs.os, "replace", second_rename_fails)
    with pytest.raises(OSError):
        run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path))
    assert files_under(tmp_path) == []


def test_a_failed_run_leaves_no_empty_script_folder(tmp_path, monkeypatch):
    lesson = load_script("02_linear")
    monkeypatch.setattr(lesson, "reference", lambda x, linear: torch.zeros(8, 6))  # wrong
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path)) == 1
    assert files_under(tmp_path) == []


@pytest.mark.parametrize(
    ("folder", "message"),
    [
        ("x" * 300, "longer than the"),
        ("line\nbreak", "contains a control character"),
        ("bad\udcffbyte", "is not valid UTF-8"),
    ],
    ids=["name-too-long", "newline", "non-utf8"],
)
def test_paths_that_would_fail_after_the_work_are_refused_before_it(
    folder, message, tmp_path, capsys
):
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path / folder)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert files_under(tmp_path) == []


def test_paths_longer_than_the_file_system_allows_are_refused_up_front(tmp_path, capsys):
    deep = tmp_path.joinpath(*["d" * 200] * 21)  # each name legal, the whole path too long
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(deep)) == 2
    assert "the path would exceed" in capsys.readouterr().err
    assert files_under(tmp_path) == []


def test_ctrl_c_is_one_line_exit_130_and_nothing_written(tmp_path, monkeypatch, capsys):
    lesson = load_script("02_linear")
    calls = []

    class Interrupting(torch.nn.Linear):
        def forward(self, x):
            calls.append(1)
            if len(calls) == 6:  # inside the profiled loop
                raise KeyboardInterrupt
            return super().forward(x)

    monkeypatch.setattr(lesson.nn, "Linear", Interrupting)
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path)) == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"
    assert files_under(tmp_path) == []


@pytest.mark.slow
def test_sigint_to_a_real_process(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "02_linear.py",
            # steps of a few ms: 10000 of them outlast a loaded machine's late signal
            *["--batch", "256", "--in_dim", "256", "--out_dim", "256"],
            "--active",
            "10000",
            "--traces-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        # unbuffered: a piped stdout would hold the line below until exit
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # Ctrl-C's default action, also where the test run ignores SIGINT (started in the
        # background without job control): Python installs its handler only over the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # wait until the profiled loop has started
        if line.startswith("correctness:"):
            break
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.strip().splitlines()[-1] == "error: interrupted (Ctrl-C)"
    assert "Traceback" not in err
    assert files_under(tmp_path) == []


@pytest.mark.slow  # 02 at [4000, 4000] run for real after the refusal: seconds
def test_memory_estimate_refuses_what_does_not_fit(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(cli, "available_ram", lambda: 200 * 2**20)
    argv = ["--batch", "4000", "--in_dim", "1", "--out_dim", "4000"]  # ~32 MB out, ~64 MB ref
    assert run_script("02_linear", *argv, "--traces-dir", str(tmp_path)) == 2
    assert "choose smaller sizes" in capsys.readouterr().err
    monkeypatch.setattr(cli, "available_ram", lambda: 8 * 2**30)
    assert run_script("02_linear", *argv, "--traces-dir", str(tmp_path)) == 0


@pytest.mark.slow
def test_memory_estimate_covers_what_the_run_really_allocates(tmp_path):
    """Peak RSS growth of a real run stays under the lesson's estimate (which once missed
    6x: the check's float64 copies and the outputs warm-up keeps)."""
    code = f"""
import resource, sys
sys.argv = ["02_linear.py"]
import torch, common.cli as cli
from tests.helpers import load_script, run_script
lesson = load_script("02_linear")
estimates = []
real = cli.ensure_fits
cli.ensure_fits = lambda n, run, **kw: (
    estimates.append(n + cli.WORKSPACE_BYTES), real(n, run, **kw))[1]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
rc = run_script("02_linear", "--batch", "8000", "--in_dim", "1", "--out_dim", "8000",
                "--traces-dir", {str(tmp_path)!r})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(rc, after - before, estimates[0])
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    rc, grew, estimate = map(int, proc.stdout.split()[-3:])
    assert rc == 0
    assert grew <= estimate, (
        f"the run grew {grew / 2**20:.0f} MiB, estimated {estimate / 2**20:.0f}"
    )


def test_relative_error_works_in_slices_on_large_outputs(monkeypatch):
    monkeypatch.setattr(check, "CHUNK", 1000)
    ref = torch.randn(123, 77)
    out = ref.to(torch.bfloat16)
    whole = float((out.double() - ref.double()).norm() / ref.double().norm())
    assert check.relative_error(out, ref) == pytest.approx(whole, rel=1e-9)
    out[100, 5] = float("inf")
    assert check.relative_error(out, ref) == float("inf")


def test_token_straddling_the_cut_does_not_leak(monkeypatch, tmp_path, capsys):
    token = "hf_" + "s" * 40
    monkeypatch.setenv("HF_TOKEN", token)

    def refuse(*args, **kwargs):
        raise ConnectionError("x" * 170 + f" Bearer {token}")  # the cut at 200 falls inside

    monkeypatch.setattr(share.hf, "create_bucket", refuse)
    (tmp_path / "a.json").write_text("{}")
    assert share.main([str(tmp_path), "-b", "traces"]) == 1
    err = capsys.readouterr().err
    assert "hf_sss" not in err and "***" in err


@pytest.mark.parametrize("bucket", ["", "two words", "a--b", "x" * 97])
def test_share_command_checks_the_bucket_name_locally(bucket, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        share.main([str(tmp_path), "-b", bucket])
    assert exit_.value.code == 2
    assert "is not a bucket name" in capsys.readouterr().err


def test_printed_hints_work_from_another_folder(tmp_path, capsys, monkeypatch):
    assert run_script("02_linear", *LINEAR, "--traces-dir", str(tmp_path)) == 0
    trace = tmp_path / "02_linear" / "b8_in4_out6_bf16_eager_cpu.json"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    hint = cli.command_hint("explain", trace)
    assert hint.startswith(f"uv run --project {ROOT} explain /")
    # The project installs its packages and the console command `explain` beside the
    # interpreter, so the hint's command runs from any folder.
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "explain"), str(trace)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "CPU dispatch chain" in proc.stdout


@pytest.mark.slow
def test_an_eager_lesson_does_not_load_inductor(tmp_path):
    """torch's profiler probes `hasattr(torch, "_inductor")` on its first step, which imported
    Inductor and Dynamo (5 s of an 11 s run on an H100) in lessons that never compile."""
    code = f"""
import sys
from tests.helpers import run_script
rc = run_script("02_linear", "--batch", "8", "--traces-dir", {str(tmp_path)!r})
print(rc, "torch._inductor" in sys.modules, "torch._dynamo" in sys.modules)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.stdout.split()[-3:] == ["0", "False", "False"], proc.stderr[-2000:]
    trace = tmp_path / "02_linear" / "b8_in32_out64_bf16_eager_cpu.json"
    assert json.loads(trace.read_text())["traceEvents"]  # the profiler still recorded


@pytest.mark.parametrize(
    "lesson, argv",
    [
        ("02_linear", LINEAR),
        ("04_b_inplace_ops_attention", ["--batch", "1", "--heads", "2", "--seq", "16"]),
        (
            "04_c_sdpa_attention",
            ["--batch", "1", "--heads", "2", "--seq", "16", "--backend", "all"],
        ),
    ],
)
def test_the_peak_memory_printed_counts_the_profiled_steps_only(
    lesson, argv, tmp_path, monkeypatch
):
    """The peak is reset after the float32 reference is checked and before each profiled loop
    (each backend's, under 04_c's --backend all), so it is the forward's, not the reference's
    or the previous backend's."""
    from common import profiling

    module, events = load_script(lesson), []

    def logged(name, real):
        def call(*args, **kwargs):
            events.append(name)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(check, "against_reference", logged("check", check.against_reference))
    monkeypatch.setattr(
        profiling, "reset_peak_memory", logged("reset", profiling.reset_peak_memory)
    )
    monkeypatch.setattr(module, "profile", logged("profile", module.profile))
    assert run_script(lesson, *argv, "--traces-dir", str(tmp_path)) == 0
    assert events and len(events) % 3 == 0
    assert events == ["check", "reset", "profile"] * (len(events) // 3)


@pytest.mark.slow
def test_importing_the_plumbing_changes_nothing_in_torch():
    """A reader who copies a lesson's visible loop must get what the lesson got: importing
    common sets no Inductor variable and patches no profiler method; the calls that need those
    settings make them (and the compile line says what it measured)."""
    code = """
import os, sys
os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
from torch.profiler import profiler
before = profiler._KinetoProfile.start_trace
import common, common.cli, common.profiling, common.outputs, common.check
assert "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ
assert profiler._KinetoProfile.start_trace is before
print("clean")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "clean", proc.stderr


@pytest.mark.slow  # compiles: Inductor's first compile in a process, ~6 s on two busy cores
def test_the_compile_line_says_where_inductor_compiled(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    assert run_script("02_linear", *LINEAR, "--compile", "--traces-dir", str(tmp_path)) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(text for text in out if text.startswith("compile:"))
    assert "in this process, one thread (TORCHINDUCTOR_COMPILE_THREADS=1" in line


@pytest.mark.parametrize(
    "exits, code",
    [({0: 130, 1: 2}, 2), ({0: 2, 1: 130}, 2), ({0: 130, 1: 130}, 130), ({0: 130, 1: 1}, 1)],
    ids=["rank 0 stopped after rank 1's bad input", "rank 0's own", "Ctrl-C", "rank 1's bug"],
)
def test_the_self_launch_passes_on_the_failure_not_torchruns_stop_of_the_others(
    exits, code, monkeypatch
):
    """torchrun stops the other ranks with SIGTERM once one fails, and a rank it stopped exits
    130: a race on a busy machine made the lowest rank's 130 the run's code where rank 1's bad
    input (2) was the failure."""
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from common import torchrun

    failures = {r: ProcessFailure(r, 1000 + r, c, "<N/A>") for r, c in exits.items()}

    def failed(args):
        raise ChildFailedError("05_tp_mlp.py", failures)

    monkeypatch.setattr(torch_run, "run", failed)
    try:
        assert torchrun.launcher_main(["--nproc-per-node", "2", "05_tp_mlp.py"]) == code
    finally:
        logging.disable(logging.NOTSET)  # the launcher silences logging in its own process
